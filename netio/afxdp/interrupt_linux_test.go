//go:build linux

package afxdp_test

import (
	"testing"
	"time"

	"github.com/goverbs/goverbs/netio"
	"github.com/goverbs/goverbs/netio/afxdp"
	"github.com/goverbs/goverbs/netio/netiotest"
)

// TestInterruptAndUnwatch: in the default mode the Conn is a netio.Interrupter
// (Interrupt ends a blocked ReadBatch, or else the next one, with ErrInterrupted, and the
// read after waits again) and an Unwatcher (after Unwatch a ReadBatch still waits for and
// gets a datagram, the socket watched again); a busy-poll Conn is neither.
func TestInterruptAndUnwatch(t *testing.T) {
	n := newTestNet(t, 1500)
	x := openXDP(t, n, n.AddrA, afxdp.Options{})
	u := openPeerUDP(t, n)
	send := func(s string) {
		u.WriteBatch([]netio.Message{{Buf: []byte(s), N: len(s), Addr: x.LocalAddr()}})
	}
	netiotest.TestInterrupt(t, x, send)

	msgs := []netio.Message{{Buf: make([]byte, 64)}}
	uw, ok := netio.AsUnwatcher(x)
	if !ok {
		t.Fatal("not an Unwatcher")
	}
	uw.Unwatch()
	go func() { time.Sleep(20 * time.Millisecond); send("unwatched") }()
	if k, err := netiotest.ReadWithin(t, x, msgs, 5*time.Second); k != 1 || string(msgs[0].Buf[:msgs[0].N]) != "unwatched" {
		t.Fatalf("ReadBatch after Unwatch = %d, %v", k, err)
	}

	x.Close() // one socket per queue
	b := openXDP(t, n, n.AddrA, afxdp.Options{BusyPoll: true})
	if _, ok := netio.AsInterrupter(b); ok {
		t.Error("a busy-poll Conn claims to be an Interrupter")
	}
}

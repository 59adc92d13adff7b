//go:build linux

package afxdp_test

import (
	"errors"
	"testing"
	"time"

	"github.com/goverbs/goverbs/netio"
	"github.com/goverbs/goverbs/netio/afxdp"
)

// TestInterruptAndUnwatch: in the default mode the Conn is a netio.Interrupter
// (Interrupt ends a blocked ReadBatch, or else the next one, with ErrInterrupted, and the
// read after waits again) and an Unwatcher (after Unwatch a ReadBatch still waits for and
// gets a datagram, the socket watched again); a busy-poll Conn is neither.
func TestInterruptAndUnwatch(t *testing.T) {
	n := newTestNet(t, 1500)
	x := openXDP(t, n, n.AddrA, afxdp.Options{})
	u := openPeerUDP(t, n)
	intr, ok := netio.AsInterrupter(x)
	if !ok {
		t.Fatal("a default-mode AF_XDP Conn is not an Interrupter")
	}
	msgs := []netio.Message{{Buf: make([]byte, 64)}}
	read := func() (int, error) {
		type result struct {
			n   int
			err error
		}
		done := make(chan result, 1)
		go func() { n, err := x.ReadBatch(msgs); done <- result{n, err} }()
		select {
		case r := <-done:
			return r.n, r.err
		case <-time.After(5 * time.Second):
			t.Fatal("ReadBatch still blocked")
			return 0, nil
		}
	}
	send := func(s string) {
		time.Sleep(20 * time.Millisecond)
		u.WriteBatch([]netio.Message{{Buf: []byte(s), N: len(s), Addr: x.LocalAddr()}})
	}
	go func() { time.Sleep(20 * time.Millisecond); intr.Interrupt() }()
	if k, err := read(); k != 0 || !errors.Is(err, netio.ErrInterrupted) {
		t.Fatalf("blocked ReadBatch after Interrupt = %d, %v", k, err)
	}
	intr.Interrupt()
	if k, err := read(); k != 0 || !errors.Is(err, netio.ErrInterrupted) {
		t.Fatalf("ReadBatch after an earlier Interrupt = %d, %v", k, err)
	}
	go send("after")
	if k, err := read(); k != 1 || string(msgs[0].Buf[:msgs[0].N]) != "after" {
		t.Fatalf("ReadBatch after an interrupted one = %d, %v", k, err)
	}

	uw, ok := netio.AsUnwatcher(x)
	if !ok {
		t.Fatal("not an Unwatcher")
	}
	uw.Unwatch()
	go send("unwatched")
	if k, err := read(); k != 1 || string(msgs[0].Buf[:msgs[0].N]) != "unwatched" {
		t.Fatalf("ReadBatch after Unwatch = %d, %v", k, err)
	}

	x.Close() // one socket per queue
	b := openXDP(t, n, n.AddrA, afxdp.Options{BusyPoll: true})
	if _, ok := netio.AsInterrupter(b); ok {
		t.Error("a busy-poll Conn claims to be an Interrupter")
	}
}

//go:build linux

package netio_test

import (
	"net/netip"
	"testing"

	"github.com/goverbs/goverbs/netio"
	"github.com/goverbs/goverbs/netio/netiotest"
)

func listenUDP(t testing.TB, addr string, opts netio.UDPOptions) netio.Conn {
	t.Helper()
	c, err := netio.ListenUDP(netip.MustParseAddrPort(addr), opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// TestInterrupt: Interrupt ends a ReadBatch blocked in the netpoller with ErrInterrupted,
// or else the next ReadBatch; the Conn then reads as before (netiotest.TestInterrupt). A
// busy-poll Conn is not interruptible; a Tee over an interruptible Conn is.
func TestInterrupt(t *testing.T) {
	c := listenUDP(t, "127.0.0.2:0", netio.UDPOptions{})
	peer := listenUDP(t, "127.0.0.3:0", netio.UDPOptions{})
	netiotest.TestInterrupt(t, c, func(s string) {
		peer.WriteBatch([]netio.Message{{Buf: []byte(s), N: len(s), Addr: c.LocalAddr()}})
	})
	if _, ok := netio.AsInterrupter(listenUDP(t, "127.0.0.2:0", netio.UDPOptions{BusyPoll: true})); ok {
		t.Error("a busy-poll Conn claims to be an Interrupter")
	}
	if _, ok := netio.AsInterrupter(netio.Tee(c, nil)); !ok {
		t.Error("a Tee over an interruptible Conn is not an Interrupter")
	}
}

//go:build linux

package afxdp_test

import (
	"errors"
	"net/netip"
	"testing"
	"time"

	"github.com/goverbs/goverbs/netio"
	"github.com/goverbs/goverbs/netio/afxdp"
	"golang.org/x/sys/unix"
)

// TestNeighbours: a destination nobody answers for fails with EHOSTUNREACH after the
// kernel's resolution was given its time, and without waiting for a while after, until
// the kernel's own later probes find it; a peer whose
// MAC address changes is followed (the cache is read again in the background); the
// first datagram to a peer absent from the table is sent once the kernel resolved it.
func TestNeighbours(t *testing.T) {
	n := newTestNet(t, 1500)
	x := openXDP(t, n, n.AddrA, afxdp.Options{})
	u := openPeerUDP(t, n)
	send := func(to netip.AddrPort) error {
		_, err := x.WriteBatch([]netio.Message{{Buf: []byte("ping"), N: 4, Addr: to}})
		return err
	}
	recv := func() {
		t.Helper()
		p, _ := netio.AsPoller(u)
		if ok, err := p.WaitReadable(3 * time.Second); !ok || err != nil {
			t.Fatalf("nothing arrived: %v, %+v", err, x.Stats())
		}
		u.ReadBatch([]netio.Message{{Buf: make([]byte, 64)}})
	}

	// Nobody has 192.0.2.77.
	ghost := netip.MustParseAddrPort("192.0.2.77:4791")
	start := time.Now()
	err := send(ghost)
	var se *netio.SendError
	if !errors.As(err, &se) || !errors.Is(err, unix.EHOSTUNREACH) {
		t.Fatalf("send to nobody: %v", err)
	}
	t.Logf("unresolved after %v: %v", time.Since(start), err)
	start = time.Now()
	if err := send(ghost); !errors.Is(err, unix.EHOSTUNREACH) || time.Since(start) > 50*time.Millisecond {
		t.Fatalf("second send to nobody: %v after %v, want EHOSTUNREACH at once", err, time.Since(start))
	}
	if s := x.Stats(); s.TxNoNeighbour != 2 {
		t.Fatalf("TxNoNeighbour %d", s.TxNoNeighbour)
	}
	// The address turns up: the kernel, still probing, learns it, and sends go through
	// before the failure has expired.
	n.ip(t, "-n", n.B, "addr", "add", "192.0.2.77/24", "dev", ifB)
	start = time.Now()
	for send(ghost) != nil {
		if time.Since(start) > 3*time.Second {
			t.Fatalf("192.0.2.77 still unresolved: %+v", x.Stats())
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Logf("resolved late, %v after the address appeared", time.Since(start))

	// B is not in A's table yet: the send waits for the kernel's ARP.
	if err := send(u.LocalAddr()); err != nil {
		t.Fatal(err)
	}
	recv()

	// B's MAC address changes; within about a second (neighTTL, then a background read)
	// datagrams follow it. The kernel learns the new address when B next talks to A.
	n.ip(t, "-n", n.B, "link", "set", "vb", "address", "02:00:00:00:0b:0b")
	n.ip(t, "-n", n.A, "neigh", "replace", n.AddrB.String(), "lladdr", "02:00:00:00:0b:0b", "dev", "va", "nud", "reachable")
	deadline := time.Now().Add(3 * time.Second)
	for {
		if err := send(u.LocalAddr()); err != nil {
			t.Fatal(err)
		}
		p, _ := netio.AsPoller(u)
		if ok, _ := p.WaitReadable(50 * time.Millisecond); ok {
			u.ReadBatch([]netio.Message{{Buf: make([]byte, 64)}})
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("datagrams did not follow the peer's new MAC address")
		}
	}
}

// TestWriteRefuses: messages a sender got wrong are refused one by one, never sent with
// stale frame bytes, and the good ones of the batch still go.
func TestWriteRefuses(t *testing.T) {
	n := newTestNet(t, 1500)
	x := openXDP(t, n, n.AddrA, afxdp.Options{})
	u := openPeerUDP(t, n)
	to := u.LocalAddr()
	msgs := []netio.Message{
		{Buf: make([]byte, 4), N: 5, Addr: to},                                         // N beyond Buf
		{Iov: [][]byte{make([]byte, 3)}, N: 4, Addr: to},                               // N beyond the slices
		{Buf: make([]byte, 4), N: -1, Addr: to},                                        // negative
		{Buf: make([]byte, 2000), N: 2000, Addr: to},                                   // over the MTU
		{Buf: []byte("ok"), N: 2, Addr: netip.MustParseAddrPort("[2001:db8::2]:4791")}, // other family
		{Buf: []byte("good"), N: 4, Addr: to},
	}
	k, err := x.WriteBatch(msgs)
	var se *netio.SendError
	if k != len(msgs) || !errors.As(err, &se) || se.Index != 0 || se.Skipped != 5 {
		t.Fatalf("WriteBatch = %d, %v", k, err)
	}
	p, _ := netio.AsPoller(u)
	if ok, _ := p.WaitReadable(3 * time.Second); !ok {
		t.Fatal("the good datagram did not arrive")
	}
	got := []netio.Message{{Buf: make([]byte, 64)}, {Buf: make([]byte, 64)}}
	if n, _ := u.ReadBatch(got); n != 1 || string(got[0].Buf[:got[0].N]) != "good" {
		t.Fatalf("received %d: %q", n, got[0].Buf[:got[0].N])
	}
}

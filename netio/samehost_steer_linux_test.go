//go:build linux

package netio_test

import (
	"bytes"
	"net/netip"
	"testing"
	"time"

	"github.com/goverbs/goverbs/netio"
)

// steeredConn is sameHost with SameHostOptions.Steered.
func steeredConn(t *testing.T, addr, dir string) netio.Conn {
	u, err := netio.ListenUDP(netip.MustParseAddrPort(addr), netio.UDPOptions{})
	if err != nil {
		t.Fatal(err)
	}
	c, err := netio.ListenSameHost(u, netio.SameHostOptions{Dir: dir, RingSize: 256 << 10, Steered: true})
	if err != nil {
		u.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// sendQPNs sends from to dst one datagram per top byte in tops, as a BTH whose
// destination QPN has that top byte (the payload's byte 5), and reads them all at dst.
func sendQPNs(t *testing.T, from, dst netio.Conn, tops []byte) {
	t.Helper()
	msgs := make([]netio.Message, len(tops))
	for i, top := range tops {
		b := make([]byte, 64)
		b[0], b[5], b[7] = 0x04, top, byte(i) // SEND ONLY to QPN top<<16|i
		msgs[i] = netio.Message{Buf: b, N: len(b), Addr: dst.LocalAddr()}
	}
	// A gathering message: its first slice holds the header.
	hdr := []byte{0x04, 0, 0xff, 0xff, 0, tops[0], 0, 0xee}
	msgs = append(msgs, netio.Message{Iov: [][]byte{hdr, make([]byte, 56)}, N: 64, Addr: dst.LocalAddr()})
	if n, err := from.WriteBatch(msgs); n != len(msgs) || err != nil {
		t.Fatalf("WriteBatch = %d, %v", n, err)
	}
	rd := make([]netio.Message, 8)
	for i := range rd {
		rd[i].Buf = make([]byte, netio.MaxGROSize)
	}
	got := 0
	for deadline := time.Now().Add(5 * time.Second); got < len(msgs) && time.Now().Before(deadline); {
		p, _ := netio.AsPoller(dst)
		k, err := p.PollBatch(rd)
		if err != nil {
			t.Fatal(err)
		}
		got += k
	}
	if got != len(msgs) {
		t.Fatalf("received %d of %d", got, len(msgs))
	}
}

// TestSameHostSteered: a Steered Conn (goverbs serve's device whose clients run engines
// of their own on its address) takes through a ring only datagrams for QPNs of top byte
// 0; the others reach it by UDP, where the kernel's SO_REUSEPORT steering would hand
// them to their engine. A peer learns it at the rendezvous whichever side dialled, and
// the Conn applies it to its ring to itself; a peer that is not Steered gets everything
// by ring as before.
func TestSameHostSteered(t *testing.T) {
	dir := rendezvousDir(t)
	tops := []byte{0, 1, 0, 0xfe, 0, 0xff}
	low := uint64(4) // the zeros, and the gathering message (tops[0])
	rx := func(c netio.Conn) uint64 { s, _ := netio.SameHostStatsOf(c); return s.RxPackets }
	tx := func(c netio.Conn) uint64 { s, _ := netio.SameHostStatsOf(c); return s.TxPackets }

	// A plain peer dials the Steered Conn: the flag comes in the reply.
	s1, p1 := steeredConn(t, "127.0.0.2:0", dir), sameHost(t, "127.0.0.3:0", dir, netio.UDPOptions{})
	if err := netio.SameHostConnect(p1, s1.LocalAddr()); err != nil {
		t.Fatal(err)
	}
	waitPeers(t, s1, 1)
	sendQPNs(t, p1, s1, tops)
	if got := rx(s1); got != low {
		t.Errorf("dialled by a plain peer: %d datagrams by ring, want %d (top byte 0 only)", got, low)
	}
	// Back the other way every datagram takes the ring: the plain peer is not Steered.
	before := rx(p1)
	sendQPNs(t, s1, p1, tops)
	if got := rx(p1) - before; got != uint64(len(tops)+1) {
		t.Errorf("to a plain peer: %d datagrams by ring, want all %d", got, len(tops)+1)
	}

	// The Steered Conn dials: the flag goes in the hello.
	s2, p2 := steeredConn(t, "127.0.0.4:0", dir), sameHost(t, "127.0.0.5:0", dir, netio.UDPOptions{})
	if err := netio.SameHostConnect(s2, p2.LocalAddr()); err != nil {
		t.Fatal(err)
	}
	waitPeers(t, p2, 1)
	sendQPNs(t, p2, s2, tops)
	if got := rx(s2); got != low {
		t.Errorf("dialling a plain peer: %d datagrams by ring, want %d", got, low)
	}

	// Two Steered Conns, and a Steered Conn to itself.
	if err := netio.SameHostConnect(s1, s2.LocalAddr()); err != nil {
		t.Fatal(err)
	}
	waitPeers(t, s2, 2)
	before = rx(s2)
	sendQPNs(t, s1, s2, tops)
	if got := rx(s2) - before; got != low {
		t.Errorf("between Steered Conns: %d datagrams by ring, want %d", got, low)
	}
	before, beforeTx := rx(s1), tx(s1)
	sendQPNs(t, s1, s1, tops)
	if got, sent := rx(s1)-before, tx(s1)-beforeTx; got != low || sent != low {
		t.Errorf("to itself: %d datagrams by ring (%d sent), want %d", got, sent, low)
	}
}

// TestSameHostSteeredUnsealed: to a Steered peer (goverbs serve's device) a sender may
// leave the ICRC out of the datagrams its ring takes, those for QPNs of top byte 0, and
// only those: the rest go by UDP, where the kernel's steering hands them to another
// engine that checks. Between a daemon's own devices, or from a program on the daemon's
// engine, that is all the traffic, and it had been summed for nothing.
func TestSameHostSteeredUnsealed(t *testing.T) {
	dir := rendezvousDir(t)
	s, p := steeredConn(t, "127.0.0.2:0", dir), sameHost(t, "127.0.0.3:0", dir, netio.UDPOptions{})
	if err := netio.SameHostConnect(p, s.LocalAddr()); err != nil {
		t.Fatal(err)
	}
	waitPeers(t, s, 1)
	for _, c := range []struct {
		name     string
		from     netio.Conn
		to       netip.AddrPort
		want     netio.ICRCOffload
		low, any bool // Unsealed(0), Unsealed(1)
	}{
		{"plain to Steered", p, s.LocalAddr(), netio.OffloadLowQPNs, true, false},
		{"Steered to plain", s, p.LocalAddr(), netio.OffloadAll, true, true},
	} {
		o, ok := netio.AsICRCOffloader(c.from)
		if !ok {
			t.Fatal("a same-host Conn is not an ICRCOffloader")
		}
		got := o.OffloadsICRC(c.to)
		if got != c.want || got.Unsealed(0) != c.low || got.Unsealed(1) != c.any {
			t.Errorf("%s: OffloadsICRC = %v (top byte 0: %v, 1: %v), want %v (%v, %v)",
				c.name, got, got.Unsealed(0), got.Unsealed(1), c.want, c.low, c.any)
		}
	}
	if netio.OffloadNone.Unsealed(0) {
		t.Error("OffloadNone lets a datagram go unsealed")
	}
	// What the sender leaves out arrives as it was written, through the ring.
	dgram := make([]byte, 12+8+4)
	dgram[0], dgram[2], dgram[3], dgram[7], dgram[12] = 0x04, 0xff, 0xff, 0x11, 0xab // SEND ONLY to QPN 0x11
	if _, err := p.WriteBatch([]netio.Message{{Buf: bytes.Clone(dgram), N: len(dgram), Addr: s.LocalAddr(), SameHost: true}}); err != nil {
		t.Fatal(err)
	}
	rd := []netio.Message{{Buf: make([]byte, 2048)}}
	for deadline := time.Now().Add(5 * time.Second); ; {
		k, err := s.ReadBatch(rd)
		if err != nil {
			t.Fatal(err)
		}
		if k == 1 && rd[0].N > 12 && rd[0].Buf[12] == 0xab {
			if !rd[0].SameHost || !bytes.Equal(rd[0].Buf[:rd[0].N], dgram) {
				t.Fatalf("got % x (from a ring: %v), want it as written, through the ring: % x", rd[0].Buf[:rd[0].N], rd[0].SameHost, dgram)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the datagram never arrived")
		}
	}
}

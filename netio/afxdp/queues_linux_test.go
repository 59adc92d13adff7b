//go:build linux

package afxdp_test

import (
	"net"
	"testing"
	"time"

	"github.com/goverbs/goverbs/netio"
	"github.com/goverbs/goverbs/netio/afxdp"
)

// TestQueues: B sends from many UDP sockets, whose flows veth spreads over A's two
// receive queues. Bound to queue 0 alone, the Conn still gets every datagram, those of
// queue 1 through the kernel (the local path); bound to both queues, every datagram
// comes through the rings.
func TestQueues(t *testing.T) {
	n := newTestNetQueues(t, 1500, 2)
	const senders, each = 16, 4
	var socks []*net.UDPConn
	in(t, n.B, func() {
		for range senders {
			s, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IP(n.AddrB.AsSlice())})
			if err != nil {
				t.Error(err)
				return
			}
			socks = append(socks, s)
		}
	})
	for _, s := range socks {
		defer s.Close()
	}
	if t.Failed() {
		return
	}
	round := func(x *afxdp.Conn) afxdp.Stats {
		t.Helper()
		for _, s := range socks {
			for range each {
				if _, err := s.WriteToUDPAddrPort([]byte("spread"), x.LocalAddr()); err != nil {
					t.Fatal(err)
				}
			}
		}
		msgs := make([]netio.Message, 16)
		for i := range msgs {
			msgs[i].Buf = make([]byte, 64)
		}
		for got := 0; got < senders*each; {
			k, err := readTimeout(x, msgs, 3*time.Second)
			if err != nil || k == 0 {
				t.Fatalf("got %d of %d datagrams: %v; %+v", got, senders*each, err, x.Stats())
			}
			got += k
		}
		return x.Stats()
	}
	one := openXDP(t, n, n.AddrA, afxdp.Options{})
	s := round(one)
	t.Logf("queue 0 bound: %d through the ring, %d through the kernel", s.RxPackets-s.RxLocal, s.RxLocal)
	one.Close()
	if s.RxLocal == 0 {
		t.Skip("veth put every flow on queue 0: nothing to show")
	}
	both := openXDP(t, n, n.AddrA, afxdp.Options{Queues: []int{1}})
	if q := both.Info().Queues; len(q) != 2 || q[0] != 0 || q[1] != 1 {
		t.Fatalf("Info().Queues = %v", q)
	}
	s = round(both)
	t.Logf("queues 0 and 1 bound: %d through the rings, %d through the kernel", s.RxPackets-s.RxLocal, s.RxLocal)
	if s.RxLocal != 0 || s.RxPackets != senders*each || s.RxMalformed != 0 {
		t.Fatalf("stats %+v", s)
	}
	// Sending still works (through queue 0's socket).
	u := openPeerUDP(t, n)
	if _, err := both.WriteBatch([]netio.Message{{Buf: []byte("back"), N: 4, Addr: u.LocalAddr()}}); err != nil {
		t.Fatal(err)
	}
	p, _ := netio.AsPoller(u)
	if ok, _ := p.WaitReadable(3 * time.Second); !ok {
		t.Fatal("nothing sent from a two-queue Conn arrived")
	}
	both.Close()
	// And in busy-poll mode.
	busy := openXDP(t, n, n.AddrA, afxdp.Options{Queues: []int{1}, BusyPoll: true})
	if s = round(busy); s.RxLocal != 0 || s.RxPackets != senders*each {
		t.Fatalf("busy-poll: stats %+v", s)
	}
}

//go:build linux

package netio_test

import (
	"testing"
	"time"

	"github.com/goverbs/goverbs/internal/netnstest"
	"github.com/goverbs/goverbs/netio"
)

// TestSameHostNotAcrossNamespaces: two devices of one host in two network namespaces
// joined by a veth pair talk over the veth, never through the shortcut, although their
// rendezvous directory is the same: the path a user built between namespaces (its MTU,
// loss, firewall) is what they are there to use.
func TestSameHostNotAcrossNamespaces(t *testing.T) {
	v := netnstest.NewVeth(t, netnstest.VethOptions{Prefix: "gvshm"})
	a, b := v.A, v.B

	dir := rendezvousDir(t)
	var ca, cb netio.Conn
	netnstest.In(t, a, func() { ca = sameHost(t, "192.0.2.1:0", dir, netio.UDPOptions{}) })
	netnstest.In(t, b, func() { cb = sameHost(t, "192.0.2.2:0", dir, netio.UDPOptions{}) })
	// A rendezvous asked for at once finds no device of A's namespace at B's address.
	if err := netio.SameHostConnect(ca, cb.LocalAddr()); err == nil {
		t.Error("A made a rendezvous with B across namespaces")
	}
	payload := []byte("over the veth")
	msgs := []netio.Message{{Buf: payload, N: len(payload), Addr: cb.LocalAddr()}}
	arrived := make(chan string, 1)
	go func() {
		got := []netio.Message{{Buf: make([]byte, netio.MaxGROSize)}}
		if n, err := cb.ReadBatch(got); err == nil && n == 1 {
			arrived <- string(got[0].Buf[:got[0].N])
		}
		close(arrived)
	}()
	deadline := time.After(5 * time.Second)
send:
	for {
		if _, err := ca.WriteBatch(msgs); err != nil {
			t.Fatal(err)
		}
		select {
		case m := <-arrived:
			if m != string(payload) {
				t.Fatalf("got %q", m)
			}
			break send
		case <-time.After(100 * time.Millisecond):
		case <-deadline:
			t.Fatal("the datagram never arrived over the veth")
		}
	}
	for name, c := range map[string]netio.Conn{"A": ca, "B": cb} {
		s, ok := netio.SameHostStatsOf(c)
		if !ok {
			t.Fatalf("%s: not a same-host Conn", name)
		}
		if s.Peers != 0 || s.TxPackets != 0 || s.RxPackets != 0 {
			t.Errorf("%s took the shortcut across namespaces: %+v", name, s)
		}
	}
}

//go:build linux

package afxdp_test

import (
	"fmt"
	"net/netip"
	"testing"
	"time"

	"github.com/goverbs/goverbs/netio"
	"github.com/goverbs/goverbs/netio/afxdp"
	"github.com/goverbs/goverbs/netio/netiotest"
	"github.com/goverbs/goverbs/verbs"
	"github.com/goverbs/goverbs/verbs/verbstest"
)

// TestLocalPathConformance runs netio's suite between an AF_XDP Conn and a UDP backend
// Conn on another address of the same host (namespace A): no NIC carries their
// datagrams, the AF_XDP Conn's local path does, both ways, in both receive modes.
func TestLocalPathConformance(t *testing.T) {
	for _, busy := range []bool{false, true} {
		t.Run(map[bool]string{false: "default", true: "busypoll"}[busy], func(t *testing.T) {
			n := newTestNet(t, 3000)
			n.ip(t, "-n", n.A, "addr", "add", "192.0.2.3/24", "dev", ifA)
			netiotest.TestConn(t, func(t *testing.T) (netio.Conn, netio.Conn) {
				x := open(t, n.A, ifA, n.AddrA, side{xdp: true, busy: busy})
				if !x.(*afxdp.Conn).Info().LocalPath {
					t.Fatalf("no local path: %v", x.(*afxdp.Conn).Info().LocalPathErr)
				}
				return x, open(t, n.A, ifA, netip.MustParseAddr("192.0.2.3"), side{busy: busy})
			})
		})
	}
}

// TestLifecycleOnXDP runs verbstest's lifecycle suite on a device on AF_XDP: among its
// objects an RC QP connected to itself, whose packets to the device's own address take
// the local path.
func TestLifecycleOnXDP(t *testing.T) {
	n := newTestNet(t, 1500)
	verbstest.TestLifecycle(t, verbstest.Env{Open: func(t testing.TB) *verbs.Device {
		return openHost(t, n.A, ifA, n.AddrA, true, false).dev
	}})
}

// TestLocalPathBatches: a batch of 64 datagrams to another address of this host leaves
// through the local path in one sendmmsg (a sendto each made host-local traffic a
// syscall per packet), every datagram arrives, and a run (SegSize) and a gathered
// message (Iov) among them keep their bytes.
func TestLocalPathBatches(t *testing.T) {
	n := newTestNet(t, 1500)
	n.ip(t, "-n", n.A, "addr", "add", "192.0.2.3/24", "dev", ifA)
	x := open(t, n.A, ifA, n.AddrA, side{xdp: true}).(*afxdp.Conn)
	u := open(t, n.A, ifA, netip.MustParseAddr("192.0.2.3"), side{})
	var out []netio.Message
	want := map[string]bool{}
	for i := range 60 {
		b := []byte(fmt.Sprintf("datagram %02d", i))
		out = append(out, netio.Message{Buf: b, N: len(b), Addr: u.LocalAddr(), ECN: netio.ECNECT0})
		want[string(b)] = true
	}
	run := []byte("run seg 0.run seg 1.")
	out = append(out, netio.Message{Buf: run, N: len(run), SegSize: 10, Addr: u.LocalAddr()})
	want["run seg 0."], want["run seg 1."] = true, true
	out = append(out, netio.Message{Iov: [][]byte{[]byte("gath"), []byte("ered")}, N: 8, Addr: u.LocalAddr()})
	want["gathered"] = true
	before := x.Stats()
	if k, err := x.WriteBatch(out); k != len(out) || err != nil {
		t.Fatalf("WriteBatch = %d, %v", k, err)
	}
	after := x.Stats()
	if sent, calls := after.TxLocal-before.TxLocal, after.TxLocalCalls-before.TxLocalCalls; sent != 63 || calls != 1 {
		t.Fatalf("%d datagrams in %d sendmmsg calls, want 63 in 1", sent, calls)
	}
	msgs := make([]netio.Message, 64)
	for i := range msgs {
		msgs[i].Buf = make([]byte, 100)
	}
	for got := 0; got < 63; {
		k, err := netiotest.ReadWithin(t, u, msgs, 5*time.Second)
		if err != nil {
			t.Fatalf("after %d datagrams: %v", got, err)
		}
		for _, m := range msgs[:k] {
			m.Segments(func(_ int, seg []byte) bool {
				if !want[string(seg)] {
					t.Errorf("unexpected or repeated datagram %q", seg)
				}
				delete(want, string(seg))
				got++
				return true
			})
		}
	}
}

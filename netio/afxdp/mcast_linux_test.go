//go:build linux

package afxdp_test

import (
	"bytes"
	"net/netip"
	"testing"
	"time"

	"github.com/goverbs/goverbs/netio"
	"github.com/goverbs/goverbs/netio/afxdp"
	"github.com/goverbs/goverbs/verbs"
)

// TestMulticast: UD multicast through the verbs API between a device on AF_XDP and one
// on the UDP backend, each way: the receiver's QP attaches to the group (its Conn joins
// it), the sender sends to the group's GID, over IPv4 and IPv6.
func TestMulticast(t *testing.T) {
	n := newTestNet(t, 1500)
	n.waitIPv6(t)
	for _, c := range []struct {
		name         string
		addrA, addrB netip.Addr
		group        netip.Addr
	}{
		{"ipv4", n.AddrA, n.AddrB, netip.MustParseAddr("239.1.2.3")},
		{"ipv6", n.V6A, n.V6B, netip.MustParseAddr("ff0e::1:2:3")},
	} {
		t.Run(c.name, func(t *testing.T) {
			a := openHost(t, n.A, ifA, c.addrA, true, false)
			b := openHost(t, n.B, ifB, c.addrB, false, false)
			gid := verbs.GIDFromAddr(c.group)
			const qkey = 0x01234567
			qa, qb := udQP(t, a, qkey), udQP(t, b, qkey)
			for i, d := range []struct {
				from, to *host
				qf, qt   *verbs.QP
			}{{a, b, qa, qb}, {b, a, qb, qa}} {
				// The UDP backend makes its group's socket in the calling thread's
				// namespace; AF_XDP in its own, from whatever thread (afxdp's inNetns).
				var aerr error
				if d.to.xdp != nil {
					aerr = d.qt.AttachMcast(gid, 0)
				} else {
					in(t, d.to.ns, func() { aerr = d.qt.AttachMcast(gid, 0) })
				}
				if aerr != nil {
					t.Fatal(aerr)
				}
				src, dst := d.from.mr(t, 64, byte(i+1)), d.to.mr(t, 64+verbs.GRHLen, 0)
				ah, err := d.from.pd.CreateAH(verbs.AHAttr{DGID: gid, Port: 1, HopLimit: 64})
				if err != nil {
					t.Fatal(err)
				}
				id := uint64(40 + 2*i)
				d.qt.PostRecv(verbs.RecvWR{ID: id + 1, SGL: []verbs.SGE{dst.SGE(0, dst.Len())}})
				post(t, d.qf, verbs.SendWR{ID: id, Opcode: verbs.WRSend, SGL: []verbs.SGE{src.SGE(0, 64)}, AH: ah,
					RemoteQPN: 0xFFFFFF, RemoteQKey: qkey})
				wait(t, d.from.cq, id)
				if wc := wait(t, d.to.rcq, id+1); wc.SrcQP != d.qf.QPN() || !bytes.Equal(dst.Buf()[verbs.GRHLen:], src.Buf()) {
					t.Fatalf("multicast from %s: %+v", d.from.dev.Name(), wc)
				}
				if err := d.qt.DetachMcast(gid, 0); err != nil {
					t.Fatal(err)
				}
			}
		})
	}
}

// TestJoinGroupLoopback: what the AF_XDP Conn sends to a group it joined comes back to
// its own group Conn (the kernel loops multicast back to members on the host), as on
// the UDP backend.
func TestJoinGroupLoopback(t *testing.T) {
	n := newTestNet(t, 1500)
	x := openXDP(t, n, n.AddrA, afxdp.Options{})
	group := netip.MustParseAddr("239.1.2.4")
	g, err := x.JoinGroup(group)
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	if _, err := x.WriteBatch([]netio.Message{{Buf: []byte("all"), N: 3, Addr: netip.AddrPortFrom(group, 4791)}}); err != nil {
		t.Fatal(err)
	}
	msgs := []netio.Message{{Buf: make([]byte, 64)}}
	done := make(chan error, 1)
	go func() { _, err := g.ReadBatch(msgs); done <- err }()
	select {
	case err := <-done:
		if err != nil || string(msgs[0].Buf[:msgs[0].N]) != "all" || msgs[0].Addr != x.SourceAddr() {
			t.Fatalf("group read %q from %v: %v", msgs[0].Buf[:msgs[0].N], msgs[0].Addr, err)
		}
	case <-time.After(3 * time.Second):
		g.Close()
		t.Fatal("nothing came back to the group")
	}
}

//go:build linux

package afxdp_test

import (
	"fmt"
	"io"
	"net/netip"
	"testing"

	"github.com/goverbs/goverbs/netio"
	"github.com/goverbs/goverbs/netio/afxdp"
	"github.com/goverbs/goverbs/netio/netiotest"
	"github.com/goverbs/goverbs/pcap"
)

// side says how one end of a conformance pair is opened.
type side struct {
	xdp  bool // AF_XDP, else the UDP backend
	busy bool
	tee  bool // through a pcap Tee
	// generic: the program in generic XDP (Options.GenericXDP, "+generic") instead of
	// veth's native XDP.
	generic bool
}

// pair makes a MakePair over the veth pair n: a in namespace A, b in B, over IPv4 or
// IPv6. Each subtest opens its Conns afresh (and with them attaches the program).
func pair(n *testNet, a, b side, v6 bool) netiotest.MakePair {
	return func(t *testing.T) (netio.Conn, netio.Conn) {
		addrA, addrB := n.AddrA, n.AddrB
		if v6 {
			addrA, addrB = n.V6A, n.V6B
		}
		return open(t, n.A, ifA, addrA, a), open(t, n.B, ifB, addrB, b)
	}
}

// open opens one side in namespace ns; the test closes it.
func open(t *testing.T, ns, ifname string, addr netip.Addr, s side) netio.Conn {
	t.Helper()
	var c netio.Conn
	var err error
	in(t, ns, func() {
		if s.xdp {
			var x *afxdp.Conn
			if x, err = afxdp.Open(afxdp.Options{Addr: netip.AddrPortFrom(addr, 4791), Interface: ifname, BusyPoll: s.busy, GenericXDP: s.generic}); err == nil {
				c = x
				if x.Info().GenericXDP != s.generic {
					err = fmt.Errorf("opened with GenericXDP %v, Info says %v", s.generic, x.Info().GenericXDP)
				}
			}
		} else {
			c, err = netio.ListenUDP(netip.AddrPortFrom(addr, 4791), netio.UDPOptions{BusyPoll: s.busy, ECN: true}) // ECN: the suite checks it both ways
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	if s.tee {
		w, err := pcap.NewWriter(io.Discard)
		if err != nil {
			t.Fatal(err)
		}
		c = netio.Tee(c, w)
	}
	return c
}

// TestConformance runs netio's conformance suite with AF_XDP on either end of a veth
// pair and the UDP backend or AF_XDP on the other, in both receive modes, over IPv4 and
// IPv6, through a pcap Tee, and with the program in generic XDP on both ends (generic
// XDP on veth takes a UDP peer's GSO runs whole, so it is tested against AF_XDP only;
// docs/guide/afxdp.md).
func TestConformance(t *testing.T) {
	xdp, udp := side{xdp: true}, side{}
	for _, tc := range []struct {
		name string
		a, b side
		v6   bool
	}{
		{"xdp-udp", xdp, udp, false},
		{"udp-xdp", udp, xdp, false},
		{"xdp-xdp", xdp, xdp, false},
		{"busypoll", udp, side{xdp: true, busy: true}, false},
		{"busypoll-xdp-udp", side{xdp: true, busy: true}, udp, false},
		{"ipv6-udp-xdp", udp, xdp, true},
		{"ipv6-xdp-udp", xdp, udp, true},
		{"tee", side{xdp: true, tee: true}, side{xdp: true, tee: true}, false},
		{"generic-xdp-xdp", side{xdp: true, generic: true}, side{xdp: true, generic: true}, false},
		{"generic-busypoll", side{xdp: true, generic: true}, side{xdp: true, busy: true, generic: true}, false},
		{"generic-ipv6", side{xdp: true, generic: true}, side{xdp: true, generic: true}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := newTestNet(t, 3000)
			if tc.v6 {
				n.waitIPv6(t)
			}
			netiotest.TestConn(t, pair(n, tc.a, tc.b, tc.v6))
		})
	}
}

//go:build linux

package netio_test

import (
	"net/netip"
	"testing"
	"time"

	"github.com/goverbs/goverbs/internal/testaddr"
	"github.com/goverbs/goverbs/netio"
	"golang.org/x/sys/unix"
)

// The UDP backend asks the kernel for a TOS (traffic class) control message per received
// datagram only when UDPOptions.ECN says something reads Message.ECN (issue 31): without
// it the receive socket's IP_RECVTOS / IPV6_RECVTCLASS is off, in both receive modes and
// on a multicast group joined on it, Caps says no ECN, and a CE-marked datagram reads as
// Not-ECT (no TOS message came with it). With it, all of them are on and CE arrives as
// CE.
func TestECNOnlyWhenAsked(t *testing.T) {
	for _, tc := range []struct {
		name       string
		addr, peer string
		busy       bool
	}{
		{"ipv4", "127.0.0.2:0", "127.0.0.3:0", false},
		{"ipv4-busypoll", "127.0.0.2:0", "127.0.0.3:0", true},
		{"ipv6", "[::1]:0", "[::1]:0", false},
		{"ipv6-busypoll", "[::1]:0", "[::1]:0", true},
	} {
		for _, ecn := range []bool{false, true} {
			name := tc.name + "-off"
			if ecn {
				name = tc.name + "-on"
			}
			t.Run(name, func(t *testing.T) {
				opts := netio.UDPOptions{BusyPoll: tc.busy, ECN: ecn}
				c, err := netio.ListenUDP(netip.MustParseAddrPort(tc.addr), opts)
				if err != nil {
					if netip.MustParseAddrPort(tc.addr).Addr().Is6() {
						t.Skipf("no IPv6 loopback: %v", err)
					}
					t.Fatal(err)
				}
				defer c.Close()
				v6 := c.LocalAddr().Addr().Is6()
				level, opt := unix.IPPROTO_IP, unix.IP_RECVTOS
				if v6 {
					level, opt = unix.IPPROTO_IPV6, unix.IPV6_RECVTCLASS
				}
				want := 0
				if ecn {
					want = 1
				}
				if v, err := netio.RecvSockoptInt(c, level, opt); err != nil || v != want {
					t.Fatalf("receive socket's RECVTOS/RECVTCLASS = %d, %v; want %d", v, err, want)
				}
				if c.Caps().ECN != ecn {
					t.Fatalf("Caps().ECN = %v with UDPOptions.ECN %v", c.Caps().ECN, ecn)
				}
				if !v6 && !tc.busy {
					// A group joined on the Conn follows it.
					g, err := c.(netio.Multicaster).JoinGroup(testaddr.Group(testaddr.NetIO))
					if err != nil {
						t.Fatal(err)
					}
					defer g.Close()
					if v, err := netio.RecvSockoptInt(g, level, opt); err != nil || v != want {
						t.Fatalf("group socket's RECVTOS = %d, %v; want %d", v, err, want)
					}
					if g.Caps().ECN != ecn {
						t.Fatalf("group Caps().ECN = %v with UDPOptions.ECN %v", g.Caps().ECN, ecn)
					}
				}
				// A CE-marked datagram from a sender that sends ECN.
				s, err := netio.ListenUDP(netip.MustParseAddrPort(tc.peer), netio.UDPOptions{ECN: true})
				if err != nil {
					t.Fatal(err)
				}
				defer s.Close()
				b := []byte("marked")
				if _, err := s.WriteBatch([]netio.Message{{Buf: b, N: len(b), Addr: c.LocalAddr(), ECN: netio.ECNCE}}); err != nil {
					t.Fatal(err)
				}
				ms := []netio.Message{{Buf: make([]byte, 64)}}
				done := make(chan error, 1)
				go func() { _, err := c.ReadBatch(ms); done <- err }()
				select {
				case err := <-done:
					if err != nil {
						t.Fatal(err)
					}
				case <-time.After(5 * time.Second):
					t.Fatal("nothing arrived")
				}
				wantECN := netio.ECNNotECT
				if ecn {
					wantECN = netio.ECNCE
				}
				if string(ms[0].Buf[:ms[0].N]) != "marked" || ms[0].ECN != wantECN {
					t.Fatalf("read %q with %v, want %v", ms[0].Buf[:ms[0].N], ms[0].ECN, wantECN)
				}
			})
		}
	}
}

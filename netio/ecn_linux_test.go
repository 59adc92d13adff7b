//go:build linux

package netio_test

import (
	"fmt"
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

// Message.TrafficClass leaves as the DSCP of the IP header's DS field (IPv4 TOS, IPv6
// traffic class), per datagram and per GSO run, beside the ECN codepoint when the sender
// does ECN and alone when it does not; a receiver that reads TOS (IP_RECVTOS) reports it.
func TestTrafficClassPerDatagram(t *testing.T) {
	for _, tc := range []struct{ name, addr string }{{"ipv4", "127.0.0.2:0"}, {"ipv6", "[::1]:0"}} {
		for _, senderECN := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s-ecn-%v", tc.name, senderECN), func(t *testing.T) {
				r, err := netio.ListenUDP(netip.MustParseAddrPort(tc.addr), netio.UDPOptions{ECN: true})
				if err != nil {
					if tc.name == "ipv6" {
						t.Skipf("no IPv6 loopback: %v", err)
					}
					t.Fatal(err)
				}
				defer r.Close()
				s, err := netio.ListenUDP(netip.MustParseAddrPort(tc.addr), netio.UDPOptions{ECN: senderECN})
				if err != nil {
					t.Fatal(err)
				}
				defer s.Close()
				run := make([]byte, 3*100)
				out := []netio.Message{
					{Buf: []byte("ef"), N: 2, Addr: r.LocalAddr(), TrafficClass: 0xb8, ECN: netio.ECNECT0},
					{Buf: []byte("cs1"), N: 3, Addr: r.LocalAddr(), TrafficClass: 0x20 | 0b11},
					{Buf: run, N: len(run), SegSize: 100, Addr: r.LocalAddr(), TrafficClass: 0x60, ECN: netio.ECNECT0},
					{Buf: []byte("zero"), N: 4, Addr: r.LocalAddr()},
				}
				if _, err := s.WriteBatch(out); err != nil {
					t.Fatal(err)
				}
				type got struct {
					n   int
					tc  uint8
					ecn netio.ECN
				}
				var want []got
				for _, m := range out {
					ecn := netio.ECNNotECT
					if senderECN {
						ecn = m.ECN
					}
					m.Segments(func(_ int, seg []byte) bool {
						want = append(want, got{len(seg), m.TrafficClass &^ netio.ECNMask, ecn})
						return true
					})
				}
				var have []got
				ms := make([]netio.Message, 8)
				for i := range ms {
					ms[i].Buf = make([]byte, max(r.Caps().GROBufSize, 512))
				}
				for len(have) < len(want) {
					done := make(chan error, 1)
					var n int
					go func() { var err error; n, err = r.ReadBatch(ms); done <- err }()
					select {
					case err := <-done:
						if err != nil {
							t.Fatal(err)
						}
					case <-time.After(5 * time.Second):
						t.Fatalf("read %v, want %v", have, want)
					}
					for _, m := range ms[:n] {
						m.Segments(func(_ int, seg []byte) bool {
							have = append(have, got{len(seg), m.TrafficClass, m.ECN})
							return true
						})
					}
				}
				if fmt.Sprint(have) != fmt.Sprint(want) {
					t.Fatalf("read (len, traffic class, ECN) %v, want %v", have, want)
				}
			})
		}
	}
}

//go:build linux

package afxdp

import (
	"net/netip"
	"os"
	"testing"

	"github.com/cilium/ebpf"
)

// TestSteerProgram runs the XDP program in the kernel (BPF_PROG_TEST_RUN) on frames
// built here: exactly the UDP datagrams to the device's address and port take the
// redirect path (made to end in XDP_DROP for the test, having no socket), and
// everything else passes.
func TestSteerProgram(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to load BPF programs")
	}
	const drop, pass = 1, 2
	for _, local := range []netip.AddrPort{
		netip.MustParseAddrPort("192.0.2.1:4791"),
		netip.MustParseAddrPort("[2001:db8::1]:4791"),
	} {
		s, err := loadSteeringMiss(local, 0, drop)
		if err != nil {
			t.Skipf("cannot load the program here: %v", err)
		}
		defer s.close()
		v6 := local.Addr().Is6()
		peer := netip.MustParseAddrPort("192.0.2.2:50000")
		other := netip.MustParseAddr("192.0.2.3")
		if v6 {
			peer = netip.MustParseAddrPort("[2001:db8::2]:50000")
			other = netip.MustParseAddr("2001:db8::3")
		}
		udp := func(dst netip.AddrPort, n int) []byte {
			f := make([]byte, headerLen(v6)+n)
			var t txTemplate
			t.build([6]byte{}, [6]byte{}, peer, dst, 64)
			t.put(f, n, 0)
			return f
		}
		ours := udp(local, 40)
		frag := udp(local, 40)
		if !v6 {
			frag[ethHeaderLen+6] |= 0x20 // more fragments
		}
		options := udp(local, 40)
		if !v6 {
			options[ethHeaderLen] = 0x46
		}
		arp := make([]byte, 60)
		arp[12], arp[13] = 0x08, 0x06
		icmp := udp(local, 40)
		if v6 {
			icmp[ethHeaderLen+6] = 58
		} else {
			icmp[ethHeaderLen+9] = 1
		}
		short := ours[:headerLen(v6)-1]
		for _, c := range []struct {
			name  string
			frame []byte
			want  uint32
		}{
			{"ours", ours, drop},
			{"ours-long", udp(local, 1400), drop},
			{"other-port", udp(netip.AddrPortFrom(local.Addr(), 5000), 40), pass},
			{"other-address", udp(netip.AddrPortFrom(other, local.Port()), 40), pass},
			{"fragment", frag, map[bool]uint32{false: pass, true: drop}[v6]},
			{"ip-options", options, map[bool]uint32{false: pass, true: drop}[v6]},
			{"icmp", icmp, pass},
			{"arp", arp, pass},
			{"short", short, pass},
		} {
			got, err := s.prog.Run(&ebpf.RunOptions{Data: c.frame})
			if err != nil {
				t.Skipf("BPF_PROG_TEST_RUN: %v", err)
			}
			if got != c.want {
				t.Errorf("%v %s: XDP action %d, want %d", local, c.name, got, c.want)
			}
		}
	}
}

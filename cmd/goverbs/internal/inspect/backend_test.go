package inspect

import (
	"net/netip"
	"testing"

	"github.com/goverbs/goverbs/verbs"
)

// The mode comes from the two counters a device on AF_XDP lists; a device on UDP has
// neither, and a line of something else is not read.
func TestParseXDPMode(t *testing.T) {
	for _, tc := range []struct {
		line        string
		zc, gen, ok bool
	}{
		{"link xdp0/1 tx_pkts 5 xdp_zerocopy 0 xdp_generic 0 xdp_rx_pkts 9", false, false, true},
		{"link xdp0/1 xdp_zerocopy 1 xdp_generic 0", true, false, true},
		{"link xdp0/1 xdp_zerocopy 0 xdp_generic 1", false, true, true},
		{"link sw0/1 tx_pkts 5 rx_pkts 7", false, false, false},
		{"link xdp0/1 xdp_zerocopy 1", false, false, false},
		{"qp 0x11 xdp_zerocopy 1 xdp_generic 1", false, false, false},
		{"# goverbs write_bw (pid 1): device xdp0 on 192.0.2.1", false, false, false},
		{"link", false, false, false},
	} {
		zc, gen, ok := parseXDPMode(tc.line)
		if ok != tc.ok || ok && (zc != tc.zc || gen != tc.gen) {
			t.Errorf("parseXDPMode(%q) = %v %v %v, want %v %v %v", tc.line, zc, gen, ok, tc.zc, tc.gen, tc.ok)
		}
	}
	if got := modeText(false, false); got != "copy mode, native XDP" {
		t.Errorf("modeText = %q", got)
	}
	if got := modeText(true, true); got != "zero-copy, generic XDP" {
		t.Errorf("modeText = %q", got)
	}
}

// A device on UDP has no backend line.
func TestBackendLineUDP(t *testing.T) {
	if s := backendLine(verbs.SoftConfig{Name: "sw0", Addr: netip.MustParseAddr("192.0.2.1")}); s != "" {
		t.Fatalf("backendLine of a UDP device = %q", s)
	}
}

//go:build linux

package afxdp_test

import (
	"bufio"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/goverbs/goverbs/netio/afxdp"
)

// TestUMEMHugePages: the packet memory asks for transparent huge pages (its mapping's
// VmFlags carry "hg", MADV_HUGEPAGE), so that 2048 frames each way take a few TLB
// entries rather than one each. Whether the kernel found huge pages to give is logged,
// not asserted: a fragmented machine may have none free.
func TestUMEMHugePages(t *testing.T) {
	thp, err := os.ReadFile("/sys/kernel/mm/transparent_hugepage/enabled")
	if err != nil || strings.Contains(string(thp), "[never]") {
		t.Skip("no transparent huge pages on this kernel")
	}
	n := newTestNet(t, 1500)
	a := openXDP(t, n, n.AddrA, afxdp.Options{})
	start := afxdp.UMEMStart(a)
	f, err := os.Open("/proc/self/smaps")
	if err != nil {
		t.Skip(err)
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	in, found, flags, huge := false, false, "", ""
	for s.Scan() {
		line := s.Text()
		var lo, hi uintptr
		if _, err := fmt.Sscanf(line, "%x-%x ", &lo, &hi); err == nil {
			if found {
				break // the mapping after the UMEM's
			}
			in = lo <= start && start < hi // the mapping holding the UMEM (merged or not)
			found = in
			continue
		}
		if !in {
			continue
		}
		if v, ok := strings.CutPrefix(line, "VmFlags:"); ok {
			flags = v
		}
		if v, ok := strings.CutPrefix(line, "AnonHugePages:"); ok {
			huge = strings.TrimSpace(v)
		}
	}
	if !found {
		t.Fatalf("no mapping holds the UMEM at %#x in /proc/self/smaps", start)
	}
	t.Logf("UMEM at %#x: AnonHugePages %s, VmFlags%s", start, huge, flags)
	if !strings.Contains(" "+flags+" ", " hg ") {
		t.Errorf("the UMEM's mapping has no MADV_HUGEPAGE (VmFlags%s)", flags)
	}
}

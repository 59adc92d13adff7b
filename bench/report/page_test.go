package main

import (
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite testdata/PERFORMANCE.golden.md")

// copyTree copies testdata's fixture runs into a fresh directory, so that the plot the
// test draws lands beside them and nothing is written into the source tree.
func copyTree(t *testing.T, src, dst string) {
	t.Helper()
	err := filepath.Walk(src, func(p string, info os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		if info.IsDir() {
			return os.MkdirAll(filepath.Join(dst, rel), 0o755)
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(dst, rel), b, 0o644)
	})
	if err != nil {
		t.Fatal(err)
	}
}

// The page from the fixture's runs (made-up rows, one of every kind the scripts write)
// matches the golden file: the tables, the runs' descriptions and the plot's link.
// go test ./bench/report -update rewrites it after a deliberate change.
func TestPageGolden(t *testing.T) {
	dir := t.TempDir()
	data := filepath.Join(dir, "perf")
	copyTree(t, "testdata/perf", data)
	if err := plot(filepath.Join(data, "loopback"), filepath.Join(data, "loopback", "bandwidth.svg")); err != nil {
		t.Fatal(err)
	}
	page := filepath.Join(dir, "PERFORMANCE.md")
	if err := writePage(page, data); err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(page)
	if err != nil {
		t.Fatal(err)
	}
	golden := "testdata/PERFORMANCE.golden.md"
	if *update {
		if err := os.WriteFile(golden, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != string(want) {
		t.Errorf("page differs from %s (go test -update to accept):\n%s", golden, got)
	}
}

// The figures on the page are the rows': medians, per-round ratios paired by round (a
// round that one side lacks is left out) and their median.
func TestPageFigures(t *testing.T) {
	dir := t.TempDir()
	data := filepath.Join(dir, "perf")
	copyTree(t, "testdata/perf", data)
	page := filepath.Join(dir, "PERFORMANCE.md")
	if err := writePage(page, data); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(page)
	s := string(b)
	for _, want := range []string{
		// write_bw 2000, 3000, 2500 against TCP 1000, 1500, 1250: every round 2×.
		"| RC WRITE 64 KiB bandwidth vs Go TCP stream | 2500.0 MiB/s | 1250.0 MiB/s | 2.00× | 2.00× 2.00× 2.00× | 2.00× | 3 |",
		// send_lat has rounds 1 and 3 only: 3/2 and 5/4.
		"| RC SEND 8 B latency (one-way, median) vs Go UDP ping-pong | 4.0 µs | 4.0 µs | 1.00× | 1.50× 1.25× | 1.38× | 2 |",
		"| Go TCP 64 B request/response (one-way, median), baseline only | | 7.0 µs | | | | 2 |",
		"| 1500 (1024) | 1900.0 MiB/s | 1100.0 MiB/s | 1.73× | 1.50× 2.00× | 1.75× | 2 |",
		"| 9000 (4096) | 2500.0 MiB/s | 1750.0 MiB/s | 1.43× | 2.00× 1.00× | 1.50× | 2 |",
		"| rdma-tree | 25.00 | 2.00× 1.50× | 1.75× | 3.50 | 0.50× 1.00× | 0.75× |",
		"| Go TCP | 15.00 | | | 5.00 | | |",
		// librspreload: 10/20 and 12/16; 15/10 and 8/8; the baseline named for the mode.
		"| rsockets | 11.00 | 0.50× 0.75× | 0.62× | 11.50 | 1.50× 1.00× | 1.25× |",
		"| kernel TCP (same program) | 18.00 | | | 9.00 | | |",
		"Run 2000-01-01T00:00Z at commit fixture, on 2 cores of Fixture CPU",
		"Reproduce: `ROUNDS=3 bench/compare.sh`",
		// xdp_write_bw_8 0.3, 0.2 against udp_rate 0.2, 0.4: 1.5× and 0.5×.
		"| AF_XDP: RC WRITE 8 B message rate vs Go UDP 8 B datagrams (one write each, delivered) | 0.250 M/s | 0.300 M/s | 0.83× | 1.50× 0.50× | 1.00× | 2 |",
		"| xdp_send_lat_busy | 20000 | 2.50 | 0.010 |",
	} {
		if !strings.Contains(s, want) {
			t.Errorf("page lacks %q", want)
		}
	}
	if strings.Contains(s, "No run is recorded") {
		t.Error("page says a run is missing")
	}
}

// With no runs recorded, every section says which script fills it, and the page has no
// figure at all.
func TestPageWithoutRuns(t *testing.T) {
	dir := t.TempDir()
	page := filepath.Join(dir, "PERFORMANCE.md")
	if err := writePage(page, filepath.Join(dir, "perf")); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(page)
	s := string(b)
	for _, script := range []string{"bench/compare.sh", "bench/veth.sh", "bench/rstream.sh", "bench/samehost.sh", "bench/afxdp.sh"} {
		if !strings.Contains(s, "Run `"+script) && !strings.Contains(s, "Run `sudo "+script) {
			t.Errorf("page does not say to run %s", script)
		}
	}
	if strings.Contains(s, "MiB/s |") || strings.Contains(s, "×") {
		t.Errorf("page without runs has figures:\n%s", s)
	}
}

func TestIBMTU(t *testing.T) {
	for ifmtu, want := range map[int]int{1500: 1024, 9000: 4096, 1104: 1024, 1103: 512, 600: 512, 300: 0} {
		if got := ibMTU(ifmtu); got != want {
			t.Errorf("ibMTU(%d) = %d, want %d", ifmtu, got, want)
		}
	}
}

// TestFormatSubMicrosecond: a latency under a microsecond keeps two decimals, so that
// the shared-memory floor (about 0.12 µs) does not print as 0.1; others keep one.
func TestFormatSubMicrosecond(t *testing.T) {
	for _, c := range []struct {
		v    float64
		unit string
		want string
	}{
		{0.1205, "µs", "0.12 µs"},
		{1.63, "µs", "1.6 µs"},
		{2.2222, "M/s", "2.222 M/s"},
		{8033.24, "MiB/s", "8033.2 MiB/s"},
	} {
		if got := format(c.v, c.unit); got != c.want {
			t.Errorf("format(%v, %q) = %q, want %q", c.v, c.unit, got, c.want)
		}
	}
}

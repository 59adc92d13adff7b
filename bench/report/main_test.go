package main

import (
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// A failed run leaves its round out of both sides, so later rounds still pair with their
// own baseline's, not with the next one's.
func TestPerRoundPairsSameRounds(t *testing.T) {
	run := map[int]float64{1: 10, 3: 30, 4: 8}
	base := map[int]float64{1: 5, 2: 7, 3: 10, 4: 0}
	if got, want := perRound(run, base), []float64{2, 3}; !slices.Equal(got, want) {
		t.Fatalf("perRound = %v, want %v", got, want)
	}
}

func TestLoadKeepsRoundsAndSkipsText(t *testing.T) {
	path := filepath.Join(t.TempDir(), "write_bw.json")
	data := "warning: not JSON\n{\"round\":2,\"bw_avg_mib_s\":1.5}\n{\"round\":1,\"bw_avg_mib_s\":2.5}\n"
	if err := os.WriteFile(path, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
	rows, err := load(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 2 || rows[0]["round"] != 2 || rows[1]["bw_avg_mib_s"] != 2.5 {
		t.Fatalf("load = %v", rows)
	}
	if err := os.WriteFile(path, []byte("{\"round\":\"x\"}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := load(path); err == nil {
		t.Fatal("load accepted a non-numeric field")
	}
}

func TestMedianOf(t *testing.T) {
	for _, c := range []struct {
		in   []float64
		want float64
	}{{[]float64{3, 1, 2}, 2}, {[]float64{4, 1, 3, 2}, 2.5}, {[]float64{7}, 7}} {
		if got := medianOf(c.in); got != c.want {
			t.Errorf("medianOf(%v) = %v, want %v", c.in, got, c.want)
		}
	}
}

// bench/rstream.sh's modes each get a table with their own TCP, and the loopback stream
// its ratio to write_bw of the same rounds; rows from before the modes are loopback's.
func TestRstreamTableModes(t *testing.T) {
	dir := t.TempDir()
	rows := `{"round":1,"variant":"rdma-tree","bw_gbps":20,"rr_us":4}
{"round":1,"variant":"tcp","bw_gbps":10,"rr_us":5}
{"round":1,"mode":"veth","variant":"rdma-tree","bw_gbps":12,"rr_us":6}
{"round":1,"mode":"veth","variant":"tcp","bw_gbps":8,"rr_us":7}
{"round":1,"mode":"inproc","variant":"rdma-tree","bw_gbps":9,"rr_us":3}
{"round":1,"mode":"inproc","variant":"tcp","bw_gbps":10,"rr_us":4}
{"round":1,"mode":"loopback","variant":"write_bw","bw_gbps":25}
`
	if err := os.WriteFile(filepath.Join(dir, "rstream.json"), []byte(rows), 0o644); err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	if !rstreamTable(&b, dir) {
		t.Fatal("no table")
	}
	for _, want := range []string{"| rdma-tree | 20.00 | 2.00× | 2.00× | 4.00 | 0.80× | 0.80× |",
		"veth pair at MTU 1500", "| rdma-tree | 12.00 | 1.50× | 1.50× |", "`rstream --loop`",
		"| rdma-tree | 9.00 | 0.90× |", "| rdma-tree | 20.00 | 25.00 | 0.80× | 0.80× |"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, b.String())
		}
	}
	if strings.Contains(b.String(), "bench/xcore") {
		t.Errorf("rows without probes got a phase note:\n%s", b.String())
	}
}

// A stream table whose runs bench/xcore framed says each round's machine phase and gives
// the ratio's median within each phase: round 1 fast throughout (2×), round 2 slow
// throughout (0.5×), round 3 changed between its runs, round 4 fast (1×); the fastest
// probe (20) sets the line at 10.
func TestRstreamTablePhases(t *testing.T) {
	got := tableOf(t, rstreamTable, map[string]string{"rstream.json": `{"round":1,"mode":"preload","variant":"tcp","bw_gbps":10,"rr_us":5,"xcore_gbps":[20,18]}
{"round":1,"mode":"preload","variant":"rsockets","bw_gbps":20,"rr_us":4,"xcore_gbps":[18,19]}
{"round":2,"mode":"preload","variant":"tcp","bw_gbps":10,"rr_us":5,"xcore_gbps":[4,4.5]}
{"round":2,"mode":"preload","variant":"rsockets","bw_gbps":5,"rr_us":4,"xcore_gbps":[4.5,3.9]}
{"round":3,"mode":"preload","variant":"tcp","bw_gbps":10,"rr_us":5,"xcore_gbps":[19,4]}
{"round":3,"mode":"preload","variant":"rsockets","bw_gbps":7,"rr_us":4,"xcore_gbps":[4,4]}
{"round":4,"mode":"preload","variant":"tcp","bw_gbps":10,"rr_us":5,"xcore_gbps":[17,16]}
{"round":4,"mode":"preload","variant":"rsockets","bw_gbps":10,"rr_us":4,"xcore_gbps":[16,17]}
`})
	wantAll(t, got,
		"| rsockets | 8.50 | 2.00× 0.50× 0.70× 1.00× | 0.85× |",
		"1: 2.00× fast (TCP 20.0→18.0, rsockets 18.0→19.0)",
		"2: 0.50× slow (TCP 4.0→4.5, rsockets 4.5→3.9)",
		"3: 0.70× mixed",
		"all saw the fast phase: 2, median ratio 1.50×; all the slow phase: 1, 0.50×; the phase changed within the round: 1, 0.70×.")
}

// phaseRun and phaseBase are three rounds of a goverbs run and its baseline, each run
// framed by bench/xcore's probes: ratios 3×, 1× and 5×, and in round 2 the baseline's
// run ended in the slow phase (4 against a fastest probe of 22), so the fast phase's
// median is over rounds 1 and 3: 4×.
const (
	phaseRun = `{"round":1,"bw_avg_mib_s":300,"xcore_before":20,"xcore_after":19}
{"round":2,"bw_avg_mib_s":100,"xcore_before":18,"xcore_after":21}
{"round":3,"bw_avg_mib_s":500,"xcore_before":22,"xcore_after":20}
`
	phaseBase = `{"round":1,"bw_avg_mib_s":100,"xcore_before":19,"xcore_after":20}
{"round":2,"bw_avg_mib_s":100,"xcore_before":21,"xcore_after":4}
{"round":3,"bw_avg_mib_s":100,"xcore_before":20,"xcore_after":22}
`
)

// A compare table whose runs bench/lib.sh's pair framed with bench/xcore gives, per
// measurement, the median ratio over the rounds whose four probes all saw the fast
// phase.
func TestCompareTablePhases(t *testing.T) {
	got := tableOf(t, compareTable, map[string]string{"shm_write_bw.json": phaseRun, "write_bw.json": phaseBase})
	wantAll(t, got,
		"| 3.00× 1.00× 5.00× | 3.00× | 3 |",
		"fastest probe, 22.0 GB/s",
		"shared memory vs goverbs over UDP 4.00× (2 of 3 rounds)")
}

// With probes and no round all in the fast phase, the table says so.
func TestCompareTableNoFastRound(t *testing.T) {
	slow := strings.ReplaceAll(phaseBase, `"xcore_before":19`, `"xcore_before":3`)
	slow = strings.ReplaceAll(slow, `"xcore_after":22`, `"xcore_after":2`)
	got := tableOf(t, compareTable, map[string]string{"shm_write_bw.json": phaseRun, "write_bw.json": slow})
	wantAll(t, got, "No round stayed in the machine's fast phase", "fastest probe, 22.0 GB/s")
}

// The veth table gives it per MTU.
func TestVethTablePhases(t *testing.T) {
	got := tableOf(t, vethTable, map[string]string{"mtu1500/write_bw.json": phaseRun, "mtu1500/tcp_bw.json": phaseBase})
	wantAll(t, got, "| 1500 (1024) | 300.0 MiB/s | 100.0 MiB/s | 3.00× | 3.00× 1.00× 5.00× | 3.00× | 3 |",
		"MTU 1500 4.00× (2 of 3 rounds)")
}

// tableOf writes files (name to rows) into a directory of their own and returns what
// table prints for it, failing t if it prints nothing.
func tableOf(t *testing.T, table func(io.Writer, string) bool, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for name, rows := range files {
		path := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(rows), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	var b strings.Builder
	if !table(&b, dir) {
		t.Fatal("no table")
	}
	return b.String()
}

// wantAll fails t for each of wants that got lacks.
func wantAll(t *testing.T, got string, wants ...string) {
	t.Helper()
	for _, want := range wants {
		if !strings.Contains(got, want) {
			t.Errorf("table lacks %q:\n%s", want, got)
		}
	}
}

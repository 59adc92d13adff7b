package main

import (
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
}

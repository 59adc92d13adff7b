package main

import (
	"os"
	"path/filepath"
	"slices"
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

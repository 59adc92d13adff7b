package perftest

import (
	"testing"
	"time"
)

// TestAddMark: a run without a peak keeps its first marks and the newest one only, and
// its row is the one every mark would give; a run with a peak keeps them all.
func TestAddMark(t *testing.T) {
	start := time.Unix(1000, 0)
	at := func(i int) mark { return mark{i, start.Add(time.Duration(i) * time.Microsecond)} }
	const n = 100000
	all, few := []mark{at(0)}, []mark{at(0)}
	for i := 1; i <= n; i++ {
		all = addMark(all, 1, at(i), true)
		few = addMark(few, 1, at(i), false)
	}
	if len(all) != n+1 {
		t.Fatalf("with the peak: %d marks kept of %d", len(all), n+1)
	}
	if len(few) != 2 || few[0] != at(0) || few[1] != at(n) {
		t.Fatalf("without the peak: %d marks kept (%v ... %v), want the first and the newest", len(few), few[0], few[len(few)-1])
	}
	if got, want := bwStats(65536, few, true), bwStats(65536, all, true); got != want {
		t.Fatalf("row from the kept marks %+v, from all %+v", got, want)
	}
	// --run_infinitely: the marks up to a period's start stay; the period's newest
	// follows them.
	p := []mark{at(0), at(5), at(9)}
	for i := 10; i < 20; i++ {
		p = addMark(p, 3, at(i), false)
	}
	if len(p) != 4 || p[2] != at(9) || p[3] != at(19) {
		t.Fatalf("period marks %v", p)
	}
}

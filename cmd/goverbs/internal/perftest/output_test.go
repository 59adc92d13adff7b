package perftest

import (
	"math"
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
	if len(all) > maxPeakMarks+1 || all[0] != at(0) || all[len(all)-1] != at(n) {
		t.Fatalf("with the peak: %d marks kept of %d (%v ... %v), want at most %d, the first and the newest among them",
			len(all), n+1, all[0], all[len(all)-1], maxPeakMarks+1)
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

// TestPeakFromThinnedMarks: a long run with a mark per message keeps a bounded number of
// marks, spread evenly enough that the peak from them is the run's fastest stretch
// within a percent. The run goes at one message a microsecond, but at two for a fifth of
// its messages, which is then the fastest stretch of at least a tenth of the run.
func TestPeakFromThinnedMarks(t *testing.T) {
	start := time.Unix(1000, 0)
	const n = 1000000
	marks := []mark{{0, start}}
	now := time.Duration(0)
	for i := 1; i <= n; i++ {
		if i > 400000 && i <= 600000 {
			now += 500 * time.Nanosecond // the fast fifth
		} else {
			now += time.Microsecond
		}
		marks = addMark(marks, 1, mark{i, start.Add(now)}, true)
	}
	if len(marks) > maxPeakMarks+1 {
		t.Fatalf("%d marks kept", len(marks))
	}
	const size = 65536
	r := bwStats(size, marks, false)
	// The fast fifth: 200000 messages in 100 ms, longer than a tenth of the 900 ms run
	// and more than a tenth of its messages.
	want := float64(size) * 200000 / 0.1 / (1 << 20)
	if r.PeakMiB < 0.99*want || r.PeakMiB > 1.001*want {
		t.Fatalf("peak %.1f MiB/s from %d marks, want %.1f", r.PeakMiB, len(marks), want)
	}
	if avg := float64(size) * n / 0.9 / (1 << 20); math.Abs(r.AvgMiB-avg) > avg*1e-9 {
		t.Fatalf("average %.1f MiB/s, want %.1f", r.AvgMiB, avg)
	}
}

//go:build ibverbs

package ibverbs

import (
	"testing"
	"time"
)

// A poster on rxe must pass through the scheduler more often than Go's 10 ms preemption
// limit, and not on every post: the first post, then one per yieldEvery.
func TestYieldPacer(t *testing.T) {
	var p yieldPacer
	t0 := time.Now()
	steps := []struct {
		at   time.Duration
		want bool
	}{
		{0, true},
		{time.Millisecond, false},
		{yieldEvery - time.Microsecond, false},
		{yieldEvery, true},
		{yieldEvery + time.Millisecond, false},
		{2*yieldEvery + time.Millisecond, true},
		{time.Second, true}, // after a pause, at once
		{time.Second + time.Millisecond, false},
	}
	for _, s := range steps {
		if got := p.due(t0.Add(s.at)); got != s.want {
			t.Errorf("due at %v = %v, want %v", s.at, got, s.want)
		}
	}
	if yieldEvery >= 10*time.Millisecond/2 {
		t.Errorf("yieldEvery %v leaves no margin under the runtime's 10 ms preemption limit", yieldEvery)
	}
}

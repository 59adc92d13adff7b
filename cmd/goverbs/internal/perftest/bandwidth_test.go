package perftest

import (
	"testing"
	"time"
)

// TestSleepFills: the send_bw receiver spins rather than sleeps when a sleep's worth of
// messages would take more than half its receives: an 8 B stream at a million a second
// does against 512 receives, a 64 KiB stream at 100 thousand does not.
func TestSleepFills(t *testing.T) {
	for _, c := range []struct {
		n     int
		el    time.Duration
		depth int
		want  bool
	}{
		{1_000_000, time.Second, 512, true},
		{100_000, time.Second, 512, false},
		{300_000, time.Second, 512, true}, // 360 a sleep
		{300_000, time.Second, 1024, false},
		{0, time.Second, 512, false},
		{10, 0, 512, false}, // nothing measured yet
	} {
		if got := sleepFills(c.n, c.el, c.depth); got != c.want {
			t.Errorf("sleepFills(%d, %v, %d) = %v, want %v", c.n, c.el, c.depth, got, c.want)
		}
	}
}

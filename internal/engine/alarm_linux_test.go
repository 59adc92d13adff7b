package engine

import (
	"slices"
	"testing"
	"time"
)

// TestAlarmFiresInMicroseconds: the doorbell's alarm expires about when it was set to,
// not at Go's timer granularity (about 1 ms while the runtime sleeps).
func TestAlarmFiresInMicroseconds(t *testing.T) {
	a := newAlarm()
	if a == nil {
		t.Fatal("no timerfd")
	}
	defer a.release()
	var took []time.Duration
	for range 21 {
		start := time.Now()
		if err := a.set(alarmDelay); err != nil {
			t.Fatal(err)
		}
		if err := a.wait(); err != nil {
			t.Fatal(err)
		}
		took = append(took, time.Since(start))
	}
	slices.Sort(took)
	if med := took[len(took)/2]; med < alarmDelay || med >= time.Millisecond {
		t.Errorf("alarm set for %v fired after a median %v (fastest %v, slowest %v)", alarmDelay, med, took[0], took[len(took)-1])
	}
}

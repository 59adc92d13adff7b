package engine

import (
	"slices"
	"testing"
	"time"
)

// TestAlarmNeverFiresEarly: the doorbell's alarm expires, again and again, and never
// before the time it was set to (a deferred post must not be flushed by an alarm meant
// for a later one). How soon after it fires is a figure, in BenchmarkAlarm.
func TestAlarmNeverFiresEarly(t *testing.T) {
	a := newAlarm()
	if a == nil {
		t.Fatal("no timerfd")
	}
	defer a.release()
	for range 21 {
		start := time.Now()
		if err := a.set(alarmDelay); err != nil {
			t.Fatal(err)
		}
		if err := a.wait(); err != nil {
			t.Fatal(err)
		}
		if took := time.Since(start); took < alarmDelay {
			t.Fatalf("alarm set for %v fired after %v", alarmDelay, took)
		}
	}
}

// BenchmarkAlarm reports how long after its set time the alarm's waiter runs: the
// doorbell's backstop wants microseconds, not Go's timer granularity (about 1 ms while
// the runtime sleeps), which is why it is a timerfd.
//
//	go test -run '^$' -bench Alarm ./internal/engine/
func BenchmarkAlarm(b *testing.B) {
	a := newAlarm()
	if a == nil {
		b.Fatal("no timerfd")
	}
	defer a.release()
	late := make([]time.Duration, 0, b.N)
	for b.Loop() {
		start := time.Now()
		if err := a.set(alarmDelay); err != nil {
			b.Fatal(err)
		}
		if err := a.wait(); err != nil {
			b.Fatal(err)
		}
		late = append(late, time.Since(start)-alarmDelay)
	}
	slices.Sort(late)
	b.ReportMetric(float64(late[len(late)/2].Microseconds()), "µs-late-median")
}

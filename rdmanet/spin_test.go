package rdmanet

import (
	"testing"
	"time"
)

// The spin budget follows how long the waits took (spinPolicy.budget): twice the
// longest recent one, never under spinBudget nor over maxSpinBudget, and a wait too
// long to have been worth a spin does not raise it.
func TestSpinBudgetFollowsWaits(t *testing.T) {
	var p spinPolicy
	if got := p.budget(); got != spinBudget {
		t.Fatalf("budget %v with no wait seen, want %v", got, spinBudget)
	}
	for range 100 {
		p.waited(3 * time.Microsecond)
	}
	if got := p.budget(); got != spinBudget {
		t.Fatalf("budget %v after short waits, want %v", got, spinBudget)
	}
	p.waited(60 * time.Microsecond) // one wait that blocked for a peer's wake-up
	if got := p.budget(); got != 120*time.Microsecond {
		t.Fatalf("budget %v after a 60 us wait, want 120 us", got)
	}
	p.waited(10 * time.Millisecond) // the peer was idle: not a turn
	if got := p.budget(); got >= 120*time.Microsecond || got < 100*time.Microsecond {
		t.Fatalf("budget %v after a 10 ms wait, want a little under 120 us", got)
	}
	p.waited(maxSpinBudget)
	if got := p.budget(); got != maxSpinBudget {
		t.Fatalf("budget %v, want the most, %v", got, maxSpinBudget)
	}
	for range 4 * turnDecay {
		p.waited(3 * time.Microsecond)
	}
	if got := p.budget(); got != spinBudget {
		t.Fatalf("budget %v once the waits are short again, want %v", got, spinBudget)
	}
}

// A crowded spin moves at most once per leaveGap, the gap doubling up to maxLeaveGap
// while the core stays crowded (spinner.leave).
func TestLeaveBacksOff(t *testing.T) {
	var p spinPolicy
	s := spinner{p: &p}
	now := time.Now()
	moves := 0
	for range 200 { // the coin falls right about half the times
		if p.leaveAt.After(now) {
			break
		}
		s.leave(now)
		moves++
	}
	if !multiCPU {
		t.Skip("one CPU: a spin never moves")
	}
	if !p.leaveAt.After(now) || p.leaveAt.Sub(now) != minLeaveGap || p.leaveGap != 2*minLeaveGap {
		t.Fatalf("after %d tries: next move at +%v, then gap %v; want +%v, %v", moves, p.leaveAt.Sub(now), p.leaveGap, minLeaveGap, 2*minLeaveGap)
	}
	s.leave(now.Add(minLeaveGap / 2))
	if p.leaveGap != 2*minLeaveGap {
		t.Fatal("moved again within the gap")
	}
	for range 40 {
		p.leaveAt = time.Time{}
		for p.leaveAt.IsZero() {
			s.leave(now)
		}
	}
	if p.leaveGap != maxLeaveGap {
		t.Fatalf("gap %v after many moves, want the cap %v", p.leaveGap, maxLeaveGap)
	}
}

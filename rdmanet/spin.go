package rdmanet

import (
	"runtime"
	"sync/atomic"
	"time"
)

// Waiting. A goroutine that waits for the peer (a Read for bytes, a Write for room)
// first polls the connection's CQ itself for up to spinBudget, as rsockets polls for
// its polling_time before it blocks: on a software device an empty poll reads the
// device's socket, so an answer that comes within microseconds reaches the waiter on
// its own thread, with no wake-up of another thread and no hand-off.
//
// Spinning pays only when the peer can answer meanwhile, which depends on where the
// scheduler put the threads: with both processes' spinners and their devices' work
// on two cores, or both processes on one, a spin takes the core the peer needed and
// then blocks anyway. So each side of a connection spins only while its spins pay
// (spinPolicy): spins that end without an answer twice in a row make the next waits
// block at once, exponentially more of them after each further miss, and one that is
// answered restores spinning (a single miss, a peer descheduled once, blocks nothing:
// in a request/response a blocked wait delays this side's next message by a wake-up,
// which can make the peer's spin miss in turn).
//
// And a spin yields the processor to other threads now and then (osYield), so that a
// peer sharing the core gets it: every osYieldEvery polls while a recent yield gave
// the processor away (it took over yieldLong: another thread wanted this core, the
// peer pinned beside this side, or other load), every osYieldSparse polls otherwise,
// since on a quiet machine a yield only costs its system call and the peer, on the
// other core, needs nothing from this one.

// spinBudget is how long a waiter polls an empty CQ before it sleeps.
const spinBudget = 50 * time.Microsecond

// spinPolicy decides whether a wait spins, from how the last spins went.
type spinPolicy struct {
	misses  int // spins in a row that ended without what they waited for
	skip    int // waits left that block without spinning
	crowded int // OS yields left at the frequent pace (spinner.more)
}

const maxSpinBackoff = 6 // after a miss streak, one wait in 64 tries a spin

// try says whether this wait spins.
func (p *spinPolicy) try() bool {
	if p.skip > 0 {
		p.skip--
		return false
	}
	return true
}

func (p *spinPolicy) hit() { p.misses = 0 }

// miss counts a spin that ended without an answer: the first of a streak blocks no
// wait, the next ones 1, 3, 7 … 63.
func (p *spinPolicy) miss() {
	p.misses = min(p.misses+1, maxSpinBackoff+1)
	p.skip = 1<<(p.misses-1) - 1
}

// spinFor polls the CQ until ready says so or the budget runs out, if p lets this
// wait spin; it reports whether ready said so. The completion loop parks meanwhile
// (poll); a caller told false blocks (block), which kicks it, once this spin no
// longer counts in c.spinners.
func (c *Conn) spinFor(p *spinPolicy, ready func() bool) bool {
	if !p.try() {
		return false
	}
	c.spins.Add(1)
	c.spinners.Add(1)
	defer c.spinners.Add(-1)
	procSpinners.Add(1)
	defer procSpinners.Add(-1)
	s := newSpinner(p, c.inProc)
	for {
		c.pollOnce()
		if ready() {
			p.hit()
			return true
		}
		if !s.more() {
			p.miss()
			return false
		}
	}
}

// spinner paces the polls of a spin: it yields between them, to the operating
// system's other threads every few polls (spinPolicy.crowded says how often) and to
// the goroutines of this process every poll while the process's spins hold all its
// Ps (the other goroutines, the device's, get a P only so) or when the peer is in this
// process, every goschedEvery polls otherwise; and it ends the spin once spinBudget
// has passed. It reads no clock for the first polls.
//
// Not every poll when a P is free: runtime.Gosched then wakes a thread for the idle P
// (wakep), which spins, finds the spinner's goroutine on the global run queue or
// nothing, and sleeps again: a futex wake-up and a thread beside the spinner on every
// poll (by perf's sched_switch call chains, most of a 64 B request/response's context
// switches, one per message). With every P spinning, Gosched wakes nobody. And with
// both ends of the connection in this process (rstream --loop, two Ps), a Gosched
// every 8th poll cost 64 B request/response 1.4x the time of one every poll (the
// peer's goroutines, woken on this P, wait for it), whatever the count of spins.
type spinner struct {
	p     *spinPolicy
	procs int32 // GOMAXPROCS, or 0: every poll
	polls int
	start time.Time
}

// goschedEvery is how many polls go per runtime.Gosched while a P is free.
const goschedEvery = 8

// procSpinners counts the process's spins in progress (spinFor).
var procSpinners atomic.Int32

// newSpinner starts the pacing of a spin for p; inProc says the peer is in this
// process.
func newSpinner(p *spinPolicy, inProc bool) spinner {
	s := spinner{p: p}
	if !inProc {
		s.procs = int32(runtime.GOMAXPROCS(0))
	}
	return s
}

const (
	osYieldEvery  = 4  // polls per OS yield while yields give the processor away
	osYieldSparse = 16 // and otherwise
	// yieldLong is how long an OS yield takes when another thread ran meanwhile: one
	// that finds nobody waiting for the core returns in well under a microsecond.
	yieldLong = 2 * time.Microsecond
	// crowdedYields is how many OS yields stay frequent after one that gave the
	// processor away.
	crowdedYields = 16
)

// more yields and reports whether to poll again.
func (s *spinner) more() bool {
	s.polls++
	if s.polls%16 == 0 {
		if s.start.IsZero() {
			s.start = time.Now()
		} else if time.Since(s.start) > spinBudget {
			return false
		}
	}
	every := osYieldSparse
	if s.p.crowded > 0 {
		every = osYieldEvery
	}
	if s.polls%every != 0 {
		if s.polls%goschedEvery == 0 || procSpinners.Load() >= s.procs {
			runtime.Gosched()
		}
		return true
	}
	t := time.Now()
	osYield()
	if time.Since(t) > yieldLong {
		s.p.crowded = crowdedYields
	} else if s.p.crowded > 0 {
		s.p.crowded--
	}
	return true
}

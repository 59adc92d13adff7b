package rdmanet

import (
	"math/rand/v2"
	"runtime"
	"sync/atomic"
	"time"
)

// Waiting. A goroutine that waits for the peer (a Read for bytes, a Write for room)
// first polls the connection's CQ itself for a while (its budget, from spinBudget up
// to maxSpinBudget), as rsockets polls for its polling_time before it blocks: on a
// software device an empty poll reads the device's socket, so an answer that comes
// within microseconds reaches the waiter on its own thread, with no wake-up of
// another thread and no hand-off.
//
// Spinning pays only when the peer can answer meanwhile, which depends on where the
// scheduler put the threads: with both processes' spinners and their devices' work
// on two cores, or both processes on one, a spin takes the core the peer needed and
// then blocks anyway. So each side of a connection spins only while its spins pay
// (spinPolicy): spins that end without an answer twice in a row make the next waits
// block at once, exponentially more of them after each further miss, and one that is
// answered restores spinning (a single miss, a peer descheduled once, blocks nothing:
// in a request/response a blocked wait delays this side's next message by a wake-up,
// which can make the peer's spin miss in turn). The budget follows how long this
// side's waits have been taking, spun or blocked (spinPolicy.budget): a peer whose
// answer was late once, by a wake-up of its own, is waited for that long next time
// instead of missed.
//
// A spin yields the processor to other threads now and then (osYield), so that a
// peer sharing the core gets it: every osYieldEvery polls while a recent yield gave
// the processor away (it took over yieldLong: another thread wanted this core, the
// peer pinned beside this side, or other load), every osYieldSparse polls otherwise,
// since on a quiet machine a yield only costs its system call and the peer, on the
// other core, needs nothing from this one. But two spinners must not go on yielding a
// core to each other while another is free: yields that keep giving the core away make
// the spinning thread move to another CPU its affinity allows (spinner.leave).

const (
	// spinBudget is how long a waiter polls an empty CQ before it sleeps, at least;
	// up to maxSpinBudget when its waits have been taking that long
	// (spinPolicy.budget). The most is above a blocked peer's wake-up (tens of
	// microseconds on a VM) and well below a time slice.
	spinBudget    = 50 * time.Microsecond
	maxSpinBudget = 250 * time.Microsecond
)

// spinPolicy decides whether a wait spins and for how long, from how the last waits
// went. It is one side's of a connection (the reader's, the writer's).
type spinPolicy struct {
	misses  int // spins in a row that ended without what they waited for
	skip    int // waits left that block without spinning
	crowded int // OS yields left at the frequent pace (spinner.more)
	// turn is how long this side's waits have been taking: the longest of the recent
	// ones that ended within maxSpinBudget, decaying by 1/turnDecay a wait (waited).
	turn time.Duration
	long int // OS yields in a row that gave the processor away
	// leaveAt is the earliest time a crowded spin moves to another CPU again, and
	// leaveGap the time before the move after that; leftAt is the last move
	// (spinner.leave).
	leaveAt, leftAt time.Time
	leaveGap        time.Duration
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

// budget is how long a spin polls before it blocks: twice what the recent waits took,
// within spinBudget and maxSpinBudget. In a request/response whose two sides spin, a
// side that blocked once (a spin that ran out while its thread was descheduled) sends
// its next message a wake-up late, which a fixed 50 us budget on the other side did
// not always cover: that side blocked in turn, and a miss streak made both block for
// a while.
func (p *spinPolicy) budget() time.Duration {
	return min(max(2*p.turn, spinBudget), maxSpinBudget)
}

// turnDecay is how slowly spinPolicy.turn forgets a long wait: by 1/1024 a wait, so
// that one late answer keeps the budget up for some hundreds of turns. Such answers
// come every few hundred turns in a 64 B request/response (a side descheduled for a
// moment, then blocked): forgotten by 1/32 a wait, the budget was back at 50 us by the
// next one, and the spin missed it (loopback, 3 interleaved rounds of 40 000 turns:
// mean one-way 3.48-4.31 us, against 3.40-3.55 by 1/1024 and 3.31-3.66 with the
// budget at 250 us always).
const turnDecay = 1024

// waited records how long a wait took, from its first poll to what it waited for,
// spun or blocked. A wait longer than maxSpinBudget was not for an answer that was
// imminent: it only lets turn decay.
func (p *spinPolicy) waited(d time.Duration) {
	p.turn -= p.turn / turnDecay
	if d <= maxSpinBudget {
		p.turn = max(p.turn, d)
	}
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
// process; and it ends the spin once its budget has passed. It reads no clock for the
// first polls.
//
// Not while a P is free: runtime.Gosched then wakes a thread for the idle P (wakep),
// which spins, finds the spinner's goroutine on the global run queue or nothing, and
// sleeps again: a futex wake-up and a thread beside the spinner on every poll (by
// perf's sched_switch call chains, most of a 64 B request/response's context
// switches, one per message). And a Gosched every 8th poll, as this did before, moved
// the spinning goroutine from thread to thread (the idle P's thread took it from the
// global run queue), each time onto wherever the kernel had put that thread, often
// the core of the peer's spinner: per `perf sched timehist`, a request/response's
// spinning goroutine ran on three or four threads of its process in turn. A goroutine
// the spin makes ready is taken by the free P (ready wakes it). With every P
// spinning, Gosched wakes nobody. And with both ends of the connection in this
// process (rstream --loop, two Ps), a Gosched every 8th poll cost 64 B
// request/response 1.4x the time of one every poll (the peer's goroutines, woken on
// this P, wait for it), whatever the count of spins.
type spinner struct {
	p      *spinPolicy
	procs  int32 // GOMAXPROCS, or 0: every poll
	polls  int
	start  time.Time
	budget time.Duration // spinPolicy.budget
}

// procSpinners counts the process's spins in progress (spinFor).
var procSpinners atomic.Int32

// newSpinner starts the pacing of a spin for p; inProc says the peer is in this
// process.
func newSpinner(p *spinPolicy, inProc bool) spinner {
	s := spinner{p: p, budget: p.budget()}
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
		} else if time.Since(s.start) > s.budget {
			return false
		}
	}
	every := osYieldSparse
	if s.p.crowded > 0 {
		every = osYieldEvery
	}
	if s.polls%every != 0 {
		if procSpinners.Load() >= s.procs {
			runtime.Gosched()
		}
		return true
	}
	t := time.Now()
	osYield()
	now := time.Now()
	if now.Sub(t) > yieldLong {
		s.p.crowded = crowdedYields
		if s.p.long++; s.p.long >= leaveAfter {
			s.leave(now)
		}
	} else {
		s.p.long = 0
		if s.p.crowded > 0 {
			if s.p.crowded--; s.p.crowded == 0 && now.Sub(s.p.leftAt) > leaveQuiet*s.p.leaveGap {
				s.p.leaveGap = 0 // the last move parted the spinners for good
			}
		}
	}
	return true
}

const (
	// leaveAfter is how many OS yields in a row must give the processor away before a
	// spin may move to another CPU (spinner.leave).
	leaveAfter = 2
	// minLeaveGap and maxLeaveGap bound the time between two moves of one side's
	// spinning thread (spinner.leave).
	minLeaveGap = time.Millisecond
	maxLeaveGap = time.Second
	// leaveQuiet is how many gaps the core must have been free after the last move for
	// the gap to start again from minLeaveGap.
	leaveQuiet = 8
)

// leave moves the spinning thread to another CPU (leaveCPU), at most once per
// leaveGap, and then only on the toss of a coin.
//
// Two spinners that share a core and yield it to each other both look busy and
// cache-hot to the kernel, which then moves neither to another core, even an idle one:
// every message costs each side a yield and a context switch (64 B request/response
// 7-8 us one-way against 2.8-3.1 apart, on 2 cores), for whole runs. Waiting for the
// kernel to part them is what made the figure depend on the machine and the moment; so
// a spin that finds the core crowded moves itself. The coin is for the two sides: both
// see the core crowded at once, and had both moved they would have met on the other
// core (a yield that lasted over the peer's own move looks crowded too); with the coin
// one of them moves first in two tries out of four, and the one left behind finds the
// core its own. Each move doubles the gap before the next, up to maxLeaveGap, and
// only yields that find the core free for leaveQuiet gaps after a move set it back
// (more): where the other CPUs are busy too (a CPU-bound thread of another program on
// the other core of two), a move only trades the peer, which yields, for a thread that
// does not, and moves every few milliseconds made 64 B request/response 280 us one-way
// against 8.6 without them (2 rounds each beside a busy loop, 3aaf427); with the gap growing
// there, the moves stop. Where the
// affinity mask allows one CPU (taskset -c 0) there is nowhere to go, and the spins
// share the core by yielding as before.
func (s *spinner) leave(now time.Time) {
	p := s.p
	if !multiCPU || now.Before(p.leaveAt) {
		return
	}
	p.long = 0
	if rand.Uint32()&1 == 0 {
		return
	}
	gap := max(p.leaveGap, minLeaveGap)
	p.leaveAt, p.leftAt = now.Add(gap), now
	p.leaveGap = min(2*gap, maxLeaveGap)
	leaveCPU()
}

// multiCPU says the process may run on more than one CPU (runtime.NumCPU counts those
// of its affinity mask at start); leaveCPU looks at the mask again.
var multiCPU = runtime.NumCPU() > 1

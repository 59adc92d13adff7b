//go:build ibverbs

package ibverbs

import "time"

// On rxe, ibv_post_send's doorbell is a write(2) in which the kernel runs the requester,
// and over rxe's loopback the responder and completer too: one 64 KiB RDMA WRITE keeps
// the posting thread in the kernel for a millisecond or more under emulation. Go's
// runtime counts a cgo call as a system call, and sysmon (runtime/proc.go, retake)
// takes the P from a goroutine that has run 10 ms (forcePreemptNS) on one scheduling
// tick at its next long call, since a thread in C cannot be preempted. exitsyscall then
// takes a P back without starting a new tick, so from then on every post loses its P:
// a handoff, a lock and a futex wake per post, and sysmon kept at its shortest period.
// In the rxe VM a write_bw client lost its P on about half its posts (runtime/trace).
//
// Passing through the scheduler (runtime.Gosched) starts a new tick, so a poster that
// yields more often than every 10 ms keeps its P: with yieldEvery, hardly any post
// loses it.
// perftest needs no such step; a C thread has no P to lose.

// yieldEvery is how often a device whose doorbell runs the transport lets a poster pass
// through the scheduler: well inside forcePreemptNS, rarely enough that the Gosched
// (which may wake an idle P) costs nothing measurable.
const yieldEvery = 4 * time.Millisecond

// yieldPacer says when a poster is due to pass through the scheduler. Its owner's lock
// guards it.
type yieldPacer struct {
	next time.Time
}

// due reports whether a post at now should be followed by runtime.Gosched: the first
// post, and then one in every yieldEvery.
func (p *yieldPacer) due(now time.Time) bool {
	if now.Before(p.next) {
		return false
	}
	p.next = now.Add(yieldEvery)
	return true
}

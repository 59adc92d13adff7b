//go:build linux

package server

import (
	"runtime"
	"time"

	"golang.org/x/sys/unix"

	"github.com/goverbs/goverbs/internal/engine"
)

// A stream between two devices of the daemon (a client of sw1 writing to a client of
// sw0) is the work of both ends in the loop's one thread: the sender's posts, ACKs and
// GSO sends, and the receiver's reads, ICRC checks, copies into the client's memory and
// ACKs; in-process, two programs do those on two cores. So while such a stream keeps
// the loop busy, the loop lends the device that receives the most bytes to a second
// goroutine (the helper), which reads that device alone, and takes it back when the
// device falls idle, its reads stop looking like a stream's, or it receives slower
// than with the loop alone (no spare core: on 2 loaded cores the two threads'
// wake-ups cost more than the split saves).
//
// The hand-off is for load only: a device is lent after a stretch of iterations in a
// row that each found work, lendWarm and then a multiple of lendWindow lasting at least
// lendJudge, in which it received lendMinBytes per iteration on average and lendSkew
// times what any other device did (a one-way stream: data one way, ACKs the other). A ping-pong's iterations carry a
// few hundred bytes, or as many each way, and its stretches of work end sooner, so the
// latency path keeps its one thread and its one wake-up per message; while a device is
// lent, a hop to it wakes the helper.
//
// GOVERBS_SERVE_LEND=0 turns lending off (to compare).
const (
	lendWarm     = 8        // iterations in a row that found work before the loop looks
	lendWindow   = 64       // the loop looks at its stretch every this many iterations
	lendMinBytes = 16 << 10 // received by the lent device per iteration of the window, on average
	lendSkew     = 4        // and at least this many times what any other device received
	lendIdle     = 4        // ms: the helper gives a device back after its socket stayed empty this long
	keepMinBytes = 16 << 10 // the helper gives a device back when its reads average less
	keepWindow   = 64       // the helper looks at its reads' average every this many reads
	// The helper gives a device back when it received less than lendKeep times as fast
	// as the loop alone did before the lend, in two windows in a row of at least
	// lendJudge (after lendSettle reads), and the loop lends again no sooner than
	// lendBackoff later, twice that after each further such lend, up to
	// maxLendBackoff, unless the lend had paid for lendLong. Both rates are measured
	// over lendJudge or more: over a millisecond or two (64 reads of a 64 KiB stream),
	// a burst, or a time slice lost to another program, moved either by ±25% on 2
	// cores, and lends that would have paid were given back as slower (11 of 11 in a
	// 4 s write_bw), so the loop did the stream alone on one core most of the time.
	lendKeep       = 0.95
	lendSettle     = 16
	lendBackoff    = 20 * time.Millisecond
	maxLendBackoff = time.Second
	lendLong       = 200 * time.Millisecond // a lend that paid this long resets the wait
	lendJudge      = 20 * time.Millisecond  // the shortest window a rate is measured over
)

// stretch is the loop's look at its own busy iterations (run).
type stretch struct {
	iters int       // iterations in a row that found work
	t0    time.Time // when the window began
}

// watchStretch counts an iteration that did work and, at the end of a window of them,
// lends a device if the window was a one-way stream's.
func (l *loop) watchStretch(st *stretch) {
	if l.lent.Load() {
		st.iters = 0
		return
	}
	if st.iters++; st.iters == lendWarm {
		// Measured from here: a ping-pong's stretches end sooner, and cost no more
		// than the count.
		st.t0 = time.Now()
		l.mu.Lock()
		for _, ld := range l.all {
			ld.rx0 = ld.d.RxBytes()
		}
		l.mu.Unlock()
	}
	// Looked at every lendWindow iterations, once the stretch has lasted lendJudge: a
	// shorter look takes a burst, or a time slice lost, for the loop's pace.
	window := st.iters - lendWarm
	if window <= 0 || window%lendWindow != 0 || time.Since(st.t0) < lendJudge {
		return
	}
	st.iters = 0
	l.mu.Lock()
	var best *loopDev
	var most, next uint64
	for _, ld := range l.all {
		rx := ld.d.RxBytes() - ld.rx0
		switch {
		case rx > most:
			best, most, next = ld, rx, most
		case rx > next:
			next = rx
		}
	}
	l.mu.Unlock()
	if best == nil || most < uint64(window)*lendMinBytes || most < lendSkew*next {
		return
	}
	now := time.Now()
	if now.UnixNano() < l.holdOff.Load() {
		return // lending did not pay a moment ago
	}
	best.solo = float64(most) / float64(now.Sub(st.t0))
	// Out of the loop's set first: from now on only the helper reads the socket.
	if unix.EpollCtl(l.ep, unix.EPOLL_CTL_DEL, best.fd, nil) != nil {
		return
	}
	if best.rfd >= 0 {
		if unix.EpollCtl(l.ep, unix.EPOLL_CTL_DEL, best.rfd, nil) != nil {
			l.ctl(unix.EPOLL_CTL_ADD, best.fd, best.tok)
			return
		}
		best.away.Store(true) // and its rings are not polled by the loop
	}
	l.lent.Store(true)
	best.lends.Add(1)
	// With a thread of its own the device's reader gains from the senders' copies into
	// the rings, done on the loop's thread beside its own work; alone, the loop is
	// faster copying each payload once, from the sender's memory (netio.Message.Loans):
	// ib_write_bw -s 65536 between two devices, forced to lend, went 4.5-5.4 GB/s with
	// loans, 6.4-8.7 unlent with loans, and 6-11 lent at a1bfe2a (copies, before loans).
	best.d.PreferCopies(true)
	l.lendCh <- best // room: only one device is lent at a time
}

// help is the helper goroutine: it serves each device the loop lends it until the
// device falls idle, then gives it back.
func (l *loop) help() {
	defer close(l.helped)
	backoff := lendBackoff
	for ld := range l.lendCh {
		start := time.Now()
		switch l.serveLent(ld) {
		case lendSlower:
			ld.slower.Add(1)
			// No spare core (a loaded machine, or programs spinning on every core):
			// the loop alone was faster. Try again later, and later still each time.
			l.holdOff.Store(time.Now().Add(backoff).UnixNano())
			backoff = min(2*backoff, maxLendBackoff)
		case lendTired:
			// It paid for a while: if long enough, lending pays here, and the stream
			// only changed.
			ld.slower.Add(1)
			if time.Since(start) >= lendLong {
				backoff = lendBackoff
			}
			l.holdOff.Store(time.Now().Add(backoff).UnixNano())
			backoff = min(2*backoff, maxLendBackoff)
		case lendPaid:
			backoff = lendBackoff
		}
		// Back into the loop's set, level-triggered: what came since the last read is
		// seen there. A device closed meanwhile (the daemon is leaving) stays out: its
		// descriptor's number may be another file's now.
		if fd, ok := ld.d.DriveRx(); ok && fd == ld.fd && !l.quit.Load() {
			l.ctl(unix.EPOLL_CTL_ADD, ld.fd, ld.tok)
			if ld.rfd >= 0 && ld.d.RingFD() == ld.rfd {
				l.ctl(unix.EPOLL_CTL_ADD, ld.rfd, ld.tok|tokRings)
			}
		}
		ld.away.Store(false)
		ld.d.PreferCopies(false) // the loop's again: loans
		if ld.rfd >= 0 {
			// The loop may be waiting with this device's rings left out of its word to
			// their producers (run): it must look at them, and say it again.
			l.kick.Signal()
		}
		l.lent.Store(false)
	}
}

// How a device's time with the helper ended (serveLent).
const (
	lendOver   = iota // the stream ended or thinned, or the loop closes
	lendPaid          // as lendOver, after the device received faster than with the loop alone
	lendSlower        // the device received slower than with the loop alone
	lendTired         // it paid, then received slower than with the loop alone
)

// serveLent reads the lent device as the loop would, waiting for its socket in an
// epoll set of its own, until the socket stays empty for lendIdle, its reads stop
// looking like a stream's, they come slower than the loop alone took them (ld.solo),
// or the loop closes.
func (l *loop) serveLent(ld *loopDev) int {
	ev := unix.EpollEvent{Events: unix.EPOLLIN, Fd: ld.tok}
	if unix.EpollCtl(l.hep, unix.EPOLL_CTL_ADD, ld.fd, &ev) != nil {
		return lendOver
	}
	defer unix.EpollCtl(l.hep, unix.EPOLL_CTL_DEL, ld.fd, nil)
	if ld.rfd >= 0 {
		rev := unix.EpollEvent{Events: unix.EPOLLIN, Fd: ld.tok | tokRings}
		if unix.EpollCtl(l.hep, unix.EPOLL_CTL_ADD, ld.rfd, &rev) != nil {
			return lendOver
		}
		defer unix.EpollCtl(l.hep, unix.EPOLL_CTL_DEL, ld.rfd, nil)
	}
	evs := make([]unix.EpollEvent, 2)
	var lazy []*session
	// The first lendSettle reads take what queued while the loop decided; the
	// windows are measured after them.
	reads, idle, slow := -lendSettle, 0, 0
	var rx0 uint64
	var t0 time.Time
	verdict := lendOver
	for !l.quit.Load() {
		lazy = l.lazyOf(ld.d, lazy)
		for i, s := range lazy {
			s.lazyTurn()
			lazy[i] = nil
		}
		if ld.d.PollDriven() {
			idle = 0
			if reads++; reads == 0 {
				rx0, t0 = ld.d.RxBytes(), time.Now()
			} else if reads%keepWindow == 0 {
				rx, now := ld.d.RxBytes(), time.Now()
				if rx-rx0 < uint64(reads)*keepMinBytes {
					return verdict
				}
				if now.Sub(t0) < lendJudge {
					continue // too short to judge the rate by
				}
				if float64(rx-rx0) >= lendKeep*ld.solo*float64(now.Sub(t0)) {
					verdict, slow = lendPaid, 0
				} else if slow++; slow == 2 {
					// Slower twice in a row (once is a hiccup: a descheduled
					// thread, the stream's end).
					if verdict == lendPaid {
						return lendTired
					}
					return lendSlower
				}
				reads, rx0, t0 = 0, rx, now
			}
			continue
		}
		// The rings signal only a reader that said it waits (loop.run).
		if !ld.d.RingsSleep() {
			runtime.Gosched() // a ring holds what another goroutine is reading (PollRx)
			continue
		}
		n, err := unix.EpollWait(l.hep, evs, lendIdle)
		ld.d.RingsAwake(false)
		for _, e := range evs[:max(n, 0)] {
			if e.Fd&tokRings != 0 {
				ld.d.RingsAwake(true)
			} else {
				ld.d.SocketReadable()
			}
		}
		switch {
		case err == unix.EINTR:
		case err != nil || n == 0:
			return verdict
		default:
			// Readable, yet PollDriven read nothing: another goroutine holds the socket
			// (a CQ poll's PollRx). Let it run, as the loop does.
			if idle++; idle < 8 {
				runtime.Gosched()
			} else {
				time.Sleep(50 * time.Microsecond)
			}
		}
	}
	return verdict
}

// lazyOf appends to buf the sessions of device d whose RC QPs post receives without a
// doorbell (lazyTurn).
func (l *loop) lazyOf(d *engine.Device, buf []*session) []*session {
	buf = buf[:0]
	l.mu.Lock()
	for _, s := range l.sessions {
		if s.lazy.Load() && s.d.eng == d {
			buf = append(buf, s)
		}
	}
	l.mu.Unlock()
	return buf
}

// lends says how many times the loop lent device d to the helper, and how many of
// those ended because the device received slower than with the loop alone.
func (l *loop) lends(d *engine.Device) (lends, slower uint64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, ld := range l.all {
		if ld.d == d {
			return ld.lends.Load(), ld.slower.Load()
		}
	}
	return 0, 0
}

// drivesRings reports whether the loop reads device d's same-host rings.
func (l *loop) drivesRings(d *engine.Device) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, ld := range l.rings {
		if ld.d == d {
			return true
		}
	}
	return false
}

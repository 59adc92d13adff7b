package tool

import (
	"context"
	"errors"
	"fmt"
	"math"
	"runtime"
	"sync/atomic"
	"time"

	"github.com/goverbs/goverbs/verbs"
	"github.com/goverbs/goverbs/verbs/attach"
)

// StallTimeout bounds how long a tool waits for a completion before it decides the
// peer has gone away (rdma-core's tools wait forever; a hang helps nobody).
const StallTimeout = 10 * time.Second

// ErrStall: the peer stopped answering.
var ErrStall = fmt.Errorf("no completion for %v: the peer stopped answering", StallTimeout)

// CQWaiter polls a CQ, spinning briefly and then sleeping on a completion channel, so
// that two busy sides on a small machine do not starve the devices' receive loops.
type CQWaiter struct {
	CQ     *verbs.CQ
	Ch     *verbs.CompChannel
	buf    []verbs.WC
	events bool // -e: always sleep on the channel, never spin
	spin   int
	// attached: the device is a goverbs serve daemon's (verbs/attach): polling its CQ
	// reads memory the daemon writes, and the daemon's threads do the device's work.
	attached bool
	// WaitStream's pace: when it last took completions, and the mean time between
	// completions since.
	last  time.Time
	per   time.Duration
	stall stallWatch
}

// stallWatch ends a channel wait that has lasted StallTimeout. One context serves every
// wait, checked by a watchdog each second, instead of a context with a timeout per wait:
// each of those adds a runtime timer, and a timer that becomes a P's earliest wakes a
// second thread to watch it (wakeNetPoller, then wakep), a futex wake-up per completion
// on a ping-pong's critical path.
type stallWatch struct {
	ctx     context.Context
	cancel  context.CancelFunc
	tick    *time.Timer
	waiting atomic.Int64 // when the wait in progress began (UnixNano), or 0
}

func (s *stallWatch) start() {
	s.ctx, s.cancel = context.WithCancel(context.Background())
	s.tick = time.AfterFunc(time.Second, s.check)
}

func (s *stallWatch) check() {
	if s.ctx.Err() != nil {
		return // stopped (or fired): a Reset now would tick on for nothing
	}
	if t := s.waiting.Load(); t != 0 && time.Since(time.Unix(0, t)) > StallTimeout {
		s.cancel()
		return
	}
	s.tick.Reset(time.Second)
}

func (s *stallWatch) stop() {
	s.cancel() // first: a check running now then does not re-arm the timer
	s.tick.Stop()
}

// NewCQ creates a CQ with its channel. With busy (--busy-poll) wait never sleeps: every
// poll of an empty CQ reads the device's socket itself.
func NewCQ(dev *verbs.Device, depth int, events, busy bool) (*CQWaiter, error) {
	ch := dev.CreateCompChannel()
	cq, err := dev.CreateCQ(depth, ch)
	if err != nil {
		ch.Close()
		return nil, fmt.Errorf("couldn't create CQ of depth %d: %v", depth, err)
	}
	w := &CQWaiter{CQ: cq, Ch: ch, buf: make([]verbs.WC, 64), events: events, spin: 1 << 30,
		attached: dev.Info().Provider == attach.ProviderName && !attach.OwnEngine(dev.Commander())}
	w.stall.start()
	if busy && !events {
		w.spin = math.MaxInt
	}
	return w, nil
}

// Close closes the CQ and its channel.
func (w *CQWaiter) Close() {
	w.stall.stop()
	w.CQ.Close()
	w.Ch.Close()
}

// TryPoll returns what the CQ holds now, possibly nothing.
func (w *CQWaiter) TryPoll() ([]verbs.WC, error) {
	n, err := w.CQ.Poll(w.buf)
	if err != nil {
		return nil, fmt.Errorf("poll CQ: %v", err)
	}
	return w.buf[:n], nil
}

// Wait returns at least one completion, or ErrStall. Unless -e asked for events only,
// it first spins (yielding) for SpinBudget, since a completion usually comes within
// microseconds and a channel wake-up costs more than that.
func (w *CQWaiter) Wait() ([]verbs.WC, error) {
	spins := 0
	var start time.Time
	for {
		wcs, err := w.TryPoll()
		if err != nil || len(wcs) > 0 {
			return wcs, err
		}
		if !w.events && spins < w.spin {
			spins++
			if spins%64 == 0 {
				if start.IsZero() {
					start = time.Now()
				} else if time.Since(start) > SpinBudget && w.spin != math.MaxInt {
					spins = w.spin // budget spent: sleep on the channel
				}
				runtime.Gosched()
				if w.spin != math.MaxInt {
					YieldCPU() // the netpoller's thread needs this CPU: see YieldCPU
				}
			}
			continue
		}
		if err := w.CQ.RequestNotify(false); err != nil {
			return nil, fmt.Errorf("couldn't request CQ notification: %v", err)
		}
		if wcs, err := w.TryPoll(); err != nil || len(wcs) > 0 {
			return wcs, err
		}
		w.stall.waiting.Store(time.Now().UnixNano())
		_, err = w.Ch.Wait(w.stall.ctx)
		w.stall.waiting.Store(0)
		if errors.Is(err, context.Canceled) {
			if wcs, err := w.TryPoll(); err != nil || len(wcs) > 0 {
				return wcs, err
			}
			return nil, ErrStall
		}
		if err != nil {
			return nil, err
		}
		spins = 0
	}
}

// WaitStream is Wait for a stream that keeps inFlight requests posted and not yet
// completed. On an attached device, unless -e or --busy-poll, it naps instead of
// spinning while the requests in flight are work enough for the daemon to go on with.
// A program spinning there does none of the device's work (an in-process device's
// polls read its socket; an attached one's read memory the daemon writes) and is a
// third runnable thread beside the two the daemon runs a stream between two of its
// devices on: on 2 cores it took a third to half of a core from the daemon, or the
// scheduler put both of the daemon's threads on one core (write_bw 64 KiB attached:
// 3570-3910 MiB/s spinning, 3930-4100 napping, same daemon). A nap lasts half the time
// the daemon takes, at the pace it completed requests so far, to complete what is in
// flight, at most napMax, so that what is in flight outlasts the nap, and the
// program takes the completions in batches. Sleeping on the channel instead costs the
// daemon and the program a wake-up per completion. A ping-pong (one in flight), and a
// stream too fast to nap, spin as before.
func (w *CQWaiter) WaitStream(inFlight int) ([]verbs.WC, error) {
	if !w.attached || w.events || w.spin == math.MaxInt || inFlight < 2 {
		return w.Wait()
	}
	var start time.Time
	for {
		wcs, err := w.TryPoll()
		if err != nil {
			return nil, err
		}
		now := time.Now()
		if len(wcs) > 0 {
			w.pace(now, len(wcs))
			return wcs, nil
		}
		nap := w.per * time.Duration(inFlight) / 2
		if w.per == 0 || nap < napMin {
			wcs, err := w.Wait()
			if err == nil {
				w.pace(time.Now(), len(wcs))
			}
			return wcs, err
		}
		if start.IsZero() {
			start = now
		} else if now.Sub(start) > StallTimeout {
			return nil, ErrStall
		}
		Nap(min(nap, napMax))
	}
}

// Bounds of WaitStream's naps: a shorter one costs more in its wake-up than a spin; a
// longer one would make the stream's pace coarse.
const (
	napMin = 20 * time.Microsecond
	napMax = time.Millisecond
)

// pace counts n completions taken at now into the mean time between completions.
func (w *CQWaiter) pace(now time.Time, n int) {
	if !w.last.IsZero() {
		d := now.Sub(w.last) / time.Duration(n)
		if w.per == 0 {
			w.per = d
		} else {
			w.per = (7*w.per + d) / 8
		}
	}
	w.last = now
}

// WCError describes a failed completion as the rdma-core examples do.
func WCError(wc *verbs.WC) error {
	return fmt.Errorf("failed status %s (%d) for wr_id %d", wc.Status, wc.Status, wc.ID)
}

// SpinBudget is how long a waiter spins before it sleeps: a completion usually comes
// sooner, and a wake-up from sleep costs more than the spin.
const SpinBudget = 50 * time.Microsecond

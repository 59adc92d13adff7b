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
	stall  stallWatch
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
	w := &CQWaiter{CQ: cq, Ch: ch, buf: make([]verbs.WC, 64), events: events, spin: 1 << 30}
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

// WCError describes a failed completion as the rdma-core examples do.
func WCError(wc *verbs.WC) error {
	return fmt.Errorf("failed status %s (%d) for wr_id %d", wc.Status, wc.Status, wc.ID)
}

// SpinBudget is how long a waiter spins before it sleeps: a completion usually comes
// sooner, and a wake-up from sleep costs more than the spin.
const SpinBudget = 50 * time.Microsecond

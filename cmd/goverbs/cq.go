package main

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

// stallTimeout bounds how long a tool waits for a completion before it decides the
// peer has gone away (rdma-core's tools wait forever; a hang helps nobody).
const stallTimeout = 10 * time.Second

var errStall = fmt.Errorf("no completion for %v: the peer stopped answering", stallTimeout)

// cqWaiter polls a CQ, spinning briefly and then sleeping on a completion channel, so
// that two busy sides on a small machine do not starve the devices' receive loops.
type cqWaiter struct {
	cq     *verbs.CQ
	ch     *verbs.CompChannel
	buf    []verbs.WC
	events bool // -e: always sleep on the channel, never spin
	spin   int
	stall  stallWatch
}

// stallWatch ends a channel wait that has lasted stallTimeout. One context serves every
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
	if t := s.waiting.Load(); t != 0 && time.Since(time.Unix(0, t)) > stallTimeout {
		s.cancel()
		return
	}
	s.tick.Reset(time.Second)
}

func (s *stallWatch) stop() {
	s.cancel() // first: a check running now then does not re-arm the timer
	s.tick.Stop()
}

// newCQ creates a CQ with its channel. With busy (--busy-poll) wait never sleeps: every
// poll of an empty CQ reads the device's socket itself.
func newCQ(dev *verbs.Device, depth int, events, busy bool) (*cqWaiter, error) {
	ch := dev.CreateCompChannel()
	cq, err := dev.CreateCQ(depth, ch)
	if err != nil {
		ch.Close()
		return nil, fmt.Errorf("couldn't create CQ of depth %d: %v", depth, err)
	}
	w := &cqWaiter{cq: cq, ch: ch, buf: make([]verbs.WC, 64), events: events, spin: 1 << 30}
	w.stall.start()
	if busy && !events {
		w.spin = math.MaxInt
	}
	return w, nil
}

func (w *cqWaiter) close() {
	w.stall.stop()
	w.cq.Close()
	w.ch.Close()
}

// tryPoll returns what the CQ holds now, possibly nothing.
func (w *cqWaiter) tryPoll() ([]verbs.WC, error) {
	n, err := w.cq.Poll(w.buf)
	if err != nil {
		return nil, fmt.Errorf("poll CQ: %v", err)
	}
	return w.buf[:n], nil
}

// wait returns at least one completion, or errStall. Unless -e asked for events only,
// it first spins (yielding) for spinBudget, since a completion usually comes within
// microseconds and a channel wake-up costs more than that.
func (w *cqWaiter) wait() ([]verbs.WC, error) {
	spins := 0
	var start time.Time
	for {
		wcs, err := w.tryPoll()
		if err != nil || len(wcs) > 0 {
			return wcs, err
		}
		if !w.events && spins < w.spin {
			spins++
			if spins%64 == 0 {
				if start.IsZero() {
					start = time.Now()
				} else if time.Since(start) > spinBudget && w.spin != math.MaxInt {
					spins = w.spin // budget spent: sleep on the channel
				}
				runtime.Gosched()
				if w.spin != math.MaxInt {
					yieldCPU() // the netpoller's thread needs this CPU: see waitByte
				}
			}
			continue
		}
		if err := w.cq.RequestNotify(false); err != nil {
			return nil, fmt.Errorf("couldn't request CQ notification: %v", err)
		}
		if wcs, err := w.tryPoll(); err != nil || len(wcs) > 0 {
			return wcs, err
		}
		w.stall.waiting.Store(time.Now().UnixNano())
		_, err = w.ch.Wait(w.stall.ctx)
		w.stall.waiting.Store(0)
		if errors.Is(err, context.Canceled) {
			if wcs, err := w.tryPoll(); err != nil || len(wcs) > 0 {
				return wcs, err
			}
			return nil, errStall
		}
		if err != nil {
			return nil, err
		}
		spins = 0
	}
}

// wcError describes a failed completion as the rdma-core examples do.
func wcError(wc *verbs.WC) error {
	return fmt.Errorf("failed status %s (%d) for wr_id %d", wc.Status, wc.Status, wc.ID)
}

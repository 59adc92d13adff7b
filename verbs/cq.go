package verbs

import (
	"context"
	"sync"
	"sync/atomic"

	"github.com/goverbs/goverbs/verbs/driver"
)

// CQ is a completion queue (struct ibv_cq).
type CQ struct {
	dev     *Device
	impl    driver.CQ
	channel *CompChannel
	life    life
	events  atomic.Uint32 // events delivered, for AckEvents
	acked   atomic.Uint32
}

// CreateCQ creates a completion queue of at least depth entries (ibv_create_cq).
// With a channel, RequestNotify arms it to report completions there.
func (d *Device) CreateCQ(depth int, channel *CompChannel) (*CQ, error) {
	if d.closed.Load() {
		return nil, errDeviceClosed
	}
	cq := &CQ{dev: d, channel: channel}
	var notify func()
	if channel != nil {
		if channel.dev != d {
			return nil, ErrWrongDevice
		}
		if err := channel.use(1); err != nil {
			return nil, err
		}
		// Called only once the CQ is armed, by which time cq.impl is set.
		notify = func() { channel.signal(cq) }
	}
	impl, err := d.impl.CreateCQ(depth, notify)
	if err == nil {
		cq.impl = impl
		if err = d.track(nil, cq, nil, true); err != nil {
			impl.Close()
		}
	}
	if err != nil {
		if channel != nil {
			channel.use(-1)
		}
		return nil, err
	}
	return cq, nil
}

// Poll fills wcs with up to len(wcs) completions, oldest first, and returns how many
// (ibv_poll_cq). It never blocks and does not allocate. After an overrun it returns
// ErrCQOverflow once the CQ is empty.
func (cq *CQ) Poll(wcs []WC) (int, error) {
	if cq.life.closed.Load() { // Device.Close sets it too
		return 0, errCQClosed
	}
	n, err := cq.impl.Poll(noescape(wcs)) // the provider fills wcs in place (see noescape)
	if err != nil && n == 0 {
		return 0, err
	}
	return n, nil
}

// Depth returns the number of completions the CQ holds; a closed CQ's is the last it had.
func (cq *CQ) Depth() int { return cq.impl.Depth() }

// Resize changes the CQ's depth, keeping its completions (ibv_resize_cq).
func (cq *CQ) Resize(depth int) error {
	if cq.life.closed.Load() {
		return errCQClosed
	}
	return cq.impl.Resize(depth)
}

// RequestNotify arms the CQ: its channel gets one event at the next completion, or with
// solicitedOnly at the next solicited or error completion (ibv_req_notify_cq).
func (cq *CQ) RequestNotify(solicitedOnly bool) error {
	if cq.life.closed.Load() {
		return errCQClosed
	}
	return cq.impl.RequestNotify(solicitedOnly)
}

// AckEvents acknowledges n events received from the channel for this CQ
// (ibv_ack_cq_events). Close waits for nothing here, but the count is kept for parity.
func (cq *CQ) AckEvents(n int) { cq.acked.Add(uint32(n)) }

// Close destroys the CQ (ibv_destroy_cq); it fails with ErrBusy while a QP uses it.
func (cq *CQ) Close() error {
	return cq.life.close(errCQClosed, func() error {
		if err := cq.impl.Close(); err != nil {
			return err
		}
		cq.dev.track(nil, cq, nil, false)
		if cq.channel != nil {
			cq.channel.use(-1)
		}
		return nil
	})
}

// CompChannel is a completion event channel (struct ibv_comp_channel): armed CQs report
// their next completion here and a consumer blocks in Wait instead of polling.
type CompChannel struct {
	dev *Device
	// lead, when the provider offers one, lets the goroutine blocked in Wait read and
	// process the device's traffic itself instead of being handed the completion by the
	// device's receive goroutine: one thread wake-up per completion instead of two (see
	// driver.Waiter).
	lead   driver.Waiter
	mu     sync.Mutex
	ready  []*CQ
	cqs    int // open CQs that report here
	wake   chan struct{}
	done   chan struct{}
	closed bool
	// ctxDone and ctxStop keep the context.AfterFunc that wakes a serving Wait when its
	// context ends, for the context that waits again and again (a program's loop, an
	// rdmanet Conn): registering one per Wait allocates. Keyed by ctx.Done(), which
	// every call of a context returns the same, and which any context type gives.
	ctxDone <-chan struct{}
	ctxStop func() bool
}

// CreateCompChannel creates a completion channel (ibv_create_comp_channel). On a closed
// device the channel is closed already: its Wait and Close return ErrClosed.
func (d *Device) CreateCompChannel() *CompChannel {
	c := &CompChannel{dev: d, wake: make(chan struct{}, 1), done: make(chan struct{})}
	if l, ok := d.impl.(driver.Leader); ok {
		c.lead = l.NewWaiter()
	}
	d.mu.Lock()
	if d.closed.Load() {
		c.shut()
	} else {
		d.chans[c] = struct{}{}
	}
	d.mu.Unlock()
	return c
}

// use counts a CQ that starts (+1) or stops (-1) reporting to the channel.
func (c *CompChannel) use(delta int) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed && delta > 0 {
		return errChannelClosed
	}
	c.cqs += delta
	return nil
}

// shut closes the channel with its device, waking its waiters.
func (c *CompChannel) shut() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.closed {
		c.closed = true
		close(c.done)
		c.releaseCtx()
		c.wakeLeader()
	}
}

func isDone(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// releaseCtx drops the cached context registration. c.mu is held.
func (c *CompChannel) releaseCtx() {
	if c.ctxStop != nil {
		c.ctxStop()
		c.ctxDone, c.ctxStop = nil, nil
	}
}

// wakeLeader ends the wait of a goroutine serving the device in Wait.
func (c *CompChannel) wakeLeader() {
	if c.lead != nil {
		c.lead.Wake()
	}
}

// signal is called by the provider (never blocking) when an armed CQ fires.
func (c *CompChannel) signal(cq *CQ) {
	c.mu.Lock()
	c.ready = append(c.ready, cq)
	c.mu.Unlock()
	select {
	case c.wake <- struct{}{}:
	default:
	}
	c.wakeLeader()
}

// Wait blocks until an armed CQ of this channel has a completion, and returns that CQ
// (ibv_get_cq_event). It returns ctx.Err() when ctx ends first, and ErrClosed after Close.
//
// On a software device in the default mode the waiting goroutine reads and processes the
// device's traffic itself while it waits, if no other goroutine does (leader/follower),
// so that the socket's arrival wakes the goroutine that wants the completion.
func (c *CompChannel) Wait(ctx context.Context) (*CQ, error) {
	var stop func() bool // a registration of this call's own, when the cached one is another context's
	defer func() {
		if stop != nil {
			stop()
		}
	}()
	for {
		c.mu.Lock()
		if len(c.ready) > 0 {
			cq := c.ready[0]
			copy(c.ready, c.ready[1:])
			c.ready = c.ready[:len(c.ready)-1]
			c.mu.Unlock()
			cq.events.Add(1)
			return cq, nil
		}
		closed := c.closed
		var turn <-chan struct{}
		if c.lead != nil && !closed && stop == nil {
			if done := ctx.Done(); done != nil && done != c.ctxDone {
				if c.ctxDone != nil && isDone(c.ctxDone) {
					c.releaseCtx() // that context is over: the cache serves the next one
				}
				if c.ctxDone == nil {
					c.ctxDone, c.ctxStop = done, context.AfterFunc(ctx, c.lead.Wake) // ctx's end ends a Serve too
				} else {
					stop = context.AfterFunc(ctx, c.lead.Wake)
				}
			}
		}
		c.mu.Unlock()
		if closed {
			return nil, errChannelClosed
		}
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		if c.lead != nil {
			if c.lead.Serve() {
				continue // woken: a completion, ctx's end or Close
			}
			turn = c.lead.Turn() // another goroutine reads: follow, and lead when it leaves
		}
		select {
		case <-c.wake:
		case <-c.done:
		case <-turn:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// Close destroys the channel (ibv_destroy_comp_channel); blocked Wait calls return
// ErrClosed. It fails with ErrBusy while a CQ reports to the channel: close the CQs
// first.
func (c *CompChannel) Close() error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return errChannelClosed
	}
	if c.cqs > 0 {
		c.mu.Unlock()
		return errChannelBusy
	}
	c.closed = true
	close(c.done)
	c.releaseCtx()
	c.mu.Unlock()
	c.wakeLeader()
	c.dev.mu.Lock()
	delete(c.dev.chans, c)
	c.dev.mu.Unlock()
	return nil
}

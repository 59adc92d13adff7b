package rdmanet

import (
	"sync"
	"sync/atomic"
	"time"
)

// deadline is one direction's deadline as a channel that is closed when it passes,
// so that a blocked call selects on it beside its wake-up and the connection's close.
//
// Every Read and Write looks at it (readable, writeErr), twice for a message that
// waits, so wait is a single atomic load; mu orders only the setters and the timer.
type deadline struct {
	mu     sync.Mutex
	timer  *time.Timer
	passed atomic.Pointer[chan struct{}] // closed when the deadline passes
}

func newDeadline() *deadline {
	d := new(deadline)
	ch := make(chan struct{})
	d.passed.Store(&ch)
	return d
}

// set moves the deadline; the zero time means none.
func (d *deadline) set(t time.Time) {
	d.mu.Lock()
	defer d.mu.Unlock()
	cur := *d.passed.Load()
	if d.timer != nil && !d.timer.Stop() {
		<-cur // the timer fired: wait for it to have closed the channel
	}
	d.timer = nil
	closed := isClosed(cur)
	fresh := func() chan struct{} {
		if closed {
			ch := make(chan struct{})
			d.passed.Store(&ch)
			return ch
		}
		return cur
	}
	if t.IsZero() {
		fresh()
		return
	}
	if dur := time.Until(t); dur > 0 {
		ch := fresh()
		d.timer = time.AfterFunc(dur, func() { close(ch) })
		return
	}
	if !closed {
		close(cur)
	}
}

// wait returns the channel that is closed when the deadline passes.
func (d *deadline) wait() <-chan struct{} { return *d.passed.Load() }

func isClosed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// Doorbell batching on a device the application's polls drive (busy-poll, or a
// default-mode device while a program spins on its CQ: Device.pollDriven): the posts of
// a stream wait for the application's next poll, which sends them together; a timer
// (the alarm) sends them if no poll comes. (Otherwise a default-mode device hands a
// stream to its sender goroutine: see PostSend.)

package engine

import (
	"sync"
	"sync/atomic"
	"time"
)

// doorbell is the list of QPs whose streamed posts wait for the application's next
// poll (PostSend). Sending every post inline costs a sendmmsg per message, which bounds
// a small-message stream; a goroutine to send a stream would take the core the poller
// spins on. Here a stream's posts wait until the application polls a CQ of the
// device (PollRx, Device.Progress), arms one or resizes one, which a busy application
// does as soon as it has posted what it can: the poll sends everything posted meanwhile
// in as few sendmmsg calls as GSO allows, from the poller's own thread.
//
// A post must still leave within microseconds when nobody polls: an RNIC completes a UD
// send that soon after the doorbell, and a program may wait for the peer by other means.
// The first post deferred arms the device's alarm (alarmDelay), unless it is armed
// already; a flush leaves it armed, and when it expires its goroutine sends whatever is
// deferred then (nothing, when a poll came in time), so that a stream sets it about once
// per alarmDelay, not twice per burst (flush has why). The alarm
// and its goroutine start with the device's first deferral (startAlarm): the goroutine
// holds a thread in read(2), which a device whose polls never drive it (most
// default-mode ones) need not pay. Where there is no alarm (no timerfd), the sender
// goroutine is woken instead, at once.
type doorbell struct {
	mu     sync.Mutex
	qps    []*QP
	n      atomic.Int32 // len(qps), for a poll's look without the lock
	armed  bool         // the alarm is set, or the sender woken
	closed bool         // the alarm is closed

	flushMu  sync.Mutex // one flush at a time: it owns work
	work     []*QP
	flushing atomic.Bool // a flush has taken the list and not yet sent all of it

	alarm    *alarm        // from the first deferral on (startAlarm); nil: the sender goroutine is the backstop
	alarmEnd chan struct{} // closed when the alarm's goroutine has ended
}

// alarmDelay is how long a deferred post waits for a poll before the alarm sends it: a
// stream's posts and the poll after them fit with room to spare (a shorter delay fired
// in most streams on a small machine and halved the rate: DESIGN.md, "Doorbell
// batching"), and it is short against any reply a program may be waiting for.
const alarmDelay = 50 * time.Microsecond

// maxDeferred is how many work requests of one QP may wait for a poll: the post that
// reaches it sends them, a full GSO run.
const maxDeferred = 64

// add puts qp, whose newest posts are queued and not sent, on the list. qp.mu is held.
func (b *doorbell) add(d *Device, qp *QP) {
	b.mu.Lock()
	b.qps = append(b.qps, qp)
	b.n.Store(int32(len(b.qps)))
	if !b.armed {
		b.armed = true
		if b.closed || !b.startAlarm(d) || b.alarm.set(alarmDelay) != nil {
			d.sender.kick()
		}
	}
	b.mu.Unlock()
}

// startAlarm starts the alarm and its goroutine unless they run already, and reports
// whether there is an alarm (none without timerfd). b.mu is held, and the doorbell is
// not closed.
func (b *doorbell) startAlarm(d *Device) bool {
	if b.alarm == nil {
		if b.alarm = newAlarm(); b.alarm == nil {
			return false
		}
		b.alarmEnd = make(chan struct{})
		go d.runAlarm(b.alarmEnd)
	}
	return true
}

// flush sends every deferred post, and returns when they have left, whoever sent them:
// a flush running meanwhile (the alarm's) is waited for, so that a resize counts the
// completions of every post before it. Any goroutine may call it but one holding a QP
// lock.
func (b *doorbell) flush() {
	if b.n.Load() == 0 && !b.flushing.Load() {
		return
	}
	b.flushMu.Lock()
	defer b.flushMu.Unlock()
	b.mu.Lock()
	b.flushing.Store(true) // before n goes to 0: whoever sees 0 then sees this
	b.work, b.qps = b.qps, b.work[:0]
	b.n.Store(0)
	if b.armed && (b.alarm == nil || b.closed) {
		b.armed = false // the sender was woken: the next deferral wakes it again
	}
	// An armed alarm is left to expire, and a deferral while it is armed does not set it
	// again: it expires at most alarmDelay after the first deferral since it last
	// expired, and sends what is deferred then, if anything. Setting and stopping a
	// timer that is the CPU's next to expire reprograms the CPU's timer, which on the
	// VM the figures come from is a trip through the hypervisor each: about 6 µs to set
	// the alarm and 6 to stop it (one 5 ms out, behind the scheduler's tick, 0.3 µs),
	// and a stream paid both for each burst (DESIGN.md, "Doorbell batching"). A stream
	// that keeps deferring now sets it once per alarmDelay, and its goroutine wakes that
	// often while the stream lasts. A post deferred shortly before the alarm expires
	// leaves sooner than alarmDelay after it, with the rest: never later.
	b.mu.Unlock()
	for i, qp := range b.work {
		qp.mu.Lock()
		qp.sendQueued()
		qp.mu.Unlock()
		b.work[i] = nil
	}
	b.flushing.Store(false)
}

// runAlarm is the alarm's goroutine: it sends what no poll came for in time, until the
// doorbell closes.
func (d *Device) runAlarm(done chan<- struct{}) {
	defer close(done)
	b := &d.doorbell
	for {
		err := b.alarm.wait()
		b.mu.Lock()
		closed := b.closed
		b.armed = false // expired: the next deferral sets it again
		b.mu.Unlock()
		if closed || err != nil {
			return
		}
		b.flush()
	}
}

// close ends the alarm's goroutine, if one started, and releases the alarm
// (Device.Close): it makes the alarm expire now and waits for the goroutine to see it.
// The sender goroutine is the backstop from then on, until it stops too.
func (b *doorbell) close() {
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return
	}
	if b.alarm != nil {
		_ = b.alarm.set(0) // expire now (1 ns): a timerfd set to a valid time does not fail
	}
	b.closed = true
	a, end := b.alarm, b.alarmEnd
	b.mu.Unlock()
	if end != nil {
		<-end
		a.release()
	}
}

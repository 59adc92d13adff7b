// Leader/follower receive in the default mode: the goroutine that blocks waiting for a
// completion event reads and processes the socket itself, so that the netpoller wakes the
// goroutine that wants the packet, as it wakes a goroutine blocked in UDPConn.Read. The
// receive goroutine (rxLoop) reads only while nobody waits; drive.go has its side.

package engine

import (
	"errors"
	"runtime"
	"sync/atomic"
	"time"

	"github.com/goverbs/goverbs/netio"
	"github.com/goverbs/goverbs/verbs/driver"
)

// Waiter lets one completion channel's waiting goroutine run its device's receive path
// (Serve). Wake ends a Serve, from any goroutine.
type Waiter struct {
	d     *Device
	woken atomic.Bool
}

// NewWaiter returns a Waiter for a completion channel on d, or nil when d cannot be
// read by a waiting goroutine: a busy-poll device (its pollers read it already) or a Conn
// whose blocked read cannot be interrupted (netio.Interrupter).
func (d *Device) NewWaiter() driver.Waiter {
	if d.intr == nil {
		return nil
	}
	return &Waiter{d: d}
}

// Serve runs the device's receive path in the calling goroutine until Wake is called,
// or was called since the last Serve returned: it blocks in the socket's read (the
// netpoller) and processes each batch to completion. It reports false at once when
// another goroutine holds the socket; the caller then blocks on its channel and on
// Turn, which tells it when to try again.
//
// The ACKs a batch earns are sent at once unless the batch woke this waiter: then they
// wait for the caller's reply to carry them (ackAlong), as a busy poller's do, or for its
// next Serve, or for the receive goroutine when nobody has served for a while.
func (w *Waiter) Serve() bool {
	d := w.d
	if w.woken.Swap(false) {
		return true
	}
	if d.closed.Load() || d.external.Load() {
		return false // an event loop reads the socket (DriveRx)
	}
	d.leads.Add(1) // the receive goroutine stays out of the way (rxLoop)
	if !d.rxMu.TryLock() {
		return false
	}
	defer d.leaveRx()
	for !d.closed.Load() && !d.external.Load() {
		if len(d.acks.owing) > 0 {
			d.flushAcks()
		}
		// Wake stores woken and then looks at parked; this stores parked and then
		// looks at woken: one of the two sees the other, so no Wake is missed.
		d.parked.Store(w)
		if w.woken.Swap(false) {
			d.parked.Store(nil)
			return true
		}
		n, err := d.serveRead(w)
		d.parked.Store(nil)
		if err != nil {
			if isClosed(err) {
				return true
			}
			if !isInterrupted(err) {
				d.rxError(err)
			}
			continue
		}
		d.leads.Add(1)
		d.inputBatch(n)
		if w.woken.Swap(false) {
			return true // the ACKs wait for the reply (see above)
		}
		d.flushAcks()
	}
	return true
}

// serveRead is the serving waiter's read. When its last batch came from the same-host
// rings, whose poll costs no system call (netio.RingReader), and traffic is dense (the
// waiter's last wait for a batch was shorter than denseGap), it first polls for up to
// rxSpin, yielding every serveYieldEvery polls, as rxLoop's spinRx polls after a dense
// batch: a ping-pong's reply then finds its waiter awake instead of going eventfd,
// netpoller, thread wake-up, which cost most of a blocked turn (issue 28). A Wake ends
// the spin (parked is set: it interrupts the blocking read that follows). Sporadic
// traffic costs no spin: a wait longer than denseGap ends it until the next dense spell.
func (d *Device) serveRead(w *Waiter) (int, error) {
	if d.rings == nil {
		return d.readBlocking() // no rings: nothing to spin on, no gap to keep
	}
	if d.serveRings && d.serveGap < int64(denseGap) {
		d.beginRead()
		start := nanotime()
		for polls := 1; !w.woken.Load() && !d.closed.Load(); polls++ {
			n, err := d.idlePoller.PollBatch(d.rxMsgs)
			raceAcquireWire()
			if err != nil || n > 0 {
				d.serveGap, d.serveRings = nanotime()-start, n > 0 && d.fromRings()
				return n, err
			}
			if polls%serveYieldEvery == 0 {
				if nanotime()-start > int64(rxSpin) {
					break
				}
				runtime.Gosched()
			}
		}
	}
	start := nanotime()
	n, err := d.readBlocking()
	d.serveGap, d.serveRings = nanotime()-start, n > 0 && d.fromRings()
	return n, err
}

// serveYieldEvery is how many empty polls serveRead's spin makes between two looks at
// the clock and two yields to the process's other goroutines. A yield at every poll made
// the spin's period a clock read and a pass through the scheduler longer (perf of
// send_lat -e through the rings: the clock 12% of the waiting side's samples, the
// scheduler's locks 7%), and a reply was seen that much later; every 16th poll,
// send_lat -e took 0.965x the time (6 interleaved rounds, /tmp/ab28e.sh, 2026-11-28).
// rxLoop's spinRx keeps its yield at every poll: there the same change cost the
// same-host 8 B and 64 KiB WRITE streams 0.96x and 0.98x (6 rounds), and rdmanet's
// spinner (rdmanet/spin.go) has the story of yields that wake idle Ps.
const serveYieldEvery = 16

// Wake ends the Serve running now, or else the next one. A completion pushed from outside
// the receive path (a timer, a flush, a post) interrupts the socket read the serving
// goroutine is blocked in; one pushed by that goroutine's own processing costs nothing
// more than the flag.
func (w *Waiter) Wake() {
	w.woken.Store(true)
	if w.d.parked.Load() == w {
		w.d.intr.Interrupt()
	}
}

// Turn is signalled when the goroutine that held the socket lets it go: a Waiter whose
// Serve returned false waits on it as well as on its channel.
func (w *Waiter) Turn() <-chan struct{} { return w.d.rxFree }

// leaveRx lets the socket go and offers it to a waiting goroutine, if any.
func (d *Device) leaveRx() {
	d.rxMu.Unlock()
	select {
	case d.rxFree <- struct{}{}:
	default:
	}
}

// rxError logs a receive error other than a closed socket, and pauses: a persistent
// socket error must not spin a core.
func (d *Device) rxError(err error) {
	if d.debug {
		d.log.Debug("receive error", "dev", d.name, "err", err)
	}
	time.Sleep(time.Millisecond)
}

func isInterrupted(err error) bool { return errors.Is(err, netio.ErrInterrupted) }

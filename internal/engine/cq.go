// Completion queues: the ring of work completions the engine fills and Poll drains
// (a busy-poll device's empty poll drives the receive path), with completion events.

package engine

import (
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/goverbs/goverbs/verbs/driver"
)

var (
	ErrCQOverflow = driver.NewError(driver.ErrCQOverflow, "completion queue overrun: completions were lost")
	ErrCQClosed   = driver.NewError(driver.ErrClosed, "completion queue is closed")
	ErrCQBusy     = driver.NewError(driver.ErrBusy, "completion queue is still used by a queue pair")
	ErrCQSize     = driver.NewError(driver.ErrInvalidAttr, "invalid completion queue size")
)

// MaxCQE is the largest CQ depth the device accepts (rxe advertises 32767).
const MaxCQE = 1<<15 - 1

// CQ is a completion queue: a ring of work completions written by the engine and read by
// Poll. A full CQ is an overrun (IBTA 11.4.2.1): the CQ goes to the error state, Poll
// reports ErrCQOverflow, and an async CQ-error event is raised; nothing blocks.
type CQ struct {
	dev  *Device
	mu   sync.Mutex
	ring []driver.WC
	head int // oldest completion
	n    int // completions in the ring
	// held mirrors n for a busy poller's look before it reads the socket: an empty
	// poll, the common case in a spin loop, then takes no lock.
	held atomic.Int32
	// stopped says overflow || closed for the same look: with held 0 and stopped false,
	// Take has nothing to return and takes no lock either.
	stopped atomic.Bool

	overflow bool
	closed   bool
	refs     int // QPs using it

	// Completion events (ibv_req_notify_cq): armed says which completion fires handler.
	armed   cqArm
	handler func()
}

type cqArm uint8

const (
	cqDisarmed cqArm = iota
	cqArmNext
	cqArmSolicited
)

// CreateCQ creates a completion queue that holds at least depth completions; notify,
// when not nil, is its event handler (SetHandler).
func (d *Device) CreateCQ(depth int, notify func()) (driver.CQ, error) {
	cq, err := d.newCQ(depth)
	if err != nil {
		return nil, err
	}
	if notify != nil {
		cq.SetHandler(notify)
	}
	return cq, nil
}

func (d *Device) newCQ(depth int) (*CQ, error) {
	if d.closed.Load() {
		return nil, ErrDeviceClosed
	}
	if depth < 1 || depth > MaxCQE {
		return nil, ErrCQSize
	}
	return &CQ{dev: d, ring: make([]driver.WC, depth)}, nil
}

// Depth returns the number of completions the CQ holds.
func (cq *CQ) Depth() int {
	cq.mu.Lock()
	defer cq.mu.Unlock()
	return len(cq.ring)
}

// Poll copies up to len(out) completions, oldest first, and returns how many. It first
// sends the device's deferred posts (doorbell batching): a program polls when it has
// posted what it can. An empty CQ's poll drives the device if it can (PollRx, which
// sends them itself).
func (cq *CQ) Poll(out []driver.WC) (int, error) {
	if cq.held.Load() == 0 {
		cq.dev.PollRx()
	} else {
		cq.dev.doorbell.flush()
	}
	return cq.Take(out)
}

// Take is Poll without driving the device: the shared-device daemon moves a CQ's
// completions when its event fires, and an empty Poll's drive would make the device
// take the daemon for a program spinning on the CQ (whose socket leaves the netpoller).
func (cq *CQ) Take(out []driver.WC) (int, error) {
	if cq.held.Load() == 0 && !cq.stopped.Load() {
		// Empty, the common case of a poll in a spin loop: no lock (two locked
		// instructions a poll). A completion pushed meanwhile is the next poll's, as
		// if this one had taken the lock first.
		return 0, nil
	}
	cq.mu.Lock()
	if cq.closed {
		cq.mu.Unlock()
		return 0, ErrCQClosed
	}
	k := 0
	for k < len(out) && cq.n > 0 {
		out[k] = cq.ring[cq.head]
		cq.head++
		if cq.head == len(cq.ring) {
			cq.head = 0
		}
		cq.n--
		k++
	}
	if k > 0 {
		cq.held.Add(int32(-k))
	}
	if cq.n == 0 {
		// Drained: the next completion goes into the first slot again, so a CQ its
		// poller keeps empty writes the same few cache lines however deep it is. A
		// ring walked all the way round (4096 completions of 40 bytes, a common depth)
		// is larger than this core's L2, and each push then stalled on a line fetched
		// from afar (perf: a tenth of an in-process ping-pong's time at push's
		// first locked instruction after the store).
		cq.head = 0
	}
	overflow := cq.overflow
	cq.mu.Unlock()
	if k == 0 && overflow {
		return 0, ErrCQOverflow
	}
	return k, nil
}

// Resize changes the ring size, keeping the completions in it (ibv_resize_cq). Deferred
// posts are sent first, those waiting for a poll (doorbell) and those left to the sender
// goroutine: an RNIC has long completed a UD send posted before, and a resize below the
// completions it holds must fail (pyverbs' test_resize_cq).
func (cq *CQ) Resize(depth int) error {
	return cq.ResizeHolding(depth, 0)
}

// ResizeHolding is Resize for a caller that holds held of the CQ's completions outside
// it (the daemon, in a client's ring): the new depth must hold them too.
func (cq *CQ) ResizeHolding(depth, held int) error {
	cq.dev.doorbell.flush()
	cq.dev.sender.flush()
	cq.mu.Lock()
	defer cq.mu.Unlock()
	if depth < 1 || depth > MaxCQE {
		return ErrCQSize
	}
	if n := cq.n + held; depth < n {
		return driver.NewError(driver.ErrInvalidAttr, fmt.Sprintf("resize CQ to %d: it holds %d completions", depth, n))
	}
	ring := make([]driver.WC, depth)
	for i := 0; i < cq.n; i++ {
		ring[i] = cq.ring[(cq.head+i)%len(cq.ring)]
	}
	cq.ring, cq.head = ring, 0
	return nil
}

// SetHandler installs the function called (without the CQ lock) when an armed CQ gets a
// completion. It must not block.
func (cq *CQ) SetHandler(f func()) {
	cq.mu.Lock()
	cq.handler = f
	cq.mu.Unlock()
}

// RequestNotify arms the CQ for one event: on the next completion, or only on the next
// solicited or error completion (IBTA 11.4.2.2). Deferred posts are sent first: the
// program is about to sleep until a completion comes.
func (cq *CQ) RequestNotify(solicitedOnly bool) error {
	cq.dev.doorbell.flush()
	cq.mu.Lock()
	defer cq.mu.Unlock()
	if cq.closed {
		return ErrCQClosed
	}
	if solicitedOnly {
		if cq.armed != cqArmNext {
			cq.armed = cqArmSolicited
		}
	} else {
		cq.armed = cqArmNext
	}
	return nil
}

// push appends a completion. solicited marks a receive completion of a message with the
// solicited-event bit, which fires a solicited-only arm; errors fire it too.
func (cq *CQ) push(wc *driver.WC, solicited bool) {
	cq.mu.Lock()
	if cq.closed {
		cq.mu.Unlock()
		return
	}
	if cq.n == len(cq.ring) {
		first := !cq.overflow
		cq.overflow = true
		cq.stopped.Store(true)
		cq.mu.Unlock()
		cq.dev.counters.CQOverflows.Add(1)
		if first {
			cq.dev.raise(driver.AsyncEvent{Type: driver.EventCQErr, CQ: cq})
		}
		return
	}
	tail := cq.head + cq.n
	if tail >= len(cq.ring) {
		tail -= len(cq.ring)
	}
	cq.ring[tail] = *wc
	cq.n++
	cq.held.Add(1)
	var fire func()
	if cq.armed == cqArmNext || (cq.armed == cqArmSolicited && (solicited || wc.Status != driver.WCSuccess)) {
		cq.armed = cqDisarmed
		fire = cq.handler
	}
	cq.mu.Unlock()
	if fire != nil {
		cq.dev.woke.Store(true)
		fire()
	}
}

// Close destroys the CQ; it fails while a QP still uses it (ibv_destroy_cq: EBUSY).
func (cq *CQ) Close() error {
	cq.mu.Lock()
	defer cq.mu.Unlock()
	if cq.refs > 0 {
		return ErrCQBusy
	}
	cq.closed = true
	cq.stopped.Store(true)
	return nil
}

func (cq *CQ) ref(delta int) {
	cq.mu.Lock()
	cq.refs += delta
	cq.mu.Unlock()
}

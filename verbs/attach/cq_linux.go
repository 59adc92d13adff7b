package attach

import (
	"sync"

	"golang.org/x/sys/unix"
	"sync/atomic"

	"github.com/goverbs/goverbs/internal/attach"
	"github.com/goverbs/goverbs/internal/shm"
	"github.com/goverbs/goverbs/verbs/driver"
)

// CQ is a completion queue: the daemon writes completions into a ring we map, and
// Poll reads them there without a syscall.
type CQ struct {
	d        *Device
	h        uint32
	depth    atomic.Int32
	reg      *shm.Region
	ring     *shm.SlotConsumer
	arm      *atomic.Uint32
	overflow *atomic.Uint32
	ev       *shm.Eventfd
	mu       sync.Mutex // the ring has one consumer
	closed   bool       // under mu: the ring is unmapped
	empties  int        // under mu: empty polls in a row
	done     chan struct{}
}

var errCQOverflow = driver.NewError(driver.ErrCQOverflow, "completion queue overrun: completions were lost")

func (d *Device) CreateCQ(depth int, notify func()) (driver.CQ, error) {
	if depth < 1 || depth > 1<<24 {
		return nil, driver.NewError(driver.ErrInvalidAttr, "invalid completion queue size")
	}
	r, files, err := d.ctl.call(attach.OpCreateCQ, func(w *attach.Writer) { w.U32(uint32(depth)) })
	if err != nil {
		return nil, err
	}
	h, got, slots, ctlOff, size := r.U32(), r.U32(), int(r.U32()), int(r.U32()), int(r.U32())
	if err := want(&r, files, 2); err != nil {
		return nil, err
	}
	cq := &CQ{d: d, h: h, done: make(chan struct{})}
	cq.depth.Store(int32(got))
	fail := func(err error) (driver.CQ, error) {
		d.call(attach.OpDestroyCQ, func(w *attach.Writer) { w.U32(h) })
		return nil, err
	}
	if cq.reg, err = shm.Map(files[0], size, size+1<<16); err != nil {
		files[1].Close()
		return fail(err)
	}
	if cq.ring, err = shm.NewSlotConsumer(cq.reg.Bytes(), slots, attach.CQELen); err != nil {
		files[1].Close()
		cq.reg.Close()
		return fail(err)
	}
	cq.arm, cq.overflow = attach.Word(cq.reg.Bytes(), ctlOff), attach.Word(cq.reg.Bytes(), ctlOff+4)
	if cq.arm == nil || cq.overflow == nil {
		files[1].Close()
		cq.reg.Close()
		return fail(errGone)
	}
	if cq.ev, err = eventfd(files[1]); err != nil {
		cq.reg.Close()
		return fail(err)
	}
	if notify != nil {
		go cq.notifier(notify)
	} else {
		close(cq.done)
	}
	d.track(h, cq)
	return cq, nil
}

// notifier calls notify each time the daemon writes the CQ's eventfd: an armed CQ
// fired.
func (cq *CQ) notifier(notify func()) {
	defer close(cq.done)
	for cq.ev.Wait() == nil {
		notify()
	}
}

// Poll reads completions from the ring.
func (cq *CQ) Poll(wcs []driver.WC) (int, error) {
	cq.mu.Lock()
	if cq.closed {
		cq.mu.Unlock()
		return 0, driver.NewError(driver.ErrClosed, "completion queue is closed")
	}
	n := 0
	for n < len(wcs) {
		slot, err := cq.ring.Peek()
		if err != nil || slot == nil {
			break
		}
		attach.ParseCQE(slot, &wcs[n])
		cq.ring.Release()
		n++
	}
	if n > 0 {
		cq.ring.Publish()
		cq.empties = 0
	} else if cq.empties++; cq.empties%16 == 0 {
		// A program spinning on an empty CQ waits for the daemon, whose threads need a
		// CPU to do the work: on a host with fewer cores than spinners they would
		// otherwise wait for the scheduler's time slice. The in-process device does this
		// work in the spinning thread itself.
		unix.RawSyscall(unix.SYS_SCHED_YIELD, 0, 0, 0)
	}
	cq.mu.Unlock()
	if n == 0 && cq.overflow.Load() != 0 {
		return 0, errCQOverflow
	}
	return n, nil
}

// RequestNotify arms the CQ in shared memory: the daemon fires it with the next
// completion it writes.
func (cq *CQ) RequestNotify(solicitedOnly bool) error {
	if solicitedOnly {
		cq.arm.Store(2)
	} else {
		cq.arm.Store(1)
	}
	return nil
}

func (cq *CQ) Depth() int { return int(cq.depth.Load()) }

// Resize changes the daemon's CQ; the ring keeps its size (completions beyond it wait
// in the daemon until there is room).
func (cq *CQ) Resize(depth int) error {
	r, err := cq.d.call(attach.OpResizeCQ, func(w *attach.Writer) {
		w.U32(cq.h)
		w.U32(uint32(depth))
	})
	if err != nil {
		return err
	}
	cq.depth.Store(int32(r.U32()))
	return nil
}

func (cq *CQ) Close() error {
	if _, err := cq.d.call(attach.OpDestroyCQ, func(w *attach.Writer) { w.U32(cq.h) }); err != nil {
		return err
	}
	cq.d.track(cq.h, nil)
	cq.ev.Close()
	<-cq.done
	cq.mu.Lock()
	cq.closed = true
	cq.reg.Close()
	cq.mu.Unlock()
	return nil
}

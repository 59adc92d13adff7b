package attach

import (
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/goverbs/goverbs/internal/attach"
	"github.com/goverbs/goverbs/internal/shm"
	"github.com/goverbs/goverbs/verbs/driver"
)

var (
	errQPState   = driver.NewError(driver.ErrQPState, "QP state does not allow this")
	errQueueFull = driver.NewError(driver.ErrQueueFull, "work queue is full")
	errTooMany   = driver.NewError(driver.ErrInvalidAttr, "too many scatter/gather elements")
	errClosed    = driver.NewError(driver.ErrClosed, "object is closed")
)

// workQueue is a ring we produce WQEs into for the daemon.
type workQueue struct {
	mu     sync.Mutex
	ring   *shm.SlotProducer
	maxSGE int
	closed bool
	// taken: a post returns only once the daemon has handed the receives to its engine
	// (waitTaken): the receive queue of a UD or UC QP.
	taken bool
}

// QP is a queue pair whose work queues are rings shared with the daemon.
type QP struct {
	d     *Device
	h     uint32
	qpn   uint32
	cap   driver.QPCap
	reg   *shm.Region
	sq    workQueue
	rq    workQueue // no ring with an SRQ
	state atomic.Uint32
}

func (p *PD) CreateQP(init *driver.QPInit) (driver.QP, error) {
	scq, ok1 := init.SendCQ.(*CQ)
	rcq, ok2 := init.RecvCQ.(*CQ)
	var rcqH, srqH uint32
	if init.Type == driver.QPTypeXRCSend && init.RecvCQ == nil {
		ok2 = true // an XRC initiator has no receive side
	} else if ok2 {
		rcqH = rcq.h
	}
	if init.SRQ != nil {
		s, ok := init.SRQ.(*SRQ)
		if !ok {
			return nil, driver.ErrWrongDevice
		}
		srqH = s.h
	}
	if !ok1 || !ok2 {
		return nil, driver.ErrWrongDevice
	}
	r, files, err := p.d.ctl.call(attach.OpCreateQP, func(w *attach.Writer) {
		w.U32(p.h)
		w.U8(uint8(init.Type))
		w.U8(b2u(init.SigAll))
		w.U8(b2u(init.BlockSelfMcastLoopback))
		w.U8(0)
		w.U32(scq.h)
		w.U32(rcqH)
		w.U32(srqH)
		w.PutCap(init.Cap)
	})
	if err != nil {
		return nil, err
	}
	q := &QP{d: p.d, h: r.U32(), qpn: r.U32(), cap: r.Cap()}
	q.rq.taken = init.Type == driver.QPTypeUD || init.Type == driver.QPTypeUC
	var l attach.QPLayout
	for _, v := range []*int{&l.SQSlots, &l.SQSlot, &l.RQOff, &l.RQSlots, &l.RQSlot, &l.Size} {
		*v = int(r.U32())
	}
	if err := want(&r, files, 1); err != nil {
		return nil, err
	}
	if err := q.mapQueues(files[0], l, l.RQSlots == 0); err != nil {
		p.d.call(attach.OpDestroyQP, func(w *attach.Writer) { w.U32(q.h) })
		return nil, err
	}
	p.d.track(q.h, q)
	return q, nil
}

func b2u(b bool) uint8 {
	if b {
		return 1
	}
	return 0
}

// mapQueues maps the QP's rings; norq: the QP has no receive ring (an SRQ, or an XRC
// initiator).
func (q *QP) mapQueues(f *os.File, l attach.QPLayout, norq bool) error {
	var err error
	if q.reg, err = shm.Map(f, l.Size, l.Size+1<<16); err != nil {
		return err
	}
	mem := q.reg.Bytes()
	q.sq.maxSGE = int(q.cap.MaxSendSGE)
	if q.sq.ring, err = shm.NewSlotProducer(mem, l.SQSlots, l.SQSlot); err != nil || attach.SendSlot(q.cap.MaxSendSGE) > l.SQSlot {
		q.reg.Close()
		return errGone
	}
	if !norq {
		q.rq.maxSGE = int(q.cap.MaxRecvSGE)
		if l.RQOff > len(mem) {
			q.reg.Close()
			return errGone
		}
		if q.rq.ring, err = shm.NewSlotProducer(mem[l.RQOff:], l.RQSlots, l.RQSlot); err != nil || attach.RecvSlot(q.cap.MaxRecvSGE) > l.RQSlot {
			q.reg.Close()
			return errGone
		}
	}
	return nil
}

func (q *QP) QPN() uint32 { return q.qpn }

// State asks the daemon, since the QP moves to ERR there by itself.
func (q *QP) State() driver.QPState {
	r, err := q.d.call(attach.OpQueryQP, func(w *attach.Writer) { w.U32(q.h) })
	if err != nil {
		return driver.QPState(q.state.Load())
	}
	r.QPAttr()
	s := driver.QPState(r.U8())
	q.state.Store(uint32(s))
	return s
}

func (q *QP) Modify(a *driver.QPAttr, mask driver.QPAttrMask) error {
	_, err := q.d.call(attach.OpModifyQP, func(w *attach.Writer) {
		w.U32(q.h)
		w.U32(uint32(mask))
		w.PutQPAttr(a)
	})
	if err == nil && mask&driver.QPAttrState != 0 {
		q.state.Store(uint32(a.State))
	}
	return err
}

func (q *QP) Query() driver.QPAttr {
	r, err := q.d.call(attach.OpQueryQP, func(w *attach.Writer) { w.U32(q.h) })
	if err != nil {
		return driver.QPAttr{State: driver.QPState(q.state.Load()), Cap: q.cap}
	}
	return r.QPAttr()
}

// PostSend writes the work requests into the send ring and rings the doorbell only
// if the daemon said it sleeps. The state check is the one the engine makes, done
// here so that a post in the wrong state fails at once, as ibv_post_send does.
func (q *QP) PostSend(wrs []driver.SendWR) error {
	switch driver.QPState(q.state.Load()) {
	case driver.QPStateRTS, driver.QPStateSQD, driver.QPStateSQE, driver.QPStateErr:
	default:
		return errQPState
	}
	if q.d.gone() {
		return errGone
	}
	q.sq.mu.Lock()
	defer q.sq.mu.Unlock()
	if q.sq.closed {
		return errClosed
	}
	if q.sq.ring == nil {
		return errQPState // an XRC target sends nothing of its own
	}
	var perr error
	for i := range wrs {
		wr := &wrs[i]
		if len(wr.SGL) > q.sq.maxSGE {
			perr = &driver.PostError{Index: i, Err: errTooMany}
			break
		}
		slot, ok, err := q.sq.ring.Slot()
		if err != nil || !ok {
			perr = &driver.PostError{Index: i, Err: errQueueFull}
			break
		}
		var h attach.SendWQE
		live := true
		h.AH, live = ahHandle(wr.AH)
		var bindRKey uint32
		var bindAddr, bindLen uint64
		var bindAccess driver.Access
		var bindMW *MW
		if b := wr.Bind; b != nil && wr.Opcode == driver.WRBindMW && live {
			if bindMW = mwOf(b.MW); bindMW != nil {
				h.BindMW, live = bindMW.h, !bindMW.closed.Load()
			}
			if live {
				h.BindMR, live = mrHandle(b.MR)
			}
			bindRKey, bindAddr, bindLen, bindAccess = b.RKey, b.Addr, b.Length, b.Access
		}
		if !live {
			perr = &driver.PostError{Index: i, Err: errClosed}
			break
		}
		if bindMW != nil {
			bindMW.rkey.Store(bindRKey) // a type 2 window's rkey is the one its bind gives
		}
		attach.PutSendWQE(slot, wr, h, bindRKey, bindAddr, bindLen, bindAccess)
		q.sq.ring.Commit()
	}
	if q.sq.ring.Publish() {
		q.d.ring()
	}
	return perr
}

func (q *QP) PostRecv(wrs []driver.RecvWR) error {
	if q.rq.ring == nil {
		return errQPState // its receives go to the SRQ
	}
	if driver.QPState(q.state.Load()) == driver.QPStateReset {
		return errQPState
	}
	return q.rq.postRecv(q.d, wrs)
}

func (wq *workQueue) postRecv(d *Device, wrs []driver.RecvWR) error {
	if d.gone() {
		return errGone
	}
	wq.mu.Lock()
	defer wq.mu.Unlock()
	if wq.closed {
		return errClosed
	}
	var perr error
	for i := range wrs {
		if len(wrs[i].SGL) > wq.maxSGE {
			perr = &driver.PostError{Index: i, Err: errTooMany}
			break
		}
		slot, ok, err := wq.ring.Slot()
		if err != nil || !ok {
			perr = &driver.PostError{Index: i, Err: errQueueFull}
			break
		}
		attach.PutRecvWQE(slot, &wrs[i])
		wq.ring.Commit()
	}
	if wq.ring.Publish() {
		d.ring()
	}
	if wq.taken {
		wq.waitTaken(d)
	}
	return perr
}

// waitTaken waits until the daemon has taken every published receive and handed it to
// its engine (the daemon moves the ring's tail only after that). A UD or UC QP needs it:
// a message that finds no receive is dropped, and a program that posts a receive and then
// has its peer send expects the receive to be there, as it is on an RNIC once the post
// returns. (RC needs no wait: a message that comes first draws an RNR NAK and comes
// again.) The wait is the daemon's wake-up when it sleeps; it is bounded, and ends when
// the daemon has gone. wq.mu is held.
func (wq *workQueue) waitTaken(d *Device) {
	deadline := time.Now().Add(2 * time.Second)
	for spins := 0; wq.ring.Pending() > 0; spins++ {
		if d.gone() || spins%64 == 63 && time.Now().After(deadline) {
			return
		}
		// Yield to this process's goroutines (a daemon in the same process, as in
		// tests, needs a P) and now and then the core to other processes (the daemon's).
		if spins%8 == 7 {
			unix.RawSyscall(unix.SYS_SCHED_YIELD, 0, 0, 0)
		} else {
			runtime.Gosched()
		}
	}
}

func (q *QP) BindMW(mw driver.MW, id uint64, flags driver.SendFlags, b driver.MWBind) (uint32, error) {
	m, ok := mw.(*MW)
	if !ok {
		return 0, driver.ErrWrongDevice
	}
	r, err := q.d.call(attach.OpBindMW, func(w *attach.Writer) {
		w.U32(q.h)
		w.U32(m.h)
		w.U64(id)
		w.U32(uint32(flags))
		mh, _ := mrHandle(b.MR)
		w.U32(mh)
		w.U64(b.Addr)
		w.U64(b.Length)
		w.U32(uint32(b.Access))
	})
	if err != nil {
		return 0, err
	}
	rkey := r.U32()
	m.rkey.Store(rkey)
	return rkey, nil
}

func (q *QP) mcast(op attach.Op, gid driver.GID, lid uint16) error {
	_, err := q.d.call(op, func(w *attach.Writer) {
		w.U32(q.h)
		w.Bytes(gid[:])
		w.U16(lid)
	})
	return err
}

func (q *QP) AttachMcast(gid driver.GID, lid uint16) error {
	return q.mcast(attach.OpAttachMcast, gid, lid)
}
func (q *QP) DetachMcast(gid driver.GID, lid uint16) error {
	return q.mcast(attach.OpDetachMcast, gid, lid)
}

func (q *QP) Counters() driver.QPCounters {
	r, err := q.d.call(attach.OpQPCounters, func(w *attach.Writer) { w.U32(q.h) })
	if err != nil {
		return driver.QPCounters{}
	}
	return r.QPCounters()
}

func (q *QP) Close() error {
	if _, err := q.d.call(attach.OpDestroyQP, func(w *attach.Writer) { w.U32(q.h) }); err != nil {
		return err
	}
	q.d.track(q.h, nil)
	q.sq.mu.Lock()
	q.rq.mu.Lock()
	q.sq.closed, q.rq.closed = true, true
	if q.reg != nil {
		q.reg.Close()
	}
	q.rq.mu.Unlock()
	q.sq.mu.Unlock()
	return nil
}

// SRQ is a shared receive queue whose ring is shared with the daemon.
type SRQ struct {
	d   *Device
	h   uint32
	num uint32 // an XRC SRQ's number
	reg *shm.Region
	rq  workQueue
}

func (p *PD) CreateSRQ(a driver.SRQAttr) (driver.SRQ, error) {
	return p.createSRQ(attach.OpCreateSRQ, func(w *attach.Writer) {
		w.U32(p.h)
		w.U32(a.MaxWR)
		w.U32(a.MaxSGE)
		w.U32(a.SRQLimit)
	})
}

// createSRQ sends CREATE_SRQ or CREATE_XRC_SRQ and maps the ring of the reply (an XRC
// SRQ's ends with its number).
func (p *PD) createSRQ(op attach.Op, build func(*attach.Writer)) (*SRQ, error) {
	r, files, err := p.d.ctl.call(op, build)
	if err != nil {
		return nil, err
	}
	s := &SRQ{d: p.d, h: r.U32()}
	r.U32()
	s.rq.maxSGE = int(r.U32())
	slots, slot := int(r.U32()), int(r.U32())
	if op == attach.OpCreateXRCSRQ {
		s.num = r.U32()
	}
	if err := want(&r, files, 1); err != nil {
		return nil, err
	}
	size := shm.SlotRingSize(slots, slot)
	if s.reg, err = shm.Map(files[0], size, size+1<<16); err == nil {
		if s.rq.ring, err = shm.NewSlotProducer(s.reg.Bytes(), slots, slot); err != nil || attach.RecvSlot(uint32(s.rq.maxSGE)) > slot {
			s.reg.Close()
			err = errGone
		}
	}
	if err != nil {
		p.d.call(attach.OpDestroySRQ, func(w *attach.Writer) { w.U32(s.h) })
		return nil, err
	}
	p.d.track(s.h, s)
	return s, nil
}

func (s *SRQ) PostRecv(wrs []driver.RecvWR) error { return s.rq.postRecv(s.d, wrs) }

func (s *SRQ) Arm(limit uint32) error {
	_, err := s.d.call(attach.OpArmSRQ, func(w *attach.Writer) {
		w.U32(s.h)
		w.U32(limit)
	})
	return err
}

func (s *SRQ) Query() driver.SRQAttr {
	r, err := s.d.call(attach.OpQuerySRQ, func(w *attach.Writer) { w.U32(s.h) })
	if err != nil {
		return driver.SRQAttr{}
	}
	return driver.SRQAttr{MaxWR: r.U32(), MaxSGE: r.U32(), SRQLimit: r.U32()}
}

func (s *SRQ) Close() error {
	if _, err := s.d.call(attach.OpDestroySRQ, func(w *attach.Writer) { w.U32(s.h) }); err != nil {
		return err
	}
	s.d.track(s.h, nil)
	s.rq.mu.Lock()
	s.rq.closed = true
	s.reg.Close()
	s.rq.mu.Unlock()
	return nil
}

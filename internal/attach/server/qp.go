//go:build linux

package server

import (
	"os"

	"github.com/goverbs/goverbs/internal/attach"
	"github.com/goverbs/goverbs/internal/shm"
	"github.com/goverbs/goverbs/verbs/driver"
)

// batch is how many WQEs the pump takes from one queue per post.
const batch = 32

// recvQueue is a receive queue's ring (a QP's or an SRQ's) and the pump's
// decoding space for it.
type recvQueue struct {
	ring    *shm.SlotConsumer
	slot    int
	maxSGE  int
	wrs     [batch]driver.RecvWR
	sgl     [batch][]driver.SGE
	pending int // decoded and not yet accepted by the engine (its queue was full)
	scratch []byte
	broken  bool
}

func newRecvQueue(mem []byte, slots, slot, maxSGE int) (*recvQueue, error) {
	if err := shm.InitSlotRing(mem, slots, slot); err != nil {
		return nil, err
	}
	ring, err := shm.NewSlotConsumer(mem, slots, slot)
	if err != nil {
		return nil, err
	}
	q := &recvQueue{ring: ring, slot: slot, maxSGE: maxSGE, scratch: make([]byte, slot)}
	for i := range q.sgl {
		q.sgl[i] = make([]driver.SGE, max(maxSGE, 1))
	}
	return q, nil
}

// qpObj is a QP: the engine's, its send ring, and its receive ring unless it has an SRQ
// (or is an XRC initiator). An XRC target (XRC_RECV) has only the engine's QP and its
// domain: no PD, CQs or rings, and the pump never sees it (it is not in session.qps).
type qpObj struct {
	h        uint32
	qp       driver.QP
	typ      driver.QPType
	xrcd     *xrcdObj // an XRC target's domain
	pd       *pdObj
	scq, rcq *cqObj
	srq      *srqObj
	reg      *shm.Region
	sq       *shm.SlotConsumer
	rq       *recvQueue
	// lazyRecv: the receive ring's consumer is never said to sleep while the event loop
	// serves the session, so the client's receive posts write no doorbell; the loop
	// takes them before it reads the device's socket (lazyTurn), a command before it
	// runs, a step with the next send. An RC message that finds no receive would only
	// be RNR NAKed and sent again; a UD or UC one would be lost, and their clients wait
	// for the ring's tail (a doorbell) anyway. A receive ring's doorbell was one of
	// the two daemon wake-ups per attached message (a ping-pong posts its receive and
	// then its send). Not with --spin: a spinning pump reads the socket itself
	// (Progress), before the loop could take another session's receives.
	lazyRecv bool
	sqSlot   int
	maxSGE   int
	send     [batch]driver.SendWR
	sendSGL  [batch][]driver.SGE
	binds    [batch]driver.MWBindWR
	pending  int
	scratch  []byte
	broken   bool
}

type srqObj struct {
	h     uint32
	pd    *pdObj
	cq    *cqObj // an XRC SRQ's, where its receives complete
	srq   driver.SRQ
	reg   *shm.Region
	rq    *recvQueue
	users int
}

func (s *session) createQP(r *attach.Reader, w *attach.Writer) ([]*os.File, error) {
	ph, typ, sigAll, block := r.U32(), driver.QPType(r.U8()), r.U8() != 0, r.U8() != 0
	r.U8()
	sh, rh, qh := r.U32(), r.U32(), r.U32()
	c := r.Cap()
	if r.Err != nil {
		return nil, r.Err
	}
	p, err := get[*pdObj](s, ph)
	if err != nil {
		return nil, err
	}
	scq, err := get[*cqObj](s, sh)
	if err != nil {
		return nil, err
	}
	var srq *srqObj
	init := driver.QPInit{Type: typ, SendCQ: scq.cq, Cap: c, SigAll: sigAll, BlockSelfMcastLoopback: block}
	var rcq *cqObj
	switch {
	case typ == driver.QPTypeXRCSend && (rh != 0 || qh != 0):
		// An XRC initiator has no receive side (libibverbs ignores recv_cq and srq; a
		// client sends 0).
		return nil, driver.NewError(driver.ErrInvalidAttr, "an XRC_SEND QP has no receive CQ or SRQ")
	case typ == driver.QPTypeXRCRecv:
		return nil, driver.NewError(driver.ErrInvalidAttr, "an XRC_RECV QP is made from an XRC domain (CREATE_XRC_RECV_QP)")
	case typ != driver.QPTypeXRCSend:
		if rcq, err = get[*cqObj](s, rh); err != nil {
			return nil, err
		}
		init.RecvCQ = rcq.cq
	}
	if qh != 0 {
		if srq, err = get[*srqObj](s, qh); err != nil {
			return nil, err
		}
		init.SRQ = srq.srq
	}
	if c.MaxSendSGE > attach.MaxSGE || c.MaxRecvSGE > attach.MaxSGE {
		return nil, errUnsupportedSGE
	}
	qp, err := p.pd.CreateQP(&init)
	if err != nil {
		return nil, err
	}
	c = qp.Query().Cap
	l := attach.QPRegion(c, srq != nil || rcq == nil)
	reg, err := shm.Create("goverbs-qp", l.Size)
	if err != nil {
		qp.Close()
		return nil, err
	}
	mem := reg.Bytes()
	q := &qpObj{qp: qp, typ: typ, pd: p, scq: scq, rcq: rcq, srq: srq, reg: reg, sqSlot: l.SQSlot, maxSGE: int(max(c.MaxSendSGE, 1)),
		lazyRecv: srq == nil && typ == driver.QPTypeRC && s.d.driven && s.d.srv.cfg.Spin == 0,
		scratch:  make([]byte, l.SQSlot)}
	shm.InitSlotRing(mem, l.SQSlots, l.SQSlot)
	if q.sq, err = shm.NewSlotConsumer(mem, l.SQSlots, l.SQSlot); err == nil && l.RQSlots > 0 {
		q.rq, err = newRecvQueue(mem[l.RQOff:], l.RQSlots, l.RQSlot, int(c.MaxRecvSGE))
	}
	if err != nil {
		qp.Close()
		reg.Close()
		return nil, err
	}
	for i := range q.sendSGL {
		q.sendSGL[i] = make([]driver.SGE, q.maxSGE)
	}
	q.h = s.add(q)
	p.use++
	scq.users++
	if rcq != nil {
		rcq.users++
	}
	if srq != nil {
		srq.users++
	}
	s.qps = append(s.qps, q)
	if q.lazyRecv {
		s.lazy.Store(true)
	}
	s.d.own(qp, owner{s: s, h: q.h, kind: attach.EventQP})
	w.U32(q.h)
	w.U32(qp.QPN())
	w.PutCap(c)
	for _, v := range []int{l.SQSlots, l.SQSlot, l.RQOff, l.RQSlots, l.RQSlot, l.Size} {
		w.U32(uint32(v))
	}
	f, err := dupFile(reg.File())
	if err != nil {
		return nil, err
	}
	return []*os.File{f}, nil
}

// destroyQP destroys the engine's QP first (it stops sending and answering: its peer's
// retries run out), then drops the rings.
func (s *session) destroyQP(q *qpObj) error {
	if err := q.qp.Close(); err != nil {
		return err
	}
	s.d.disown(q.qp)
	if q.xrcd != nil { // an XRC target: no PD, CQs or rings
		return nil
	}
	s.qps = remove(s.qps, q)
	q.pd.use--
	q.scq.users--
	if q.rcq != nil {
		q.rcq.users--
	}
	if q.srq != nil {
		q.srq.users--
	}
	q.reg.Close()
	return nil
}

func (s *session) createSRQ(r *attach.Reader, w *attach.Writer) ([]*os.File, error) {
	p, err := get[*pdObj](s, r.U32())
	if err != nil {
		return nil, err
	}
	a := driver.SRQAttr{MaxWR: r.U32(), MaxSGE: r.U32(), SRQLimit: r.U32()}
	if r.Err != nil {
		return nil, r.Err
	}
	if a.MaxSGE > attach.MaxSGE {
		return nil, errUnsupportedSGE
	}
	srq, err := p.pd.CreateSRQ(a)
	if err != nil {
		return nil, err
	}
	return s.addSRQ(&srqObj{pd: p, srq: srq}, w)
}

// addSRQ gives the engine's SRQ q.srq its ring and a handle, and writes the reply's
// handle, capabilities and ring; the reply's descriptor is the ring's region.
func (s *session) addSRQ(q *srqObj, w *attach.Writer) ([]*os.File, error) {
	a := q.srq.Query()
	slots, slot := attach.RingSlots(max(a.MaxWR, 1)), attach.RecvSlot(a.MaxSGE)
	reg, err := shm.Create("goverbs-srq", shm.SlotRingSize(slots, slot))
	if err != nil {
		q.srq.Close()
		return nil, err
	}
	rq, err := newRecvQueue(reg.Bytes(), slots, slot, int(a.MaxSGE))
	if err != nil {
		q.srq.Close()
		reg.Close()
		return nil, err
	}
	q.reg, q.rq = reg, rq
	q.h = s.add(q)
	q.pd.use++
	if q.cq != nil {
		q.cq.users++
	}
	s.srqs = append(s.srqs, q)
	s.d.own(q.srq, owner{s: s, h: q.h, kind: attach.EventSRQ})
	w.U32(q.h)
	w.U32(a.MaxWR)
	w.U32(a.MaxSGE)
	w.U32(uint32(slots))
	w.U32(uint32(slot))
	f, err := dupFile(reg.File())
	if err != nil {
		return nil, err
	}
	return []*os.File{f}, nil
}

func (s *session) destroySRQ(q *srqObj) error {
	if err := q.srq.Close(); err != nil {
		return err
	}
	s.d.disown(q.srq)
	s.srqs = remove(s.srqs, q)
	q.pd.use--
	if q.cq != nil {
		q.cq.users--
	}
	q.reg.Close()
	return nil
}

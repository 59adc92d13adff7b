// The QP's lifecycle: creation, the state machine's transitions (Modify), query,
// flush, reset and destroy; its queues' slots are in workqueue.go.

package engine

import (
	"fmt"
	"net/netip"
	"sync"
	"sync/atomic"

	"github.com/goverbs/goverbs/verbs/driver"
	"github.com/goverbs/goverbs/wire"
)

var (
	ErrQPState        = driver.NewError(driver.ErrQPState, "QP state does not allow this")
	ErrQPClosed       = driver.NewError(driver.ErrClosed, "QP is closed")
	ErrSendQueueFull  = driver.NewError(driver.ErrQueueFull, "send queue is full")
	ErrRecvQueueFull  = driver.NewError(driver.ErrQueueFull, "receive queue is full")
	ErrTooManySGE     = driver.NewError(driver.ErrInvalidAttr, "too many scatter/gather elements")
	ErrInlineTooLarge = driver.NewError(driver.ErrInvalidAttr, "inline data larger than the QP's max_inline_data")
	ErrBadOpcode      = driver.NewError(driver.ErrInvalidAttr, "work request opcode not supported on this QP type")
	ErrMsgTooLarge    = driver.NewError(driver.ErrInvalidAttr, "message larger than the port's max_msg_sz")
	ErrQPCap          = driver.NewError(driver.ErrLimit, "QP capabilities exceed the device limits")
	ErrTooManyQPs     = driver.NewError(driver.ErrLimit, "too many queue pairs")
	ErrNoCQ           = driver.NewError(driver.ErrInvalidAttr, "QP needs a send and a receive completion queue")
	ErrUDTooLarge     = driver.NewError(driver.ErrInvalidAttr, "UD message larger than the path MTU")
	ErrNoAH           = driver.NewError(driver.ErrInvalidAttr, "UD work request needs an address handle")
	ErrBadBind        = driver.NewError(driver.ErrInvalidAttr, "binding names no memory window or region of this device")
)

// QPInit is what a QP is created with (struct ibv_qp_init_attr).
type QPInit struct {
	Type   driver.QPType
	SendCQ *CQ
	RecvCQ *CQ
	SRQ    *SRQ
	Cap    driver.QPCap
	SigAll bool
	// BlockSelfMcastLoopback keeps the QP's own multicast sends from its own receive
	// queue (IBV_QP_CREATE_BLOCK_SELF_MCAST_LB); other members still get them.
	BlockSelfMcastLoopback bool
	// XRCD is an XRC_RECV QP's domain open (it has no PD, CQs or queues).
	XRCD *XRCD
}

// xrcOpBase turns an RC opcode into its XRC one (Annex A14: 0xA0 + the RC code).
const xrcOpBase wire.Opcode = 0xa0

// QP is a queue pair.
type QP struct {
	dev    *Device
	pd     *PD
	qpn    uint32
	typ    driver.QPType
	sendCQ *CQ
	recvCQ *CQ
	srq    *SRQ
	sigAll bool
	cap    driver.QPCap
	// reliable: RC, XRC_SEND and XRC_RECV, which share RC's transport (ACKs, the window,
	// retries); opBase is added to every RC opcode sent (xrcOpBase for XRC, else 0).
	reliable bool
	opBase   wire.Opcode
	xrcd     *XRCD // XRC_RECV: the domain open it was created through

	mu     sync.Mutex
	state  driver.QPState
	closed bool
	attr   driver.QPAttr
	remote netip.AddrPort // RC/UC: the peer, from the AH

	// ICRC strictness (input.go checkICRC): goverbs-style packets seen in a row, and
	// whether the peer ever sent another kind.
	icrcRun     atomic.Uint32
	icrcForeign atomic.Bool
	// The ICRC's share for the last peer address a packet came from (rxFlowFrom):
	// owned by the device's receive path, which is serialized; not reset with the QP,
	// since it depends on the address alone.
	rxFlowFrom  netip.AddrPort
	rxFlow      wire.ICRCFlow
	commEst     bool   // EventCommEst raised
	lastPost    int64  // nanotime at which the last PostSend returned (doorbell batching)
	lastPolls   uint32 // the device's poll count at the last PostSend (doorbell batching: deferPost)
	streamPosts uint8  // posts in a row that came as a stream would, up to 2 (deferPost)
	txQueued    bool   // on the sender's or the doorbell's list to run the requester (doorbell batching)
	mtu         int    // path MTU in bytes
	// The multicast groups the QP is attached to (mcast.go): changed under the
	// device's group table lock and this QP's, read on delivery under this QP's.
	mcast          []*mcastGroup
	blockSelfMcast bool

	sq     sendQueue
	rq     recvQueue
	srqWQE recvWQE // the SRQ WQE the responder holds (copied out of the SRQ)
	req    requester
	resp   responder
	comp   completer
	acks   ackState
	cc     *qpCC // DCQCN's per-QP state; nil when the device runs without (congestion.go)
	sr     *qpSR // selective repeat (RC); nil when the device runs go-back-N (selective.go)

	Stats driver.QPCounters
}

// CreateQP creates a queue pair in the RESET state (driver.PD). Its CQs and SRQ must be
// this engine's.
func (pd *PD) CreateQP(init *driver.QPInit) (driver.QP, error) {
	send, ok1 := init.SendCQ.(*CQ)
	recv, ok2 := init.RecvCQ.(*CQ)
	if !ok1 || !ok2 && !(init.RecvCQ == nil && init.Type == driver.QPTypeXRCSend) {
		return nil, driver.ErrWrongDevice
	}
	e := QPInit{Type: init.Type, SendCQ: send, RecvCQ: recv, Cap: init.Cap, SigAll: init.SigAll,
		BlockSelfMcastLoopback: init.BlockSelfMcastLoopback}
	if init.SRQ != nil {
		srq, ok := init.SRQ.(*SRQ)
		if !ok {
			return nil, driver.ErrWrongDevice
		}
		e.SRQ = srq
	}
	qp, err := pd.dev.CreateQP(pd, e)
	if err != nil {
		return nil, err
	}
	return qp, nil
}

// CreateQP creates a queue pair in the RESET state on pd.
func (d *Device) CreateQP(pd *PD, init QPInit) (*QP, error) {
	if d.closed.Load() {
		return nil, ErrDeviceClosed
	}
	switch init.Type {
	case driver.QPTypeRC, driver.QPTypeUC, driver.QPTypeUD:
		if init.SendCQ == nil || init.RecvCQ == nil {
			return nil, ErrNoCQ
		}
	case driver.QPTypeXRCSend:
		// An initiator has no receive queue (Annex A14): its only receive work is the
		// completer's.
		if init.SendCQ == nil || init.SRQ != nil {
			return nil, ErrNoCQ
		}
		init.RecvCQ = nil
		init.Cap.MaxRecvWR, init.Cap.MaxRecvSGE = 0, 0
	case driver.QPTypeXRCRecv:
		// A target has no queues at all: a send queue of one unused slot keeps the
		// code that walks it simple.
		if init.XRCD == nil || pd != nil {
			return nil, ErrBadOpcode
		}
		init.SendCQ, init.RecvCQ, init.SRQ = nil, nil, nil
		init.Cap = driver.QPCap{}
	default:
		return nil, fmt.Errorf("%w (QP type %d)", ErrBadOpcode, init.Type)
	}
	if pd != nil && pd.closed.Load() {
		return nil, ErrPDClosed
	}
	c := init.Cap
	if c.MaxSendWR > MaxQPWR || c.MaxRecvWR > MaxQPWR || c.MaxSendSGE > MaxSGE ||
		c.MaxRecvSGE > MaxSGE || c.MaxInline > MaxInline {
		return nil, ErrQPCap
	}
	if c.MaxSendWR == 0 {
		c.MaxSendWR = 1
	}
	if c.MaxRecvWR == 0 {
		c.MaxRecvWR = 1
	}
	if c.MaxSendSGE == 0 {
		c.MaxSendSGE = 1
	}
	if c.MaxRecvSGE == 0 {
		c.MaxRecvSGE = 1
	}
	qp := &QP{
		dev: d, pd: pd, typ: init.Type, sendCQ: init.SendCQ, recvCQ: init.RecvCQ,
		srq: init.SRQ, sigAll: init.SigAll, cap: c, state: driver.QPStateReset,
		blockSelfMcast: init.BlockSelfMcastLoopback, xrcd: init.XRCD,
		reliable: init.Type == driver.QPTypeRC || init.Type.XRC(),
	}
	if init.Type.XRC() {
		qp.opBase = xrcOpBase
	}
	qp.sq.init(c.MaxSendWR)
	nsq := len(qp.sq.wqes)
	sges := make([]driver.SGE, nsq*int(c.MaxSendSGE))
	segs := make([][]byte, nsq*int(c.MaxSendSGE))
	regs := make([]*region, nsq*int(c.MaxSendSGE))
	var inl []byte
	if c.MaxInline > 0 {
		inl = make([]byte, nsq*int(c.MaxInline))
	}
	for i := range qp.sq.wqes {
		w := &qp.sq.wqes[i]
		k, n := i*int(c.MaxSendSGE), int(c.MaxSendSGE)
		w.sgeStore = sges[k : k : k+n]
		w.local.segs = segs[k : k : k+n]
		w.local.regs = regs[k : k : k+n]
		if inl != nil {
			k, n := i*int(c.MaxInline), int(c.MaxInline)
			w.inline = inl[k : k : k+n]
		}
	}
	switch {
	case init.XRCD != nil:
		// The XRC SRQs a target takes WQEs from vary by request: room for the most SGEs
		// any has, so that taking one never allocates.
		qp.cap = driver.QPCap{}
		qp.srqWQE.sgeStore = make([]driver.SGE, 0, MaxSGE)
		qp.srqWQE.local.segs = make([][]byte, 0, MaxSGE)
		qp.srqWQE.local.regs = make([]*region, 0, MaxSGE)
	case init.Type == driver.QPTypeXRCSend:
		qp.cap.MaxRecvWR, qp.cap.MaxRecvSGE = 0, 0
	case init.SRQ == nil:
		qp.rq.init(c.MaxRecvWR)
		nrq := len(qp.rq.wqes)
		rsges := make([]driver.SGE, nrq*int(c.MaxRecvSGE))
		rsegs := make([][]byte, nrq*int(c.MaxRecvSGE))
		rregs := make([]*region, nrq*int(c.MaxRecvSGE))
		for i := range qp.rq.wqes {
			k, n := i*int(c.MaxRecvSGE), int(c.MaxRecvSGE)
			qp.rq.wqes[i].sgeStore = rsges[k : k : k+n]
			qp.rq.wqes[i].local.segs = rsegs[k : k : k+n]
			qp.rq.wqes[i].local.regs = rregs[k : k : k+n]
		}
	default:
		qp.cap.MaxRecvWR, qp.cap.MaxRecvSGE = 0, 0
		qp.srqWQE.sgeStore = make([]driver.SGE, 0, init.SRQ.maxSGE)
		qp.srqWQE.local.segs = make([][]byte, 0, init.SRQ.maxSGE)
		qp.srqWQE.local.regs = make([]*region, 0, init.SRQ.maxSGE)
	}
	qp.comp.init(qp)
	if init.Type != driver.QPTypeUD {
		qp.cc = d.newQPCC()
	}
	if init.Type == driver.QPTypeRC && d.selectiveRepeat {
		qp.sr = &qpSR{}
	}

	d.qpMu.Lock()
	if len(d.qps) >= MaxQP || uint32(len(d.qps)) > d.qpnLast-d.qpnFirst {
		d.qpMu.Unlock()
		return nil, ErrTooManyQPs
	}
	for {
		n := d.nextQPN
		d.nextQPN++
		if d.nextQPN > d.qpnLast {
			d.nextQPN = d.qpnFirst
		}
		if _, used := d.qps[n]; !used {
			qp.qpn = n
			break
		}
	}
	d.qps[qp.qpn] = qp
	d.qpMu.Unlock()

	if pd != nil {
		pd.refs.Add(1)
	}
	if init.SendCQ != nil {
		init.SendCQ.ref(1)
	}
	if init.RecvCQ != nil && init.RecvCQ != init.SendCQ {
		init.RecvCQ.ref(1)
	}
	if init.SRQ != nil {
		init.SRQ.ref(1)
	}
	return qp, nil
}

// QPN returns the queue pair number.
func (qp *QP) QPN() uint32 { return qp.qpn }

// Type returns the QP's transport type.
func (qp *QP) Type() driver.QPType { return qp.typ }

// State returns the QP's current state.
func (qp *QP) State() driver.QPState {
	qp.mu.Lock()
	defer qp.mu.Unlock()
	return qp.state
}

// Query returns the QP's attributes as last set, with its current state and capabilities.
func (qp *QP) Query() driver.QPAttr {
	qp.mu.Lock()
	defer qp.mu.Unlock()
	a := qp.attr
	a.State, a.CurState = qp.state, qp.state
	a.Cap = qp.cap
	return a
}

// Modify applies attr as selected by mask. The caller (the verbs layer) has checked the
// transition and the required and optional attributes against IBTA table 91 (11.2.4.2).
func (qp *QP) Modify(attr *driver.QPAttr, mask driver.QPAttrMask) error {
	qp.mu.Lock()
	defer qp.mu.Unlock()
	if qp.closed {
		return ErrQPClosed
	}
	if mask&driver.QPAttrAccessFlags != 0 {
		qp.attr.AccessFlags = attr.AccessFlags
	}
	if mask&driver.QPAttrPKeyIndex != 0 {
		qp.attr.PKeyIndex = attr.PKeyIndex
	}
	if mask&driver.QPAttrPort != 0 {
		qp.attr.Port = attr.Port
	}
	if mask&driver.QPAttrQKey != 0 {
		qp.attr.QKey = attr.QKey
	}
	if mask&driver.QPAttrAV != 0 {
		qp.attr.AH = attr.AH
		a := GIDToAddr(attr.AH.DGID)
		qp.attr.AH.DGID = AddrToGID(a)
		qp.remote = netip.AddrPortFrom(a, qp.dev.peerPort)
		qp.dev.resolve(qp.remote)
	}
	if mask&driver.QPAttrPathMTU != 0 {
		qp.attr.PathMTU = attr.PathMTU
		m := attr.PathMTU
		if m > qp.dev.mtu {
			m = qp.dev.mtu // a path never exceeds the port's active MTU
		}
		qp.mtu = m.Bytes()
	}
	if mask&driver.QPAttrDestQPN != 0 {
		qp.attr.DestQPN = attr.DestQPN & wire.PSNMask
	}
	if mask&driver.QPAttrRQPSN != 0 {
		qp.attr.RQPSN = attr.RQPSN & wire.PSNMask
		qp.resp.psn = wire.PSN(qp.attr.RQPSN)
	}
	if mask&driver.QPAttrMinRNRTimer != 0 {
		qp.attr.MinRNRTimer = attr.MinRNRTimer & 31
	}
	if mask&driver.QPAttrMaxDestRdAtomic != 0 {
		qp.attr.MaxDestRdAtomic = attr.MaxDestRdAtomic
		n := int(attr.MaxDestRdAtomic)
		if n < 1 {
			n = 1
		}
		qp.resp.res = make([]rdAtomicRes, n)
	}
	if mask&driver.QPAttrSQPSN != 0 {
		qp.attr.SQPSN = attr.SQPSN & wire.PSNMask
		qp.req.psn = wire.PSN(qp.attr.SQPSN)
		qp.req.high = qp.req.psn
		qp.comp.psn = qp.req.psn
	}
	if mask&driver.QPAttrTimeout != 0 {
		qp.attr.Timeout = attr.Timeout & 31
	}
	if mask&driver.QPAttrRetryCnt != 0 {
		qp.attr.RetryCnt = attr.RetryCnt & 7
		qp.comp.retryLeft = qp.attr.RetryCnt
	}
	if mask&driver.QPAttrRNRRetry != 0 {
		qp.attr.RNRRetry = attr.RNRRetry & 7
		qp.comp.rnrRetryLeft = qp.attr.RNRRetry
	}
	if mask&driver.QPAttrMaxQPRdAtomic != 0 {
		qp.attr.MaxRdAtomic = attr.MaxRdAtomic
	}
	if mask&driver.QPAttrState != 0 {
		qp.setState(attr.State)
	}
	return nil
}

// addr is the IP address the AH sends to: Addr, or the address its GID stands for.
// setState moves the QP; qp.mu is held.
func (qp *QP) setState(s driver.QPState) {
	prev := qp.state
	qp.state = s
	if qp.dev.debug {
		qp.dev.log.Debug("qp state", "dev", qp.dev.name, "qp", qp.qpn, "from", prev, "to", s)
	}
	if s == driver.QPStateErr && prev != driver.QPStateErr {
		qp.lastWQEReached()
	}
	switch s {
	case driver.QPStateReset:
		qp.sendOwedAck() // for a request executed before the reset (see sendOwedAck)
		qp.reset()
	case driver.QPStateRTR:
		if qp.mtu == 0 {
			qp.mtu = qp.dev.mtu.Bytes()
		}
		if qp.resp.res == nil {
			qp.resp.res = make([]rdAtomicRes, 1)
		}
	case driver.QPStateRTS:
		if qp.typ == driver.QPTypeUD && qp.mtu == 0 {
			qp.mtu = qp.dev.mtu.Bytes()
		}
		if prev == driver.QPStateSQD || prev == driver.QPStateSQE {
			qp.runRequester()
		}
	case driver.QPStateErr:
		if prev != driver.QPStateErr {
			// rdma_cm moves the QP to ERR and then sends the DREQ: an ACK still owed for
			// the last request (a poller's deferral) must leave before it, or the peer's
			// QP is in ERR when it comes and the request's completion is flushed.
			qp.sendOwedAck()
			qp.flush()
		}
	}
}

// reset returns the QP to its just-created condition, discarding all work without
// completions (IBTA 10.3.1: the transition to Reset removes every WQE).
func (qp *QP) reset() {
	qp.comp.stopTimers()
	qp.sq.head, qp.sq.req, qp.sq.tail = 0, 0, 0
	qp.rq.head, qp.rq.tail = 0, 0
	qp.req = requester{}
	qp.resp.dropPin() // none is held outside a receive run; never lose one
	qp.resp = responder{}
	qp.acks = ackState{}
	qp.comp.reset()
	if qp.sr != nil {
		qp.dropKept()
		qp.sr.sw = nil          // made again at the first send, from the new send PSN
		qp.sr.peerSACKs = false // the next connection's responder may not SACK
	}
	if qp.cc != nil {
		qp.cc = qp.dev.newQPCC() // a new connection starts at line rate (its timer was stopped above)
	}
	qp.attr = driver.QPAttr{}
	qp.mtu = 0
	qp.remote = netip.AddrPort{}
	qp.icrcRun.Store(0)
	qp.icrcForeign.Store(false)
	qp.commEst = false
}

// toError moves the QP to the error state on a transport or local error and raises ev.
func (qp *QP) toError(ev driver.EventType) {
	if qp.state == driver.QPStateErr {
		return
	}
	if qp.dev.debug {
		qp.dev.log.Debug("qp error", "dev", qp.dev.name, "qp", qp.qpn, "from", qp.state, "event", ev)
	}
	qp.state = driver.QPStateErr
	qp.flush()
	if ev != 0xff {
		qp.dev.raise(driver.AsyncEvent{Type: ev, QP: qp})
	}
	qp.lastWQEReached()
}

// lastWQEReached tells the owner of a QP attached to an SRQ that the QP, now in the error
// state, will take no more WQEs from the SRQ (IBTA 11.6.3.4 and 10.3.1.2), so it may be
// destroyed without losing receives.
func (qp *QP) lastWQEReached() {
	if qp.srq != nil {
		qp.dev.raise(driver.AsyncEvent{Type: driver.EventQPLastWQEReached, QP: qp})
	}
}

const noEvent driver.EventType = 0xff

// flush completes every outstanding WQE (IBTA 10.3.1 Error state): those already finished
// keep their status, the rest complete with WR_FLUSH_ERR. qp.mu is held.
func (qp *QP) flush() {
	qp.comp.stopTimers()
	for qp.sq.head != qp.sq.tail {
		w := qp.sq.at(qp.sq.head)
		if w.state != wqeDone {
			w.status = driver.WCWRFlushErr
			w.state = wqeDone
		}
		qp.retireOne(w)
		qp.sq.head++
	}
	qp.sq.req = qp.sq.head
	for qp.rq.head != qp.rq.tail {
		r := qp.rq.at(qp.rq.head)
		wc := driver.WC{ID: r.id, Status: driver.WCWRFlushErr, Opcode: driver.WCRecv, QPN: qp.qpn}
		qp.recvCQ.push(&wc, false)
		qp.rq.head++
	}
	if qp.resp.recv != nil {
		qp.resp.recv = nil
	}
}

// Close destroys the QP. Outstanding work is dropped without completions, as with
// ibv_destroy_qp; packets that arrive for it afterwards are counted and dropped.
func (qp *QP) Close() error {
	qp.mu.Lock()
	if qp.closed {
		qp.mu.Unlock()
		return nil
	}
	qp.sendOwedAck() // for a request executed before the close (see sendOwedAck)
	if qp.typ == driver.QPTypeUD || qp.typ == driver.QPTypeUC {
		// A datagram posted before the close leaves, as on rxe, whose post runs the
		// requester: a stream's posts may wait for the sender goroutine or the next poll
		// (deferPost), and a program that posts unsignaled sends and destroys its QP
		// at once (mckey's sender) lost all but the first. RC's requests would go
		// unanswered: they are dropped, as the spec allows.
		qp.sendQueued()
	}
	qp.closed = true
	qp.state = driver.QPStateErr
	qp.comp.stopTimers()
	qp.mu.Unlock()
	qp.detachAll() // after closed is set: AttachMcast refuses from then on

	d := qp.dev
	d.qpMu.Lock()
	delete(d.qps, qp.qpn)
	d.qpGone.Add(1)
	d.qpMu.Unlock()
	if qp.pd != nil {
		qp.pd.refs.Add(-1)
	}
	if qp.sendCQ != nil {
		qp.sendCQ.ref(-1)
	}
	if qp.recvCQ != nil && qp.recvCQ != qp.sendCQ {
		qp.recvCQ.ref(-1)
	}
	if qp.xrcd != nil {
		qp.xrcd.release()
	}
	if qp.srq != nil {
		qp.srq.ref(-1)
	}
	return nil
}

// DebugString describes the QP's transport state, for logs and failing tests.
func (qp *QP) DebugString() string {
	qp.mu.Lock()
	defer qp.mu.Unlock()
	s := fmt.Sprintf("qp %#x state %d: sq head=%d req=%d tail=%d req.psn=%#x high=%#x comp.psn=%#x retry=%d rnr=%d rdAtom=%d resp.psn=%#x queue=%d",
		qp.qpn, qp.state, qp.sq.head, qp.sq.req, qp.sq.tail, uint32(qp.req.psn), uint32(qp.req.high), uint32(qp.comp.psn),
		qp.comp.retryLeft, qp.comp.rnrRetryLeft, qp.req.outstandingRdAtom, uint32(qp.resp.psn), len(qp.resp.out.items)-qp.resp.out.head)
	for i := qp.sq.head; i != qp.sq.tail; i++ {
		w := qp.sq.at(i)
		s += fmt.Sprintf("\n  wqe %d op=%d state=%d first=%#x npkts=%d next=%d got=%d status=%d", i, w.wr.Opcode, w.state, uint32(w.firstPSN), w.npkts, w.next, w.got, w.status)
	}
	return s
}

// The completer (IBTA 9.7.5.1, rxe_comp.c): consumes ACKs, NAKs and responses for the
// send queue, retires WQEs in order into the send CQ, and owns the local ACK timer, the
// retry counters and RNR back-off.

package engine

import (
	"encoding/binary"
	"time"

	"github.com/goverbs/goverbs/verbs/driver"
	"github.com/goverbs/goverbs/wire"
)

// completer consumes ACKs and responses for the send queue (IBTA 9.7.5.1, rxe_comp.c):
// it retires WQEs in order into the send CQ and owns the retransmission timer, the retry
// counters and RNR back-off.
type completer struct {
	qp           *QP
	psn          wire.PSN // oldest PSN not yet acknowledged
	retryLeft    uint8
	rnrRetryLeft uint8

	// A NAK, a timeout or an implied NAK rewinds the requester once; further signals for
	// that PSN or a later one before any progress are echoes of the same loss.
	rewound   bool
	rewoundAt wire.PSN

	rnrWait bool // requester held until the RNR timer fires

	// The local ACK timer (IBTA 9.7.6.1.3) runs while retransOn. It is never moved on
	// the hot path: progress only sets retransMoved. The runtime timer fires every half
	// period; a firing that finds the mark clears it and its count, and the second firing
	// in a row without progress times out. A timeout therefore comes one to one and a
	// half periods after the last progress; the period is a minimum (ibv_modify_qp: "the
	// minimum timeout that a QP waits for ACK/NACK"), and a ping-pong posts and
	// acknowledges a message per round trip without reading the clock.
	retransOn    bool
	retransMoved bool
	retransIdle  int // half periods in a row without progress

	// The timers and what says whether they are scheduled are qp.mu's too: every
	// access holds it, the timers' own callbacks included (they take it first), so a
	// mutex of their own would only cost each send two more locked instructions.
	retrans      *time.Timer
	retransArmed bool      // retrans is scheduled and has not run yet
	retransDue   time.Time // when it is scheduled for: a firing before that is stale
	rnr          *time.Timer
}

func (c *completer) init(qp *QP) { c.qp = qp }

// reset clears the transport state field by field: the timers, their mutex and the QP
// link stay, because a timer callback may be reading them right now (it then finds
// nothing to do under qp.mu).
func (c *completer) reset() {
	c.psn, c.retryLeft, c.rnrRetryLeft = 0, 0, 0
	c.rewound, c.rewoundAt = false, 0
	c.rnrWait = false
	c.retransOn, c.retransMoved, c.retransIdle = false, false, 0
}

// armRetransmit starts the local ACK timer if it is not running. qp.mu is held.
func (c *completer) armRetransmit() {
	d := timeoutDuration(c.qp.attr.Timeout)
	if d == 0 || c.retransOn {
		return
	}
	c.startRetransmit(d)
}

// restartRetransmit restarts the timer after progress, or stops it when nothing is
// outstanding. qp.mu is held.
func (c *completer) restartRetransmit() {
	qp := c.qp
	d := timeoutDuration(qp.attr.Timeout)
	if d == 0 {
		return
	}
	if qp.sq.head == qp.sq.req && (qp.sq.req == qp.sq.tail || qp.sq.at(qp.sq.req).state == wqePosted) {
		c.retransOn = false // a pending firing finds nothing to do
		return
	}
	c.startRetransmit(d)
}

// startRetransmit (re)starts the timeout period now. The runtime timer is touched only
// when it is not already scheduled: a scheduled firing sees retransMoved. qp.mu is held.
func (c *completer) startRetransmit(d time.Duration) {
	c.retransOn, c.retransMoved = true, true
	if !c.retransArmed {
		c.scheduleRetransmit(d / 2)
		c.retransMoved, c.retransIdle = false, 0
	}
}

// scheduleRetransmit sets the runtime timer to fire after half; qp.mu is held.
func (c *completer) scheduleRetransmit(half time.Duration) {
	c.retransDue = time.Now().Add(half)
	if c.retrans == nil {
		c.retrans = time.AfterFunc(half, c.onRetransmitTimer)
	} else {
		c.retrans.Reset(half)
	}
	c.retransArmed = true
}

// stopTimers stops both timers; qp.mu is held.
func (c *completer) stopTimers() {
	c.retransOn, c.retransMoved, c.retransIdle = false, false, 0
	c.rnrWait = false
	if c.retrans != nil {
		c.retrans.Stop()
		c.retransArmed = false
	}
	if c.rnr != nil {
		c.rnr.Stop()
	}
	c.qp.stopPace()
	c.qp.stopProbe()
}

// onRetransmitTimer runs when the local ACK timeout may have expired (IBTA 9.7.6.1.3).
func (c *completer) onRetransmitTimer() {
	qp := c.qp
	qp.mu.Lock()
	defer qp.mu.Unlock()
	if c.retransArmed && time.Now().Before(c.retransDue) {
		// A firing that was already running when the timer was stopped and scheduled
		// again: the newer one is still to come.
		return
	}
	c.retransArmed = false
	if qp.closed || qp.state != driver.QPStateRTS && qp.state != driver.QPStateSQD || !c.retransOn {
		return
	}
	if c.retransMoved {
		c.retransMoved, c.retransIdle = false, 0 // progress in the last half period
	} else {
		c.retransIdle++
	}
	if c.retransIdle < 2 {
		c.scheduleRetransmit(timeoutDuration(qp.attr.Timeout) / 2)
		return
	}
	c.retransOn, c.retransIdle = false, 0
	if qp.sq.head == qp.sq.req && qp.sq.req == qp.sq.tail {
		return
	}
	qp.Stats.RetryTimeouts++
	qp.dev.counters.RetryTimeouts.Add(1)
	if !c.spendRetry("timeout") {
		return
	}
	if !qp.srTimeout() { // selective.go: resend only what the responder has not kept
		c.rewound, c.rewoundAt = true, c.psn
		qp.rewind(c.psn)
	}
	qp.runRequester()
	c.armRetransmit()
}

// spendRetry takes one from retry_cnt, or fails the oldest WQE with RETRY_EXC_ERR when none
// are left (IBTA 9.7.6.1.3). It reports whether the requester may retry.
func (c *completer) spendRetry(why string) bool {
	if qp := c.qp; qp.dev.debug {
		qp.dev.log.Debug("retry", "qp", qp.qpn, "why", why, "comp.psn", uint32(c.psn), "left", c.retryLeft)
	}
	if c.retryLeft == 0 {
		c.failHead(driver.WCRetryExcErr, 0)
		return false
	}
	c.retryLeft--
	return true
}

// progress records that the responder acknowledged something new.
func (c *completer) progress(psn wire.PSN) {
	if psn.After(c.psn) {
		c.psn = psn
		if sr := c.qp.sr; sr != nil && sr.sw != nil {
			sr.sw.ACK(psn.Sub(1))
		}
	}
	c.retryLeft = c.qp.attr.RetryCnt
	c.rnrRetryLeft = c.qp.attr.RNRRetry
	c.rewound = false
}

// failHead completes the oldest outstanding WQE with st and moves the QP to the error
// state, flushing everything after it.
func (c *completer) failHead(st driver.WCStatus, vendor uint32) {
	qp := c.qp
	for i := qp.sq.head; i != qp.sq.tail; i++ {
		w := qp.sq.at(i)
		if w.state != wqeDone {
			w.state, w.status, w.vendor = wqeDone, st, vendor
			break
		}
	}
	qp.toError(noEvent)
}

// oldest returns the oldest WQE that is not finished and has been (at least partly) sent.
func (qp *QP) oldest() *sendWQE {
	for i := qp.sq.head; i != qp.sq.tail; i++ {
		w := qp.sq.at(i)
		switch w.state {
		case wqeDone:
			continue
		case wqePosted:
			return nil
		}
		return w
	}
	return nil
}

// complete handles an ACK, NAK, READ response or atomic ACK for this QP. qp.mu is held.
func (qp *QP) complete(p *wire.Packet) {
	c := &qp.comp
	psn := p.BTH.PSN()
	if !psn.Before(qp.req.high) {
		qp.dev.counters.GhostResponse.Add(1)
		return // acknowledges something never sent
	}
	info := p.Op
	var syn wire.Syndrome
	if p.AETH != nil {
		syn = p.AETH.Syndrome()
	}
	progressed, sack := false, false
	switch {
	case info.Flags.Has(wire.OpRead):
		progressed = qp.readResponse(p, psn)
	case info.Flags.Has(wire.HasAtomicAckETH):
		progressed = qp.atomicAck(p, psn)
	case syn.Type() == wire.AckTypeACK:
		progressed = qp.ackThrough(psn)
	case syn.Type() != wire.AckTypeACK && psn.Before(c.psn):
		// A NAK for a PSN already acknowledged is an echo (duplicated or overtaken in the
		// network): acting on it would resend acknowledged work and spend a retry.
		qp.dev.counters.DuplicateResponse.Add(1)
	case syn.Type() == wire.AckTypeRNRNAK:
		progressed = qp.ackThrough(psn.Sub(1))
		qp.Stats.RNRNakReceived++
		qp.dev.counters.RNRNakReceived.Add(1)
		qp.rnrNak(psn, syn)
	case syn.Type() == wire.AckTypeNAK:
		progressed = qp.ackThrough(psn.Sub(1))
		if sack = qp.sr != nil && qp.selectiveNak(p, psn); !sack {
			qp.nak(psn, syn)
		}
	default:
		qp.dev.counters.Malformed.Add(1)
	}
	qp.retire()
	if qp.state != driver.QPStateRTS && qp.state != driver.QPStateSQD {
		return
	}
	if progressed {
		c.restartRetransmit()
	}
	if sack && !progressed && !qp.srRunDue() {
		qp.srRunLater() // selective.go: the window has not opened by a burst yet
		return
	}
	qp.runRequester()
}

// ackThrough completes SEND and WRITE WQEs whose last PSN is at or before psn. A READ or
// atomic in that range without its response means the response was lost: the ACK is an
// implied NAK and the requester goes back to it (IBTA 9.7.5.1.3).
func (qp *QP) ackThrough(psn wire.PSN) bool {
	c := &qp.comp
	if psn.Before(c.psn) {
		return false
	}
	progressed := false
	for i := qp.sq.head; i != qp.sq.tail; i++ {
		w := qp.sq.at(i)
		if w.state == wqeDone {
			continue
		}
		if w.state == wqePosted || psn.Before(w.firstPSN) {
			break
		}
		if w.isReadOrAtomic() {
			qp.impliedNak(w)
			break
		}
		if w.lastPSN().After(psn) {
			c.progress(psn.Add(1)) // part of a multi-packet message
			progressed = true
			break
		}
		w.state = wqeDone
		c.progress(w.lastPSN().Add(1))
		progressed = true
	}
	return progressed
}

// impliedNak rewinds to the first response of w that has not arrived.
func (qp *QP) impliedNak(w *sendWQE) {
	c := &qp.comp
	at := w.firstPSN.Add(w.got)
	if c.rewound && !c.rewoundAt.After(at) {
		return // already going back to here or earlier
	}
	qp.dev.counters.ImpliedNak.Add(1)
	if !c.spendRetry("implied NAK") {
		return
	}
	c.rewound, c.rewoundAt = true, at
	qp.rewind(at)
}

func (qp *QP) readResponse(p *wire.Packet, psn wire.PSN) bool {
	c := &qp.comp

	if !qp.ackThrough(psn.Sub(1)) && psn.Before(c.psn) {
		qp.dev.counters.DuplicateResponse.Add(1)
		return false
	}
	w := qp.oldest()
	if w == nil || w.wr.Opcode != driver.WRRDMARead || psn.Before(w.firstPSN) || psn.After(w.lastPSN()) {
		qp.dev.counters.GhostResponse.Add(1)
		return false
	}
	want := w.firstPSN.Add(w.got)
	if psn != want {
		if psn.After(want) { // responses in between were lost
			qp.impliedNak(w)
		} else {
			qp.dev.counters.DuplicateResponse.Add(1)
		}
		return false
	}
	// IBTA 9.7.5.1.4: FIRST/MIDDLE responses carry exactly one path MTU, the LAST/ONLY
	// one the remainder. Anything else is a bad response. FIRST and MIDDLE are not told
	// apart: after a retried READ, the old stream's MIDDLE and the new stream's FIRST for
	// the same PSN carry the same bytes and either may arrive first.
	off := int(w.got) * qp.mtu
	rest := w.length - off
	n := len(p.Payload)
	fl := p.Op.Flags
	last := fl.Has(wire.Last) || fl.Has(wire.Only)
	if last && n != rest || !last && (n != qp.mtu || rest <= qp.mtu) {
		c.failHead(driver.WCBadRespErr, 0)
		return false
	}
	if !w.local.copyIn(p.Payload, off) {
		c.failHead(driver.WCLocProtErr, 0) // the landing buffer was deregistered meanwhile
		return false
	}
	w.got++
	c.progress(psn.Add(1))
	if last {
		w.state = wqeDone
		qp.req.outstandingRdAtom--
		c.progress(w.lastPSN().Add(1))
	}
	return true
}

func (qp *QP) atomicAck(p *wire.Packet, psn wire.PSN) bool {
	c := &qp.comp
	if !qp.ackThrough(psn.Sub(1)) && psn.Before(c.psn) {
		return false
	}
	w := qp.oldest()
	if w == nil || w.firstPSN != psn || (w.wr.Opcode != driver.WRAtomicCmpAndSwp && w.wr.Opcode != driver.WRAtomicFetchAdd) {
		qp.dev.counters.GhostResponse.Add(1)
		return false
	}
	// The original value lands in the local buffer in host byte order, as on an RNIC.
	var v [8]byte
	binary.NativeEndian.PutUint64(v[:], p.AtomicAckETH.OrigData())
	if !w.local.copyIn(v[:], 0) {
		c.failHead(driver.WCLocProtErr, 0)
		return false
	}
	w.state = wqeDone
	qp.req.outstandingRdAtom--
	c.progress(psn.Add(1))
	return true
}

// rnrNak backs off for the time the responder asked for, then resends from psn
// (IBTA 9.7.5.2.8). rnr_retry 7 means retry for ever.
func (qp *QP) rnrNak(psn wire.PSN, syn wire.Syndrome) {
	c := &qp.comp
	if qp.dev.debug {
		qp.dev.log.Debug("RNR NAK received", "dev", qp.dev.name, "qp", qp.qpn, "psn", uint32(psn),
			"wait", wire.RNRTimerDuration(syn.RNRTimer()), "rnr_retry_left", c.rnrRetryLeft)
	}
	if qp.oldest() == nil {
		return
	}
	if c.rnrRetryLeft == 0 {
		c.failHead(driver.WCRNRRetryExcErr, uint32(syn))
		return
	}
	if c.rnrRetryLeft != 7 {
		c.rnrRetryLeft--
	}
	qp.rewind(psn)
	c.rnrWait = true
	c.retransOn = false
	d := wire.RNRTimerDuration(syn.RNRTimer())
	if c.rnr == nil {
		c.rnr = time.AfterFunc(d, c.onRNRTimer)
	} else {
		c.rnr.Reset(d)
	}
}

func (c *completer) onRNRTimer() {
	qp := c.qp
	qp.mu.Lock()
	defer qp.mu.Unlock()
	if qp.closed || !c.rnrWait {
		return
	}
	c.rnrWait = false
	qp.runRequester()
}

// nak handles a NAK for psn (IBTA 9.7.5.2, table 44).
func (qp *QP) nak(psn wire.PSN, syn wire.Syndrome) {
	c := &qp.comp
	if qp.dev.debug {
		qp.dev.log.Debug("NAK received", "dev", qp.dev.name, "qp", qp.qpn, "psn", uint32(psn), "syndrome", syn)
	}
	code := syn.NAKCode()
	if code == wire.NAKPSNSeqError {
		qp.Stats.SeqNakReceived++
		qp.dev.counters.SeqNakReceived.Add(1)
		if qp.oldest() == nil || c.rewound && !c.rewoundAt.After(psn) {
			// Already going back to psn or earlier since the last progress (an implied
			// NAK for a READ before psn, say): this NAK reports the same loss.
			return
		}
		if !c.spendRetry("sequence NAK") {
			return
		}
		c.rewound, c.rewoundAt = true, psn
		qp.rewind(psn)
		return
	}
	st := driver.WCRemOpErr
	switch code {
	case wire.NAKInvalidRequest:
		st = driver.WCRemInvReqErr
	case wire.NAKRemoteAccessError:
		st = driver.WCRemAccessErr
	case wire.NAKRemoteOperationalError:
		st = driver.WCRemOpErr
	case wire.NAKInvalidRDRequest:
		st = driver.WCRemInvRdReqErr
	}
	if qp.oldest() == nil {
		return
	}
	c.failHead(st, uint32(syn))
}

// retire moves finished WQEs from the head of the send queue to the CQ, in order
// (IBTA 10.8.5: completions are returned in the order work was posted).
func (qp *QP) retire() {
	for qp.sq.head != qp.sq.tail {
		w := qp.sq.at(qp.sq.head)
		if w.state != wqeDone {
			return
		}
		qp.retireOne(w)
		qp.sq.head++
		if qp.sq.req < qp.sq.head {
			qp.sq.req = qp.sq.head
		}
	}
}

var wcOpcodeOf = [...]driver.WCOpcode{
	driver.WRRDMAWrite: driver.WCRDMAWrite, driver.WRRDMAWriteWithImm: driver.WCRDMAWrite, driver.WRSend: driver.WCSend,
	driver.WRSendWithImm: driver.WCSend, driver.WRRDMARead: driver.WCRDMARead, driver.WRAtomicCmpAndSwp: driver.WCCompSwap,
	driver.WRAtomicFetchAdd: driver.WCFetchAdd, driver.WRLocalInv: driver.WCLocalInv, driver.WRBindMW: driver.WCBindMW, driver.WRSendWithInv: driver.WCSend,
}

func (qp *QP) retireOne(w *sendWQE) {
	if w.status == driver.WCSuccess && !qp.sigAll && w.wr.Flags&driver.SendSignaled == 0 {
		return
	}
	wc := driver.WC{ID: w.wr.ID, Status: w.status, Opcode: wcOpcodeOf[w.wr.Opcode], QPN: qp.qpn, VendorErr: w.vendor}
	if w.status == driver.WCSuccess {
		switch w.wr.Opcode {
		case driver.WRRDMARead:
			wc.ByteLen = uint32(w.length)
		case driver.WRAtomicCmpAndSwp, driver.WRAtomicFetchAdd:
			wc.ByteLen = 8
		}
	}
	qp.sendCQ.push(&wc, false)
}

// timeoutDuration is the local ACK timeout: 4.096 µs × 2^timeout (IBTA 9.7.6.1.3);
// 0 means no timer.
func timeoutDuration(t uint8) time.Duration {
	if t == 0 {
		return 0
	}
	return time.Duration(4096<<t) * time.Nanosecond
}

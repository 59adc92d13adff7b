// The requester (IBTA 9.5, rxe_req.c): turns send WQEs into packets — opcodes by
// position, segmentation at the path MTU, PSN assignment, the window — and goes back
// N when the completer rewinds it.

package engine

import (
	"math/bits"
	"net/netip"

	"github.com/goverbs/goverbs/verbs/driver"
	"github.com/goverbs/goverbs/wire"
)

// requester is the send side of a QP: it turns WQEs into packets (IBTA 9.5, rxe_req.c).
type requester struct {
	psn               wire.PSN // next PSN to send
	high              wire.PSN // one past the highest PSN ever sent: below it is a retransmission
	outstandingRdAtom int      // READ/atomic requests sent and not yet answered
}

// Opcodes by position in a message (IBTA 9.4, table 36), for SEND and RDMA WRITE on RC and
// UC; 0 where a variant does not exist (RDMA WRITE has no invalidate, UC no invalidate).
type msgOpcodes struct {
	first, middle, last, lastImm, lastInv, only, onlyImm, onlyInv wire.Opcode
}

var (
	rcSend  = msgOpcodes{wire.RCSendFirst, wire.RCSendMiddle, wire.RCSendLast, wire.RCSendLastImm, wire.RCSendLastInv, wire.RCSendOnly, wire.RCSendOnlyImm, wire.RCSendOnlyInv}
	rcWrite = msgOpcodes{wire.RCWriteFirst, wire.RCWriteMiddle, wire.RCWriteLast, wire.RCWriteLastImm, 0, wire.RCWriteOnly, wire.RCWriteOnlyImm, 0}
	ucSend  = msgOpcodes{wire.UCSendFirst, wire.UCSendMiddle, wire.UCSendLast, wire.UCSendLastImm, 0, wire.UCSendOnly, wire.UCSendOnlyImm, 0}
	ucWrite = msgOpcodes{wire.UCWriteFirst, wire.UCWriteMiddle, wire.UCWriteLast, wire.UCWriteLastImm, 0, wire.UCWriteOnly, wire.UCWriteOnlyImm, 0}
)

// opcodeFor picks the opcode of packet k of n of w.
func (qp *QP) opcodeFor(w *sendWQE, k, n uint32) wire.Opcode {
	if qp.typ == driver.QPTypeUD {
		if w.wr.Opcode == driver.WRSendWithImm {
			return wire.UDSendOnlyImm
		}
		return wire.UDSendOnly
	}
	var t *msgOpcodes
	write := w.wr.Opcode == driver.WRRDMAWrite || w.wr.Opcode == driver.WRRDMAWriteWithImm
	switch {
	case qp.reliable && write:
		t = &rcWrite
	case qp.reliable:
		t = &rcSend
	case write:
		t = &ucWrite
	default:
		t = &ucSend
	}
	imm := w.wr.Opcode == driver.WRSendWithImm || w.wr.Opcode == driver.WRRDMAWriteWithImm
	inv := w.wr.Opcode == driver.WRSendWithInv
	switch {
	case n == 1 && imm:
		return t.onlyImm
	case n == 1 && inv:
		return t.onlyInv
	case n == 1:
		return t.only
	case k == 0:
		return t.first
	case k < n-1:
		return t.middle
	case imm:
		return t.lastImm
	case inv:
		return t.lastInv
	}
	return t.last
}

// window is how many PSNs the requester may have sent and not had acknowledged: rxe's
// 128 packets, counted at the largest MTU (512 KiB) so that a smaller path MTU keeps as
// many bytes in flight: 512 packets at 1024. A window of 128 packets whatever the MTU
// held a stream at 1 KiB packets to 128 KiB per round trip, and the stream was bound by
// the round trip, not by either side's work (write_bw 64 KiB at MTU 1024 on loopback:
// both processes about half busy). IBTA 9.7.5.1 leaves the window to the requester
// within half the PSN space.
func (qp *QP) window() int32 {
	if qp.mtu <= 0 {
		return MaxUnackedPSNs
	}
	// A path MTU is a power of two: a shift, where a division by qp.mtu was a 64-bit
	// DIV on every post's path.
	return int32(max(MaxUnackedPSNs, MaxUnackedPSNs*wire.MTU4096.Bytes()>>bits.TrailingZeros(uint(qp.mtu))))
}

// packetsFor is how many packets a message of n bytes takes at the path MTU: at least
// one (a zero-length message is one packet). A shift, as in window.
func (qp *QP) packetsFor(n int) uint32 {
	return uint32(max(1, (n+qp.mtu-1)>>bits.TrailingZeros(uint(qp.mtu))))
}

// runRequester sends what the send queue and the window allow. qp.mu is held.
func (qp *QP) runRequester() {
	if qp.state != driver.QPStateRTS || qp.comp.rnrWait {
		return
	}
	if qp.cc != nil && (qp.sq.req != qp.sq.tail || qp.resendQueued()) && !qp.paceStart() {
		return // paced (DCQCN): the pace timer resumes us
	}
	var tx *txBatch
	sentAny := false
	if qp.resendQueued() {
		tx = qp.dev.getTx()
		qp.resendSelective(tx)
		sentAny = true
	}
	for qp.sq.req != qp.sq.tail {
		w := qp.sq.at(qp.sq.req)
		if w.state == wqeDone { // acknowledged while waiting to be resent
			if next := w.lastPSN().Add(1); next.After(qp.req.psn) {
				qp.req.psn = next // what is resent next follows it
			}
			qp.sq.req++
			continue
		}
		if w.state == wqePosted {
			if !qp.startWQE(w) {
				break
			}
			if w.state == wqeDone { // local operation or local error
				qp.sq.req++
				if qp.state == driver.QPStateErr {
					break
				}
				continue
			}
		}
		if qp.reliable && (qp.sr == nil && qp.req.psn.Diff(qp.comp.psn) >= qp.window() || qp.sr != nil && qp.srFull(qp.window())) {
			break // window full: the completer kicks us when ACKs arrive
		}
		if tx == nil {
			tx = qp.dev.getTx()
		}
		if !qp.sendPackets(w, tx) {
			qp.localError(w, driver.WCLocProtErr) // its memory was deregistered meanwhile
			break
		}
		sentAny = true
		if w.state == wqeSending {
			break // stopped by the window or the pacer
		}
		qp.sq.req++
		if qp.cc != nil && qp.cc.budget <= 0 {
			break
		}
	}
	if qp.cc != nil {
		qp.paceEnd()
	}
	if tx != nil {
		if qp.acks.owed && qp.resp.out.empty() && (qp.dev.splitAcks || qp.dev.fromRings()) {
			// The requests go first, in a send of their own: the peer is waiting for
			// them, and on this Conn the send that carries them puts them on the wire
			// before it returns, so building the ACK's datagram into it would only
			// hold them back. The ACK follows at once. So too where the last read
			// came from the same-host rings (the peer owed this ACK most likely
			// reaches us through them): a ring write costs no system call, and the
			// requests are in the peer's ring before the ACK is built.
			qp.dev.flushTx(tx)
		}
		qp.ackAlong(tx) // after the requests: the peer is waiting for those
		qp.dev.putTx(tx)
	}
	// UC and UD work completes as soon as its packets are on the wire, and local
	// operations (bind, LOCAL_INV) when they execute, once everything before them has.
	qp.retire()
	if sentAny && qp.reliable {
		qp.comp.armRetransmit()
	}
}

// startWQE assigns PSNs to a WQE the first time the requester reaches it and resolves its
// local memory. It returns false when the WQE must wait (fence, rd_atomic limit).
func (qp *QP) startWQE(w *sendWQE) bool {
	if w.wr.Flags&driver.SendFence != 0 && qp.req.outstandingRdAtom > 0 {
		return false // IBTA 10.8.3.3: wait until earlier READs and atomics complete
	}
	if w.isReadOrAtomic() {
		max := int(qp.attr.MaxRdAtomic)
		if max < 1 {
			max = 1
		}
		if qp.req.outstandingRdAtom >= max {
			return false
		}
	}
	switch w.wr.Opcode {
	case driver.WRLocalInv:
		if !qp.dev.invalidate(qp.pd, w.wr.Imm) {
			qp.localError(w, driver.WCLocProtErr)
			return true
		}
		w.state = wqeDone
		return true
	case driver.WRBindMW:
		// Binds execute in send-queue order as local operations (IBTA 10.6.7.2.2).
		if !w.bind.MW.bind(qp.pd, &w.bind) {
			qp.localError(w, driver.WCMWBindErr)
			return true
		}
		w.state = wqeDone
		return true
	}
	if w.wr.Flags&driver.SendInline == 0 {
		write := w.isReadOrAtomic() // READ and atomics write into local memory
		if !qp.dev.resolveSGL(qp.pd, w.wr.SGL, write, &w.local) {
			qp.localError(w, driver.WCLocProtErr)
			return true
		}
	}
	if (w.wr.Opcode == driver.WRAtomicCmpAndSwp || w.wr.Opcode == driver.WRAtomicFetchAdd) && w.length != 8 {
		qp.localError(w, driver.WCLocLenErr)
		return true
	}
	switch {
	case w.wr.Opcode == driver.WRAtomicCmpAndSwp || w.wr.Opcode == driver.WRAtomicFetchAdd:
		w.npkts = 1
	case qp.typ == driver.QPTypeUD:
		w.npkts = 1
	default:
		w.npkts = qp.packetsFor(w.length)
	}
	// A new message takes the PSNs after everything sent so far (req.high), not
	// req.psn: after a rewind, an ACK can acknowledge what was about to be resent, and
	// req.psn then still points into PSNs the responder has already executed. A message
	// given those would be taken for a duplicate there: acknowledged, never delivered.
	// Every earlier message has been sent in full at least once (the requester starts a
	// message only after the previous one), so req.high is where this one begins.
	w.firstPSN = qp.req.high
	qp.req.psn = qp.req.high
	w.next, w.got = 0, 0
	w.state = wqeSending
	return true
}

// localError completes w with a local error and moves the QP to the error state
// (IBTA 10.8.3.1: local work queue errors are fatal to the QP).
func (qp *QP) localError(w *sendWQE, st driver.WCStatus) {
	w.status = st
	w.state = wqeDone
	qp.sq.req++
	qp.toError(driver.EventQPReqErr)
	qp.sq.req = qp.sq.head
}

// sendPackets sends w's remaining packets as the window allows. It reports false when
// w's memory is no longer registered.
func (qp *QP) sendPackets(w *sendWQE, tx *txBatch) bool {
	if w.wr.Opcode == driver.WRRDMARead || w.wr.Opcode == driver.WRAtomicCmpAndSwp || w.wr.Opcode == driver.WRAtomicFetchAdd {
		qp.sendReadAtomic(w, tx)
		return true
	}
	dst := qp.remote
	if qp.typ == driver.QPTypeUD {
		dst = w.udDst
	}
	win := qp.window() // once, not a division per packet
	// The payload's regions are pinned once for the packets copied here (emit's copy
	// relies on it), not per packet: an atomic right after a packet's copy waits for
	// the copy's stores to drain, a visible share of a small-MTU WRITE stream's sending
	// thread. Deregistration waits for this call, as it waited for a packet.
	if w.wr.Flags&driver.SendInline == 0 {
		if !w.local.acquire() {
			return false
		}
		defer w.local.release()
	}
	for w.next < w.npkts {
		if qp.reliable && (qp.sr == nil && qp.req.psn.Diff(qp.comp.psn) >= win || qp.sr != nil && qp.srFull(win)) {
			return true
		}
		if qp.cc != nil && qp.cc.budget <= 0 {
			return true // the batch's paced budget is spent (congestion.go)
		}
		k := w.next
		if !qp.emitPacket(w, k, tx, dst, false) {
			return false
		}
		psn := w.firstPSN.Add(k)
		qp.sentPSN(psn, psn.Add(1))
		w.next++
	}
	w.state = wqeSent
	if !qp.reliable {
		w.state = wqeDone
	}
	return true
}

// emitPacket adds packet k of w (a SEND or WRITE) to tx for dst: its opcode, headers and
// payload. resend marks a selective retransmission (selective.go), which always asks for
// an ACK and leaves the AckReq count alone. It reports false when w's memory is no longer
// registered. The caller has pinned w's regions (sendPackets).
func (qp *QP) emitPacket(w *sendWQE, k uint32, tx *txBatch, dst netip.AddrPort, resend bool) bool {
	op := qp.opcodeFor(w, k, w.npkts) | qp.opBase
	info := op.Info()
	off := int(k) * qp.mtu
	n := w.length - off
	if n > qp.mtu {
		n = qp.mtu
	}
	if n < 0 {
		n = 0
	}
	psn := w.firstPSN.Add(k)
	// Field by field into a zeroed h, not a composite literal: the compiler builds a
	// literal in a temporary and copies it with 16-byte loads that straddle the fields'
	// narrow stores just made, a store-forwarding stall (about 20 ns a packet, the
	// hottest instruction of the requester in an 8 B WRITE stream's profile).
	var h wire.Headers
	h.BTH.Opcode, h.BTH.PKey, h.BTH.DestQP, h.BTH.PSN = op, 0xffff, qp.attr.DestQPN, psn
	h.XRCSRQN = w.wr.RemoteSRQN
	last := k == w.npkts-1
	if last && w.wr.Flags&driver.SendSolicited != 0 {
		h.BTH.SE = true
	}
	if qp.reliable {
		if resend {
			h.BTH.AckReq = true // a selective resend: the ACK shows the gap is filled
		} else {
			h.BTH.AckReq = qp.askAck(w, last)
		}
		if qp.cc != nil && !h.BTH.AckReq && qp.pacedAckReq(wireLen(h.Len(), n)) {
			h.BTH.AckReq = true
		}
	}
	if info.Flags.Has(wire.HasRETH) {
		h.RETH = wire.RETHFields{VA: w.wr.RemoteAddr, RKey: w.wr.RKey, DMALen: uint32(w.length)}
	}
	if info.Flags.Has(wire.HasImmDt) {
		h.ImmDt = w.wr.Imm
	}
	if info.Flags.Has(wire.HasIETH) {
		h.IETH = w.wr.Imm
	}
	if info.Flags.Has(wire.HasDETH) {
		h.BTH.DestQP = w.wr.RemoteQPN
		qkey := w.wr.RemoteQKey
		if qkey&0x80000000 != 0 {
			qkey = qp.attr.QKey // IBTA 10.2.5: a Q_Key with the high bit set means "use the QP's"
		}
		h.DETH = wire.DETHFields{QKey: qkey, SrcQP: qp.qpn}
	}
	pl := payload{sgl: &w.local, off: off, n: n}
	if w.wr.Flags&driver.SendInline != 0 {
		pl = bytesPayload(w.inline[off : off+n])
	}
	tc := qp.attr.AH.TrafficClass
	if qp.typ == driver.QPTypeUD {
		tc = w.udTC
	}
	if !qp.dev.emit(tx, dst, tc, &h, &pl, true) {
		return false
	}
	if qp.cc != nil {
		qp.cc.paceSent(wireLen(h.Len(), n))
	}
	return true
}

// sendReadAtomic sends a READ request (for the responses not yet received) or an atomic
// request. Either occupies its whole PSN range at once.
func (qp *QP) sendReadAtomic(w *sendWQE, tx *txBatch) {
	if qp.sr == nil && qp.req.psn.Diff(qp.comp.psn) >= qp.window() || qp.sr != nil && qp.srFull(qp.window()) || qp.cc != nil && qp.cc.budget <= 0 {
		return
	}
	psn := w.firstPSN.Add(w.next)
	h := wire.Headers{BTH: wire.BTHFields{PKey: 0xffff, DestQP: qp.attr.DestQPN, PSN: psn, AckReq: true},
		XRCSRQN: w.wr.RemoteSRQN}
	if w.wr.Opcode == driver.WRRDMARead {
		off := int(w.next) * qp.mtu
		h.BTH.Opcode = wire.RCReadRequest
		h.RETH = wire.RETHFields{VA: w.wr.RemoteAddr + uint64(off), RKey: w.wr.RKey, DMALen: uint32(w.length - off)}
	} else {
		h.BTH.Opcode = wire.RCCompareSwap
		if w.wr.Opcode == driver.WRAtomicFetchAdd {
			h.BTH.Opcode = wire.RCFetchAdd
		}
		h.AtomicETH = wire.AtomicETHFields{VA: w.wr.RemoteAddr, RKey: w.wr.RKey, SwapAdd: w.wr.CompareAdd, Compare: 0}
		if w.wr.Opcode == driver.WRAtomicCmpAndSwp {
			h.AtomicETH.SwapAdd = w.wr.Swap
			h.AtomicETH.Compare = w.wr.CompareAdd
		}
	}
	h.BTH.Opcode |= qp.opBase
	qp.dev.emit(tx, qp.remote, qp.attr.AH.TrafficClass, &h, &payload{}, true)
	if qp.cc != nil {
		qp.cc.paceSent(wireLen(h.Len(), 0))
	}
	qp.sentPSN(psn, w.lastPSN().Add(1))
	qp.restartAckCount()
	qp.req.outstandingRdAtom++
	w.state = wqeSent
}

// sentPSN accounts for a packet with PSN psn whose successor PSN is next.
func (qp *QP) sentPSN(psn, next wire.PSN) {
	qp.Stats.TxPackets++
	if psn.Before(qp.req.high) {
		qp.Stats.Retransmits++
		qp.dev.counters.Retransmits.Add(1)
	}
	qp.req.psn = next
	if next.After(qp.req.high) {
		qp.req.high = next
		if qp.sr != nil {
			qp.srSent(next)
		}
	}
}

// rewind makes the requester resend from psn: go-back-N (IBTA 9.7.5.1.3). Every WQE from
// the one holding psn onwards is sent again; earlier ones stay acknowledged. psn lies in
// [comp.psn, req.high]: callers get it from a NAK, a timeout or an implied NAK.
func (qp *QP) rewind(psn wire.PSN) {
	end := qp.sq.req
	if end != qp.sq.tail && qp.sq.at(end).state == wqeSending {
		end++ // the WQE the window stopped in the middle of
	}
	i := qp.sq.head
	for ; i != end; i++ {
		if w := qp.sq.at(i); w.state != wqeDone && !w.lastPSN().Before(psn) {
			break
		}
	}
	if i == end {
		return // nothing sent at or after psn is outstanding
	}
	rd := 0
	for j := qp.sq.head; j != i; j++ {
		if w := qp.sq.at(j); w.state != wqeDone && w.isReadOrAtomic() {
			rd++
		}
	}
	qp.req.outstandingRdAtom = rd
	for j := i; j != end; j++ {
		w := qp.sq.at(j)
		if w.state == wqeDone {
			continue
		}
		w.state = wqeSending
		w.next = 0
		if j == i && psn.After(w.firstPSN) {
			w.next = uint32(psn.Diff(w.firstPSN))
		}
		if w.wr.Opcode == driver.WRRDMARead && w.got > w.next {
			w.next = w.got // responses already placed stay placed; ask for the rest only
		}
	}
	qp.sq.req = i
	w := qp.sq.at(i)
	qp.req.psn = w.firstPSN.Add(w.next)
	qp.restartAckCount()
	if qp.sr != nil && qp.sr.sw != nil {
		qp.sr.sw.Restart(qp.comp.psn, qp.req.high) // everything from psn goes again
	}
}

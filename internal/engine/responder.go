// The RC responder (IBTA 9.7.4, rxe_resp.c): checks each inbound request in the spec's
// order, executes SEND, WRITE, READ and atomics against local memory, answers duplicates
// and reports errors as NAKs. How it acknowledges is ack.go's.

package engine

import (
	"sync/atomic"
	"unsafe"

	"github.com/goverbs/goverbs/verbs/driver"
	"github.com/goverbs/goverbs/wire"
)

// responder is the receive side of a QP (IBTA 9.7.4 and 9.8; rxe_resp.c). It checks each
// inbound request in the spec's order, executes it against local memory, and answers.
type responder struct {
	psn wire.PSN // expected PSN
	msn uint32   // messages completed (24 bits, carried in every AETH)

	// The message in progress (multi-packet SEND or WRITE).
	inMsg    msgKind
	recv     *recvWQE // receive WQE the SEND (or WRITE with immediate) lands in
	recvID   uint64
	recvOff  int
	write    []byte  // the RDMA WRITE target, checked on FIRST/ONLY
	writeReg *region // its region, pinned for each packet's copy (it may be invalidated mid-message)
	// pinned is a region whose pin recvWrite kept for the next packet of a GRO run
	// (Device.releaseRx, dropPin); nil when none is held.
	pinned   *region
	writeOff int
	writeLen int
	// placed: the WRITE packet being replayed was written already (selective.go's
	// placeEarly); its execution does all but the copy.
	placed bool

	res     []rdAtomicRes // saved READ and atomic requests, for duplicates (IBTA 9.7.5.1.5)
	resNext int

	out respQueue // READ responses, atomic ACKs, ACKs and NAKs, in PSN order

	// UC: the message being dropped after a lost packet, until the next FIRST/ONLY.
	ucDropping bool

	// XRC_RECV: the XRC SRQ the current request names (xrcTarget); its PD guards the
	// memory the request touches and its CQ takes the completions.
	xsrq *SRQ
}

type msgKind uint8

const (
	msgNone msgKind = iota
	msgSend
	msgWrite
)

// rdAtomicRes is a responder resource: what a READ or atomic request asked, kept so that a
// duplicate is answered again from memory (READ) or from the saved result (atomic: never
// executed twice).
type rdAtomicRes struct {
	valid    bool
	atomic   bool
	firstPSN wire.PSN
	lastPSN  wire.PSN
	orig     uint64
}

// respond handles an RC request packet. qp.mu is held.
func (qp *QP) respond(p *wire.Packet) {
	r := &qp.resp
	psn := p.BTH.PSN()
	switch d := psn.Diff(r.psn); {
	case d > 0:
		// Packets in between were lost: one PSN sequence NAK, then silence until the
		// expected PSN arrives (IBTA 9.7.5.1.2, C9-103).
		qp.dev.counters.OutOfSequence.Add(1)
		qp.sequenceNak(psn)
		return
	case d < 0:
		if qp.xrcd != nil && !qp.xrcTarget(p, psn, true) {
			return
		}
		qp.duplicate(p, psn)
		return
	}
	if qp.xrcd != nil && !qp.xrcTarget(p, psn, false) {
		return
	}
	qp.acks.seqNakSent = false
	fl := p.Op.Flags
	if !qp.requestValid(p) {
		qp.respError(wire.NAKInvalidRequest, driver.WCRemInvReqErr, psn, driver.EventQPReqErr)
		return
	}

	switch {
	case fl.Has(wire.OpSend):
		if !qp.recvSend(p, psn) {
			return
		}
	case fl.Has(wire.OpWrite):
		if !qp.recvWrite(p, psn) {
			return
		}
	case fl.Has(wire.OpRead):
		qp.recvRead(p, psn, false)
		return
	case fl.Has(wire.OpAtomic):
		qp.recvAtomic(p, psn)
		return
	}
	r.psn = psn.Add(1)
	if fl.Has(wire.Last) || fl.Has(wire.Only) {
		r.msn = (r.msn + 1) & wire.PSNMask
	}
	qp.ackIfAsked(p, psn)
}

// requestValid applies the checks of a request at the expected PSN that do not depend on
// memory keys: the opcode sequence (IBTA 9.7.4.1.4, C9-78: a MIDDLE or LAST continues the
// message in progress, anything else must not interrupt one), the QP's remote access
// rights (9.7.4.1.3) and the payload length (9.7.4.1.6, C9-82: FIRST and MIDDLE carry
// exactly one path MTU). RC answers a failure with an invalid-request NAK; UC drops the
// message.
func (qp *QP) requestValid(p *wire.Packet) bool {
	r := &qp.resp
	fl := p.Op.Flags
	cont := fl.Has(wire.Middle) || fl.Has(wire.Last)
	n := len(p.Payload)
	switch {
	case cont && fl.Has(wire.OpSend) && r.inMsg != msgSend,
		cont && fl.Has(wire.OpWrite) && r.inMsg != msgWrite,
		!cont && r.inMsg != msgNone,
		fl.Has(wire.OpWrite) && qp.attr.AccessFlags&driver.AccessRemoteWrite == 0,
		fl.Has(wire.OpRead) && qp.attr.AccessFlags&driver.AccessRemoteRead == 0,
		fl.Has(wire.OpAtomic) && qp.attr.AccessFlags&driver.AccessRemoteAtomic == 0,
		(fl.Has(wire.First) || fl.Has(wire.Middle)) && n != qp.mtu,
		n > qp.mtu:
		return false
	}
	return true
}

// takeRecv gives the responder a receive WQE for a new message, or reports RNR.
func (qp *QP) takeRecv() bool {
	r := &qp.resp
	srq := qp.srq
	if r.xsrq != nil {
		srq = r.xsrq
	}
	if srq != nil {
		wqe := &qp.srqWQE
		if !srq.take(wqe) {
			return false
		}
		r.recv = wqe
		r.recvID = wqe.id
		return true
	}
	if qp.rq.head == qp.rq.tail {
		return false
	}
	r.recv = qp.rq.at(qp.rq.head)
	r.recvID = r.recv.id
	qp.rq.head++
	return true
}

// recvSend places a SEND packet into the current receive WQE.
func (qp *QP) recvSend(p *wire.Packet, psn wire.PSN) bool {
	r := &qp.resp
	fl := p.Op.Flags
	if fl.Has(wire.First) || fl.Has(wire.Only) {
		if r.recv == nil && !qp.takeRecv() { // UC may still hold the WQE of a lost message
			qp.rnr(psn)
			return false
		}
		r.recvOff = 0
		if !qp.resolveRecv(r.recv) {
			qp.respError(wire.NAKRemoteOperationalError, driver.WCLocProtErr, psn, driver.EventQPFatal)
			return false
		}
		r.inMsg = msgSend
	}
	if r.recvOff+len(p.Payload) > r.recv.local.total {
		qp.respError(wire.NAKInvalidRequest, driver.WCLocLenErr, psn, driver.EventQPReqErr)
		return false
	}
	if !r.recv.local.copyIn(p.Payload, r.recvOff) {
		qp.respError(wire.NAKRemoteOperationalError, driver.WCLocProtErr, psn, driver.EventQPFatal)
		return false
	}
	r.recvOff += len(p.Payload)
	if fl.Has(wire.Last) || fl.Has(wire.Only) {
		wc := driver.WC{ID: r.recvID, Opcode: driver.WCRecv, ByteLen: uint32(r.recvOff), QPN: qp.qpn, SrcQP: qp.attr.DestQPN}
		if p.ImmDt != nil {
			wc.Flags |= driver.WCWithImm
			wc.Imm = p.ImmDt.Imm()
		}
		if p.IETH != nil {
			// SEND with Invalidate (IBTA 10.6.6.2, o10-36): the named rkey is invalidated
			// before the completion is returned.
			rkey := p.IETH.RKey()
			if !qp.dev.invalidate(qp.memPD(), rkey) {
				qp.respError(wire.NAKRemoteOperationalError, driver.WCLocQPOpErr, psn, driver.EventQPFatal)
				return false
			}
			wc.Flags |= driver.WCWithInv
			wc.Imm = rkey
		}
		r.inMsg = msgNone
		r.recv = nil
		qp.rcq().push(&wc, p.BTH.SE())
	}
	return true
}

// resolveRecv resolves a receive WQE's scatter list, which needs local write access.
func (qp *QP) resolveRecv(w *recvWQE) bool {
	return qp.dev.resolveSGL(qp.memPD(), w.sgeStore, true, &w.local)
}

// recvWrite places an RDMA WRITE packet.
func (qp *QP) recvWrite(p *wire.Packet, psn wire.PSN) bool {
	r := &qp.resp
	fl := p.Op.Flags
	if fl.Has(wire.First) || fl.Has(wire.Only) {
		va, rkey, n := p.RETH.VA(), p.RETH.RKey(), p.RETH.DMALen()
		if n > MaxMsgSize {
			qp.respError(wire.NAKInvalidRequest, driver.WCRemInvReqErr, psn, driver.EventQPReqErr)
			return false
		}
		r.dropPin()
		r.write, r.writeReg = nil, nil
		if n > 0 { // a zero-length WRITE checks no key (IBTA 9.7.4.1.5, C9-88)
			b, reg, ok := qp.remoteSpan(rkey, va, n, driver.AccessRemoteWrite)
			if !ok {
				qp.respError(wire.NAKRemoteAccessError, driver.WCRemAccessErr, psn, driver.EventQPAccessErr)
				return false
			}
			r.write, r.writeReg = b, reg
		}
		r.writeOff, r.writeLen = 0, int(n)
		r.inMsg = msgWrite
	}
	if r.writeOff+len(p.Payload) > r.writeLen ||
		(fl.Has(wire.Last) || fl.Has(wire.Only)) && r.writeOff+len(p.Payload) != r.writeLen {
		// The packets must add up to the RETH's DMA length exactly (C9-91).
		qp.respError(wire.NAKInvalidRequest, driver.WCRemInvReqErr, psn, driver.EventQPReqErr)
		return false
	}
	if fl.Has(wire.HasImmDt) && r.recv == nil && !qp.takeRecv() {
		// WRITE with immediate consumes a receive WQE on its last packet; none: RNR.
		qp.rnr(psn)
		return false
	}
	if len(p.Payload) > 0 {
		// The region may have been deregistered (or the window invalidated) since the
		// FIRST packet: each packet pins it, and one that finds it gone is an access error.
		// Within a GRO run the pin is kept for the next packet (Device.releaseRx), so a
		// packet that finds it kept finds the region valid: invalidation waits for it.
		if r.pinned != r.writeReg {
			r.dropPin()
			if !r.writeReg.acquire() {
				qp.dev.counters.AccessErrors.Add(1)
				qp.respError(wire.NAKRemoteAccessError, driver.WCRemAccessErr, psn, driver.EventQPAccessErr)
				return false
			}
			r.pinned = r.writeReg
		}
		if !r.placed {
			copy(r.write[r.writeOff:], p.Payload)
		}
		if !qp.dev.rxRun || fl.Has(wire.Last) || fl.Has(wire.Only) {
			r.dropPin()
		}
	}
	r.writeOff += len(p.Payload)
	if fl.Has(wire.Last) || fl.Has(wire.Only) {
		r.inMsg = msgNone
		if fl.Has(wire.HasImmDt) {
			wc := driver.WC{ID: r.recvID, Opcode: driver.WCRecvRDMAWithImm, ByteLen: uint32(r.writeLen), QPN: qp.qpn,
				SrcQP: qp.attr.DestQPN, Flags: driver.WCWithImm, Imm: p.ImmDt.Imm()}
			r.recv = nil
			qp.rcq().push(&wc, p.BTH.SE())
		}
		r.write, r.writeReg = nil, nil
	}
	return true
}

// dropPin releases the pin recvWrite kept, if any.
func (r *responder) dropPin() {
	if r.pinned != nil {
		r.pinned.release()
		r.pinned = nil
	}
}

// remoteSpan checks an rkey, range and right for a remote request (IBTA 9.7.4.1.5 and
// 10.6.3.3): the key names a valid region or window of this QP's PD that grants need and
// covers [va, va+n).
func (qp *QP) remoteSpan(rkey uint32, va uint64, n uint32, need driver.Access) ([]byte, *region, bool) {
	reg := qp.dev.keys.lookup(rkey)
	if reg == nil {
		qp.dev.counters.AccessErrors.Add(1)
		return nil, nil, false
	}
	b, ok := reg.span(qp.memPD(), va, n, need)
	if !ok {
		qp.dev.counters.AccessErrors.Add(1)
	}
	return b, reg, ok
}

// recvRead executes a READ request: it saves a responder resource and queues the
// responses. dup says the request repeats one already executed (its PSN is old): the
// responses are sent again from memory, from the PSN asked for, and a stream of the
// same READ still in the queue restarts there instead of being sent twice.
func (qp *QP) recvRead(p *wire.Packet, psn wire.PSN, dup bool) {
	r := &qp.resp
	va, rkey, n := p.RETH.VA(), p.RETH.RKey(), p.RETH.DMALen()
	if n > MaxMsgSize {
		qp.respError(wire.NAKInvalidRequest, driver.WCRemInvReqErr, psn, driver.EventQPReqErr)
		return
	}
	var src []byte
	var reg *region
	if n > 0 {
		b, rg, ok := qp.remoteSpan(rkey, va, n, driver.AccessRemoteRead)
		if !ok {
			// A repeated READ whose key has gone since is refused like a new one.
			qp.respError(wire.NAKRemoteAccessError, driver.WCRemAccessErr, psn, driver.EventQPAccessErr)
			return
		}
		src, reg = b, rg
	}
	npkts := qp.packetsFor(int(n))
	if !dup {
		res := &r.res[r.resNext]
		r.resNext = (r.resNext + 1) % len(r.res)
		*res = rdAtomicRes{valid: true, firstPSN: psn, lastPSN: psn.Add(npkts - 1)}
		r.psn = psn.Add(npkts)
		r.msn = (r.msn + 1) & wire.PSNMask
	} else {
		q := &r.out
		for i := q.head; i < len(q.items); i++ {
			it := &q.items[i]
			if it.kind == respRead && !psn.Before(it.first) && psn.Before(it.first.Add(it.npkts)) {
				// Restart the stream still being sent at the PSN asked for; the
				// retried request describes exactly the remaining memory.
				it.first, it.npkts, it.psn, it.src, it.reg = psn, npkts, psn, src, reg
				qp.flushResponses()
				return
			}
		}
	}
	r.out.push(respItem{kind: respRead, first: psn, npkts: npkts, psn: psn, src: src, reg: reg})
	qp.flushResponses()
}

// recvAtomic executes an atomic request once and answers with the original value.
func (qp *QP) recvAtomic(p *wire.Packet, psn wire.PSN) {
	r := &qp.resp
	a := p.AtomicETH
	va := a.VA()
	if va&7 != 0 {
		// Atomics must be naturally aligned (IBTA 9.4.5, C9-40); rxe answers Invalid Request.
		qp.respError(wire.NAKInvalidRequest, driver.WCRemInvReqErr, psn, driver.EventQPReqErr)
		return
	}
	b, reg, ok := qp.remoteSpan(a.RKey(), va, 8, driver.AccessRemoteAtomic)
	if !ok || !reg.acquire() {
		qp.respError(wire.NAKRemoteAccessError, driver.WCRemAccessErr, psn, driver.EventQPAccessErr)
		return
	}
	defer reg.release()
	// The target is 8-byte aligned in the address space (va&7 == 0 and va maps 1:1 onto
	// the registered slice), so the hardware atomics apply: atomics from every QP of every
	// device in this process to the same word are serialised by the CPU.
	word := (*uint64)(unsafe.Pointer(unsafe.SliceData(b)))
	var orig uint64
	if p.BTH.Opcode()&^xrcOpBase == wire.RCFetchAdd {
		orig = atomic.AddUint64(word, a.SwapAdd()) - a.SwapAdd()
	} else {
		for {
			orig = atomic.LoadUint64(word)
			if orig != a.Compare() || atomic.CompareAndSwapUint64(word, orig, a.SwapAdd()) {
				break
			}
		}
	}
	res := &r.res[r.resNext]
	r.resNext = (r.resNext + 1) % len(r.res)
	*res = rdAtomicRes{valid: true, atomic: true, firstPSN: psn, lastPSN: psn, orig: orig}
	r.psn = psn.Add(1)
	r.msn = (r.msn + 1) & wire.PSNMask
	qp.sendAtomicAck(psn, orig)
}

func (qp *QP) sendAtomicAck(psn wire.PSN, orig uint64) {
	qp.resp.out.push(respItem{kind: respAtomicAck, psn: psn, orig: orig})
	qp.flushResponses()
}

// duplicate answers a request whose PSN is older than expected (IBTA 9.7.5.1.5): SEND and
// WRITE are acknowledged again without executing, READ is answered again from memory,
// an atomic gets its saved result.
func (qp *QP) duplicate(p *wire.Packet, psn wire.PSN) {
	r := &qp.resp
	qp.Stats.DuplicateRequests++
	qp.dev.counters.DuplicateRequest.Add(1)
	fl := p.Op.Flags
	switch {
	case fl.Has(wire.OpRead):
		for i := range r.res {
			res := &r.res[i]
			if res.valid && !res.atomic && !psn.Before(res.firstPSN) && !psn.After(res.lastPSN) {
				qp.recvRead(p, psn, true)
				return
			}
		}
	case fl.Has(wire.OpAtomic):
		for i := range r.res {
			res := &r.res[i]
			if res.valid && res.atomic && res.firstPSN == psn {
				qp.sendAtomicAck(psn, res.orig)
				return
			}
		}
	default:
		qp.ackIfAsked(p, r.psn.Sub(1)) // the newest PSN executed
	}
}

// rnr answers a SEND (or WRITE with immediate) that finds no receive WQE: RNR NAK with
// the QP's min_rnr_timer; the PSN does not advance, the requester resends later.
func (qp *QP) rnr(psn wire.PSN) {
	if qp.typ == driver.QPTypeUC {
		qp.ucDrop(psn) // UC has no RNR NAK: the message is lost
		return
	}
	qp.Stats.RNRNakSent++
	qp.dev.counters.RNRNakSent.Add(1)
	qp.sendAck(wire.RNRNAKSyndrome(qp.attr.MinRNRTimer), psn)
}

// respError handles a class C (or B) responder error: NAK with the code, complete the
// receive WQE in progress (if any) with st, and move the QP to the error state.
func (qp *QP) respError(code wire.NAKCode, st driver.WCStatus, psn wire.PSN, ev driver.EventType) {
	r := &qp.resp
	if qp.dev.debug {
		qp.dev.log.Debug("responder error", "dev", qp.dev.name, "qp", qp.qpn, "psn", uint32(psn), "nak", code, "status", st)
	}
	if qp.typ == driver.QPTypeUC {
		qp.ucDrop(psn)
		return
	}
	qp.sendAck(wire.NAKSyndrome(code), psn)
	if r.recv != nil {
		wc := driver.WC{ID: r.recvID, Status: st, Opcode: driver.WCRecv, QPN: qp.qpn, SrcQP: qp.attr.DestQPN}
		r.recv = nil
		qp.rcq().push(&wc, false)
	}
	r.inMsg = msgNone
	qp.toError(ev)
}

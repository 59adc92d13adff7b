// The responders of the unreliable transports (IBTA 9.8.2, 9.8.4): UC without ACKs,
// dropping a message that lost a packet; UD delivering datagrams with the GRH area. The
// reliable one, RC, is responder.go.

package engine

import (
	"net/netip"

	"github.com/goverbs/goverbs/verbs/driver"
	"github.com/goverbs/goverbs/wire"
)

// respondUC handles a UC request (IBTA 9.8.2, 9.9.2): no ACKs, no retransmission. A
// packet at an unexpected PSN means part of a message was lost: the message in progress is
// abandoned and the responder resynchronises on the next FIRST or ONLY. qp.mu is held.
func (qp *QP) respondUC(p *wire.Packet) {
	r := &qp.resp
	psn := p.BTH.PSN()
	fl := p.Op.Flags
	start := fl.Has(wire.First) || fl.Has(wire.Only)
	if psn != r.psn || r.ucDropping {
		if psn != r.psn {
			qp.dev.counters.OutOfSequence.Add(1)
		}
		r.psn = psn.Add(1)
		if !start {
			r.ucDropping = true
			r.inMsg = msgNone
			return
		}
		r.ucDropping = false
		r.inMsg = msgNone // the half-received message is discarded; its WQE is reused
	}
	if start {
		r.inMsg = msgNone // a FIRST/ONLY at the right PSN also ends a lost message's tail
	}
	if !qp.requestValid(p) {
		qp.ucDrop(psn)
		return
	}
	r.psn = psn.Add(1)
	switch {
	case fl.Has(wire.OpSend):
		qp.recvSend(p, psn)
	case fl.Has(wire.OpWrite):
		qp.recvWrite(p, psn)
	}
}

// ucDrop abandons the UC message in progress: UC reports responder errors to nobody, the
// message simply does not arrive (IBTA 9.9.2.1). The receive WQE stays for the next one.
func (qp *QP) ucDrop(psn wire.PSN) {
	r := &qp.resp
	r.psn = psn.Add(1)
	r.ucDropping = true
	r.inMsg = msgNone
}

// respondUD delivers a UD SEND sent to the address to (the device's, or a multicast
// group's: the GRH's destination) (IBTA 9.8.4, 11.4.1.2 for the GRH area). qp.mu is held.
func (qp *QP) respondUD(p *wire.Packet, from, to netip.AddrPort) {
	d := qp.dev
	if p.DETH.QKey() != qp.attr.QKey {
		d.counters.BadQKey.Add(1) // IBTA 10.2.5, C10-15: a Q_Key mismatch is silently dropped
		return
	}
	if len(p.Payload) > qp.mtu {
		d.counters.Malformed.Add(1)
		return
	}
	r := &qp.resp
	if !qp.takeRecv() {
		d.counters.NoRecvWQE.Add(1) // UD has no RNR NAK: the datagram is dropped
		return
	}
	w := r.recv
	r.recv = nil
	if !qp.resolveRecv(w) {
		wc := driver.WC{ID: r.recvID, Status: driver.WCLocProtErr, Opcode: driver.WCRecv, QPN: qp.qpn}
		qp.recvCQ.push(&wc, false)
		qp.toError(driver.EventQPFatal)
		return
	}
	n := len(p.Payload)
	wc := driver.WC{ID: r.recvID, Opcode: driver.WCRecv, QPN: qp.qpn, SrcQP: p.DETH.SrcQP(), Flags: driver.WCWithGRH}
	if grhLen+n > w.local.total {
		wc.Status = driver.WCLocLenErr
		qp.recvCQ.push(&wc, false)
		return
	}
	var grh [grhLen]byte
	fillGRH(&grh, from, to, len(p.Buf))
	if !w.local.copyIn(grh[:], 0) || !w.local.copyIn(p.Payload, grhLen) {
		wc.Status = driver.WCLocProtErr
		qp.recvCQ.push(&wc, false)
		qp.toError(driver.EventQPFatal)
		return
	}
	wc.ByteLen = uint32(grhLen + n)
	if p.ImmDt != nil {
		wc.Flags |= driver.WCWithImm
		wc.Imm = p.ImmDt.Imm()
	}
	qp.recvCQ.push(&wc, p.BTH.SE())
}

// grhLen is the GRH area at the start of every UD receive buffer (IBTA 11.4.1.2).
const grhLen = 40

// fillGRH writes the GRH area as Linux rxe does for RoCEv2: for IPv4 the 20-byte IPv4
// header in its last 20 bytes (the first 20 are zero), for IPv6 the IPv6 header.
func fillGRH(grh *[grhLen]byte, from, to netip.AddrPort, udpPayload int) {
	ip := rxIP(from, to)
	var hdr [48]byte
	b := wire.AppendIPUDP(hdr[:0], &ip, udpPayload)
	if from.Addr().Unmap().Is4() {
		copy(grh[20:], b[:20])
	} else {
		copy(grh[:], b[:40])
	}
}

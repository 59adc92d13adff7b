// Acknowledgements: every decision about sending one. The requester's (which packets ask
// for an ACK), the responder's (one coalesced ACK per QP per receive batch, one sequence
// NAK per loss, ACKs and NAKs queued behind READ responses), and the busy-poll deferral
// (an ACK a poller earns waits for the QP's next requests, or for the third poll after
// it was earned).
// Consuming ACKs is the completer's (completer.go).

package engine

import (
	"github.com/goverbs/goverbs/verbs/driver"
	"github.com/goverbs/goverbs/wire"
)

// ackState is what a QP keeps about acknowledgements, as requester and as responder.
type ackState struct {
	// Requester: packets sent since the last one with AckReq.
	sinceAckReq int

	// Responder: the coalesced ACK owed to the peer (rxe sends one per AckReq; goverbs
	// one per receive batch), and whether the QP is on the device's list of QPs owing one.
	owed    bool
	owedPSN wire.PSN
	listed  bool

	// A PSN sequence NAK was sent for the expected PSN; no other until it arrives.
	seqNakSent bool
}

// deviceAcks is the device's list of QPs owing an ACK, and the busy-poll deferral's
// state (sendDueAcks). Owned by the receive path.
type deviceAcks struct {
	owing []*QP
	// Polls the oldest owed ACK has waited.
	age int
}

// maxPktsPerAck is how many packets of a long stream may go without AckReq.
const maxPktsPerAck = 64

// askAck reports whether a packet of w (its last, if last) sets AckReq, and counts it.
// IBTA 9.7.5.1 leaves the choice to the requester: goverbs asks on the last packet of a
// message that wantsAck, and every maxPktsPerAck packets of a long stream.
func (qp *QP) askAck(w *sendWQE, last bool) bool {
	qp.acks.sinceAckReq++
	if last && qp.wantsAck(w) || qp.acks.sinceAckReq >= maxPktsPerAck {
		qp.acks.sinceAckReq = 0
		return true
	}
	return false
}

// wantsAck reports whether the last packet of w asks for an ACK (IBTA 9.7.5.1: the
// requester chooses where to set AckReq). A message that completes visibly (signaled, or
// on a sig-all QP) or that ends what is queued now asks, so that nobody waits for a
// completion or a retransmit timer; a message in the middle of an unsignaled stream
// leaves it to the packet count, so the peer's ACKs (and the wake-ups they cost here)
// come every maxPktsPerAck packets instead of every message.
func (qp *QP) wantsAck(w *sendWQE) bool {
	return qp.sigAll || w.wr.Flags&driver.SendSignaled != 0 || qp.sq.req+1 == qp.sq.tail
}

// restartAckCount starts the AckReq packet count again: after a READ or atomic request
// (which always asks), or a rewind.
func (qp *QP) restartAckCount() { qp.acks.sinceAckReq = 0 }

// ackIfAsked acknowledges through psn a request that asked (AckReq), new or duplicate
// (IBTA 9.7.5.1.5: a duplicate SEND or WRITE is acknowledged again, not executed).
// Requests without AckReq are acknowledged by a later ACK (9.7.5.1: ACKs coalesce).
func (qp *QP) ackIfAsked(p *wire.Packet, psn wire.PSN) {
	if p.BTH.AckReq() {
		qp.queueAck(psn)
	}
}

// queueAck asks for an ACK of psn at the end of the receive batch; several requests in
// one batch are answered by one ACK of the newest.
func (qp *QP) queueAck(psn wire.PSN) {
	a := &qp.acks
	a.owed = true
	a.owedPSN = psn
	if !a.listed {
		a.listed = true
		qp.dev.acks.owing = append(qp.dev.acks.owing, qp)
	}
}

// flushAck sends the coalesced ACK, for the device's list. qp.mu is held.
func (qp *QP) flushAck() {
	qp.acks.listed = false
	qp.sendOwedAck()
}

// sendOwedAck sends the coalesced ACK now, if one is owed. qp.mu is held.
//
// Besides the device's list, the QP's destruction and its reset call it: an owed ACK is
// a deferral of goverbs' own (an RNIC sends it as the request arrives), so what ends the
// QP must not end the ACK with it. A busy-poll application that takes its last receive
// completion and closes at once (rc_pingpong's client) otherwise left its peer
// retransmitting into a QP that no longer exists, until retry-exceeded.
func (qp *QP) sendOwedAck() {
	a := &qp.acks
	if !a.owed || qp.closed {
		return
	}
	a.owed = false
	if qp.sr != nil && qp.sackCarries(a.owedPSN) {
		qp.flushResponses() // the SACK acknowledges as much (selective.go)
		return
	}
	qp.sendAck(wire.ACKSyndrome(wire.CreditsInvalid), a.owedPSN)
}

// ackAlong puts an ACK this QP owes its peer into the batch its requests are about to
// leave in, when nothing else is queued ahead of it: one syscall then carries both (a
// busy-poll device owes ACKs until its next poll; see sendDueAcks).
func (qp *QP) ackAlong(tx *txBatch) {
	a := &qp.acks
	if a.owed && qp.resp.out.empty() {
		a.owed = false
		qp.buildAck(tx, wire.ACKSyndrome(wire.CreditsInvalid), a.owedPSN)
	}
}

// sequenceNak answers a request past the expected PSN: packets in between were lost.
// One PSN sequence NAK, then silence until the expected PSN arrives (IBTA 9.7.5.1.2,
// C9-103).
func (qp *QP) sequenceNak(got wire.PSN) {
	r := &qp.resp
	if qp.acks.seqNakSent {
		return
	}
	if qp.dev.debug {
		qp.dev.log.Debug("sequence NAK sent", "dev", qp.dev.name, "qp", qp.qpn, "got", uint32(got), "expected", uint32(r.psn))
	}
	qp.acks.seqNakSent = true
	qp.Stats.SeqNakSent++
	qp.dev.counters.SeqNakSent.Add(1)
	qp.sendAck(wire.NAKSyndrome(wire.NAKPSNSeqError), r.psn)
}

// sendAck sends an ACK or NAK for psn now, behind any responses still queued.
func (qp *QP) sendAck(syn wire.Syndrome, psn wire.PSN) {
	qp.queueAckItem(syn, psn)
	qp.flushResponses()
}

// queueAckItem queues an ACK or NAK. Consecutive plain ACKs collapse into the newest.
func (qp *QP) queueAckItem(syn wire.Syndrome, psn wire.PSN) {
	q := &qp.resp.out
	if n := len(q.items); n > q.head && q.items[n-1].kind == respAck &&
		q.items[n-1].syn.Type() == wire.AckTypeACK && syn.Type() == wire.AckTypeACK {
		q.items[n-1].psn = psn
		return
	}
	q.push(respItem{kind: respAck, syn: syn, psn: psn})
}

// buildAck adds an ACK or NAK packet to tx.
func (qp *QP) buildAck(tx *txBatch, syn wire.Syndrome, psn wire.PSN) {
	h := wire.Headers{BTH: wire.BTHFields{Opcode: wire.RCAck | qp.opBase, PKey: 0xffff, DestQP: qp.attr.DestQPN, PSN: psn}}
	h.AETH = wire.AETHFields{Syndrome: syn, MSN: qp.resp.msn}
	qp.dev.emit(tx, qp.remote, qp.attr.AH.TrafficClass, &h, &payload{}, false)
	qp.Stats.TxPackets++
}

// flushAcks sends every ACK the device's QPs owe. The receive path calls it.
func (d *Device) flushAcks() {
	for i, qp := range d.acks.owing {
		qp.mu.Lock()
		qp.flushAck()
		qp.mu.Unlock()
		d.acks.owing[i] = nil
	}
	d.acks.owing = d.acks.owing[:0]
	d.acks.age = 0
}

// sendDueAcks is a busy poll's ACK deferral, run before it reads the socket when ACKs
// are owed (the caller checks acks.owing: most polls owe none); d.rxMu is held.
//
// The poller is the application's thread, so ACKs wait: an ACK's send is a syscall, and
// it should stand neither between a packet and the completion the application spins for
// nor between that completion and the application's next post. An owed ACK leaves with
// the QP's next requests (ackAlong), which a ping-pong posts at once; otherwise at the
// third poll after it was earned, whatever the polls in between found. A poller that
// stops polling leaves them to the background goroutine (busyLoop), within two busyIdle
// periods.
//
// An empty poll in between does not mean the application has nothing to post: a peer's
// request and the ACK that rides with it (ackAlong) are two datagrams, and an
// application that waits for that ACK (its send completion) before it replies, as
// perftest's latency tools do, may look once between them. Sending at the poll after an
// empty one sent the ACK alone in a quarter of ib_send_lat's turns on the capi library,
// a sendmmsg of its own between the request and the reply.
func (d *Device) sendDueAcks() {
	if d.acks.age >= 2 {
		d.flushAcks() // what left meanwhile with its requests is not sent again (flushAck)
		return
	}
	d.pruneAcks()
	if len(d.acks.owing) > 0 {
		d.acks.age++
	}
}

// pruneAcks drops from the device's list the QPs whose owed ACK has left with their
// requests (ackAlong) since they were listed, and starts the deferral's count afresh when
// none is left, so that it counts polls from the oldest ACK still owed. Without it a
// ping-pong's QP, listed again in every turn, stayed listed, the count ran on across
// turns, and an ACK earned at a turn's first poll was sent at once, alone (a sendmmsg of
// its own on the critical path, and one more datagram for the peer to read), in about
// half the turns of perftest's ib_send_lat on the capi library. d.rxMu is held.
func (d *Device) pruneAcks() {
	kept := d.acks.owing[:0]
	for _, qp := range d.acks.owing {
		qp.mu.Lock()
		if qp.acks.owed {
			kept = append(kept, qp)
		} else {
			qp.acks.listed = false
		}
		qp.mu.Unlock()
	}
	clear(d.acks.owing[len(kept):])
	d.acks.owing = kept
	if len(kept) == 0 {
		d.acks.age = 0
	}
}

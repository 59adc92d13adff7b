// The responder's outgoing packets (READ responses, atomic ACKs, ACKs and NAKs) leave in
// PSN order through one queue per QP. Order matters: an ACK that overtakes a READ's
// responses tells the requester those responses were lost (an implied NAK). A long READ is
// sent in bursts so that one request cannot hold the receive loop for a whole megabyte;
// what a burst leaves is sent by the device's sender goroutine, as rxe's responder task
// would. A repeated READ restarts the stream in place instead of queueing a second copy.

package engine

import (
	"github.com/goverbs/goverbs/verbs/driver"
	"github.com/goverbs/goverbs/wire"
)

// respBurst is how many packets one pass sends for a QP before yielding.
const respBurst = 64

type respKind uint8

const (
	respAck respKind = iota
	respRead
	respAtomicAck
)

type respItem struct {
	kind respKind
	psn  wire.PSN      // ACK/NAK/atomic: its PSN; READ: the next response to send
	syn  wire.Syndrome // ACK/NAK
	orig uint64        // atomic ACK

	// READ: the request's first PSN, its response count, and the memory of the
	// responses from psn on.
	first wire.PSN
	npkts uint32
	src   []byte
	reg   *region // pinned for each response's copy; nil for a zero-length READ
}

type respQueue struct {
	items  []respItem
	head   int
	queued bool // on the device's sender list
}

func (q *respQueue) empty() bool { return q.head == len(q.items) }

func (q *respQueue) push(it respItem) {
	if q.head > 0 && q.head == len(q.items) {
		q.items, q.head = q.items[:0], 0
	}
	q.items = append(q.items, it)
}

// pump sends up to budget packets from the response queue. It reports whether work is
// left. qp.mu is held.
func (qp *QP) pump(budget int) bool {
	q := &qp.resp.out
	if q.empty() {
		return false
	}
	tx := qp.dev.getTx()
	failed := false
	for !q.empty() && budget > 0 {
		it := &q.items[q.head]
		switch it.kind {
		case respAck:
			qp.buildAck(tx, it.syn, it.psn)
			budget--
			q.head++
		case respAtomicAck:
			qp.buildAtomicAck(tx, it.psn, it.orig)
			budget--
			q.head++
		case respSACK:
			qp.buildSACK(tx, it.psn, it.first, it.npkts)
			budget--
			q.head++
		case respRead:
			for budget > 0 {
				if !qp.buildReadResponse(tx, it) {
					// The memory was deregistered mid-stream: the rest of the READ is a
					// remote access error (and the QP's end, as for any such error).
					it.kind, it.syn = respAck, wire.NAKSyndrome(wire.NAKRemoteAccessError)
					qp.dev.counters.AccessErrors.Add(1)
					failed = true
					break
				}
				budget--
				if it.psn == it.first.Add(it.npkts) {
					q.head++
					break
				}
			}
		}
	}
	qp.dev.putTx(tx)
	if failed && qp.state != driver.QPStateErr {
		qp.toError(driver.EventQPAccessErr)
	}
	return !q.empty()
}

// flushResponses sends what the queue holds, a burst now and the rest later from the
// device's sender. qp.mu is held.
func (qp *QP) flushResponses() {
	if qp.pump(respBurst) && !qp.resp.out.queued {
		qp.resp.out.queued = true
		qp.dev.sender.add(qp)
	}
}

func (qp *QP) buildReadResponse(tx *txBatch, it *respItem) bool {
	k := uint32(it.psn.Diff(it.first))
	op := wire.RCReadResponseMiddle
	switch {
	case it.npkts == 1:
		op = wire.RCReadResponseOnly
	case k == 0:
		op = wire.RCReadResponseFirst
	case k == it.npkts-1:
		op = wire.RCReadResponseLast
	}
	h := wire.Headers{BTH: wire.BTHFields{Opcode: op | qp.opBase, PKey: 0xffff, DestQP: qp.attr.DestQPN, PSN: it.psn}}
	h.AETH = wire.AETHFields{Syndrome: wire.ACKSyndrome(wire.CreditsInvalid), MSN: qp.resp.msn}
	m := min(len(it.src), qp.mtu)
	if m > 0 && !it.reg.acquire() {
		return false
	}
	pl := bytesPayload(it.src[:m])
	qp.dev.emit(tx, qp.remote, qp.attr.AH.TrafficClass, &h, &pl, false)
	if m > 0 {
		it.reg.release()
	}
	qp.Stats.TxPackets++
	it.src = it.src[m:]
	it.psn = it.psn.Add(1)
	return true
}

func (qp *QP) buildAtomicAck(tx *txBatch, psn wire.PSN, orig uint64) {
	h := wire.Headers{BTH: wire.BTHFields{Opcode: wire.RCAtomicAck | qp.opBase, PKey: 0xffff, DestQP: qp.attr.DestQPN, PSN: psn}}
	h.AETH = wire.AETHFields{Syndrome: wire.ACKSyndrome(wire.CreditsInvalid), MSN: qp.resp.msn}
	h.AtomicAckETH = orig
	qp.dev.emit(tx, qp.remote, qp.attr.AH.TrafficClass, &h, &payload{}, false)
	qp.Stats.TxPackets++
}

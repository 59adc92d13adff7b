// Selective repeat for RC, as IRN does it (Mittal et al., SIGCOMM 2018): the responder
// keeps the packets that arrive beyond a gap (bounded by the window, in pooled buffers)
// and answers each with a PSN sequence NAK of the missing PSN that also names the PSN
// that revealed the gap (a selective acknowledgement, SACK); the requester resends only
// what is missing, once per loss. The bookkeeping is internal/congestion's SendWindow.
//
// On the wire a SACK is an RC ACKNOWLEDGE with a PSN-sequence-error NAK syndrome (IBTA
// 9.7.5.2.1) for the expected PSN, srSACKFlag set in the BTH's reserved byte 4 (resv6a;
// Annex A17.9.2 uses only its two high bits, FECN and BECN, and the ICRC masks the whole
// byte), the SACKed PSN in the AETH's MSN field, and in the BTH's resv7 bits how many
// PSNs right before it were kept too (a run, named by one SACK). A go-back-N requester (rxe, goverbs
// without selective repeat) reads it as the sequence NAK it also is and goes back N; a
// requester with selective repeat treats a NAK without the flag (from a go-back-N
// responder: its MSN is a message count) as go-back-N. So each side switches it on for
// itself (Config.SelectiveRepeat) and a connection runs selective repeat only when both
// have: interop with go-back-N peers is what it was.

package engine

import (
	"encoding/binary"
	"time"

	"github.com/goverbs/goverbs/internal/congestion"
	"github.com/goverbs/goverbs/verbs/driver"
	"github.com/goverbs/goverbs/wire"
)

// srSACKFlag marks a NAK whose AETH MSN carries a selectively acknowledged PSN: a bit of
// the BTH's resv6a (byte 4), which goverbs, rxe and RNICs send as zero.
const srSACKFlag = 0x20

// respSACK is a response-queue item: a SACK NAK of psn (expected) naming first (the PSN
// kept) and the npkts PSNs before it.
const respSACK = respAtomicAck + 1

// qpSR is a QP's selective-repeat state, under qp.mu.
type qpSR struct {
	// Requester: the outstanding PSNs, the SACKed ones, the resends queued. Made at the
	// first send (the send PSN is known then).
	sw *congestion.SendWindow
	// Responder: packets kept beyond a gap, slot psn mod len(slots), and a packet to
	// parse them into when the gap fills.
	slots []srSlot
	nkept int
	pkt   wire.Packet
	// scratch is where the replay rebuilds a placed packet from its slot's headers
	// (replayKept); made with the slots.
	scratch []byte
	// early is the target of the WRITE FIRST kept last (placeEarly); b nil: none.
	early earlyWrite
	// lastKept is the PSN kept last, sacked the last a SACK named (queueSACK).
	lastKept, sacked wire.PSN
	// Requester: the probe timer, which ticks while retransmissions are in flight
	// (armProbe).
	probe   *time.Timer
	probeOn bool
	// runListed: on the device's srRuns (srRunLater).
	runListed bool
	// peerSACKs: the responder has sent a SACK (srSACKFlag) on this connection, so it
	// runs selective repeat and keeps what arrives beyond a gap (srTimeout).
	peerSACKs bool
}

type srSlot struct {
	psn    wire.PSN
	used   bool
	placed bool // a WRITE whose payload is in its target already (placeEarly)
	buf    *[]byte
	n      int
	// A placed packet keeps only its headers, here: no pooled buffer.
	hlen uint8
	hdr  [srHdrMax]byte
}

// srHdrMax holds the headers of any packet placeEarly writes: an RDMA WRITE FIRST (BTH
// and RETH, 28 bytes) or MIDDLE (BTH).
const srHdrMax = 32

// earlyWrite is the target of a kept WRITE FIRST, for its MIDDLEs (placeEarly).
type earlyWrite struct {
	first wire.PSN
	b     []byte
	reg   *region
}

// srBufSize holds any packet the device accepts (parseRx's limit: a 4096-byte payload).
const srBufSize = txBufSize

func (d *Device) getSRBuf() *[]byte {
	if b, ok := d.srBufs.Get().(*[]byte); ok {
		return b
	}
	b := make([]byte, srBufSize)
	return &b
}

// respondSR is respond with selective repeat: a request beyond the expected PSN but
// within the window is kept and SACKed; the expected one is executed, then every kept
// packet it makes due, in order. qp.mu is held.
func (qp *QP) respondSR(p *wire.Packet) {
	r := &qp.resp
	psn := p.BTH.PSN()
	if d := psn.Diff(r.psn); d > 0 && d < srSpan*qp.window() && p.WireLen() <= srBufSize {
		qp.keep(p, psn)
		return
	}
	before := r.psn
	qp.respond(p)
	if r.psn != before && qp.sr.nkept > 0 {
		qp.replayKept()
	}
}

// keep copies an out-of-order request into its slot and SACKs it.
func (qp *QP) keep(p *wire.Packet, psn wire.PSN) {
	sr := qp.sr
	win := srSpan * int(qp.window())
	if len(sr.slots) < win {
		qp.dropKept()
		sr.slots = make([]srSlot, win) // once per QP (or per MTU change)
		sr.scratch = make([]byte, srBufSize)
	}
	s := &sr.slots[uint32(psn)%uint32(len(sr.slots))]
	if s.used {
		if s.psn == psn {
			qp.dev.counters.DuplicateRequest.Add(1) // kept already: its SACK went out
			return
		}
		qp.freeSlot(s) // a PSN the window has passed (cannot happen within it)
	}
	// The headers kept are the ones checked (p.Head: a private copy when the packet
	// lies in a same-host peer's ring), never the ring's bytes again.
	if p.Op.HeaderLen <= srHdrMax && qp.placeEarly(p, psn) {
		// Only the headers are kept, in the slot: the replay does the rest of the
		// packet's work. More than half of a stream's packets were kept at 1% loss over
		// the veth pair (TestVethLoss), and a pooled buffer for each (its Get and Put,
		// and a 4 KiB buffer's line touched cold for 12 bytes of headers) was a cost
		// the in-order packet does not have.
		s.n, s.placed, s.hlen = p.WireLen(), true, uint8(p.Op.HeaderLen)
		copy(s.hdr[:], p.Head)
	} else {
		// Headers as checked, payload, pad, ICRC: the packet as it came, wherever its
		// payload lay (a lent one's is in the sender's memory: wire.Packet.TryParseLent).
		s.buf = qp.dev.getSRBuf()
		b := *s.buf
		k := copy(b, p.Head)
		k += copy(b[k:], p.Payload)
		pad := p.BTH.PadCnt()
		clear(b[k : k+pad])
		binary.LittleEndian.PutUint32(b[k+pad:], p.ICRC)
		s.n = k + pad + wire.ICRCLen
	}
	s.psn, s.used = psn, true
	sr.nkept++
	qp.dev.counters.OOOKept.Add(1)
	// A kept packet is acknowledged as an in-order one is, when it asks (AckReq), and
	// one SACK names the whole run of kept PSNs that ends at it (srSACKRun). The packet
	// that reveals a gap is SACKed at once, after the run before the gap, if part of
	// that run was not named yet: a requester takes the PSNs between the runs it hears
	// of as lost. At 1% loss over a veth pair more than half of a stream's packets
	// arrived beyond a gap, and a SACK for each was a datagram each way per packet: the
	// responder sent as many SACKs as the stream had data packets, and the requester
	// spent as long taking them (issue 31).
	prev := sr.kept(sr.lastKept)
	gap := !prev || sr.lastKept.Add(1) != psn
	if gap && prev && sr.sacked != sr.lastKept {
		qp.queueSACK(sr.lastKept)
	}
	sr.lastKept = psn
	if gap || p.BTH.AckReq() || psn.Diff(sr.sacked) >= srBurst {
		qp.queueSACK(psn)
	}
}

// kept reports whether psn is kept.
func (sr *qpSR) kept(psn wire.PSN) bool {
	if len(sr.slots) == 0 {
		return false
	}
	s := &sr.slots[uint32(psn)%uint32(len(sr.slots))]
	return s.used && s.psn == psn
}

// queueSACK queues a SACK of the run of kept PSNs that ends at last, for the expected
// PSN; a SACK queued for the same run and the same expected PSN grows instead. It
// leaves with the receive batch's ACKs (the owed ACK flushes the response queue, and
// is not sent itself when the SACK says what it would: sackCarries), not on its own: a
// send per SACK cost the responder a syscall each while a loss was repaired. qp.mu is
// held.
func (qp *QP) queueSACK(last wire.PSN) {
	sr := qp.sr
	sr.sacked = last
	run := sr.keptRun(last)
	q := &qp.resp.out
	if n := len(q.items); n > q.head {
		if it := &q.items[n-1]; it.kind == respSACK && it.psn == qp.resp.psn && !it.first.Before(last.Sub(run)) && it.first.Before(last) {
			it.first, it.npkts = last, run
			return
		}
	}
	q.push(respItem{kind: respSACK, psn: qp.resp.psn, first: last, npkts: run, syn: wire.NAKSyndrome(wire.NAKPSNSeqError)})
	qp.dev.counters.SeqNakSent.Add(1)
	qp.Stats.SeqNakSent++
	qp.queueAck(qp.resp.psn.Sub(1))
}

// keptRun is how many PSNs right before last are kept too, at most srMaxRun.
func (sr *qpSR) keptRun(last wire.PSN) uint32 {
	n := uint32(0)
	for n < srMaxRun && sr.kept(last.Sub(n+1)) {
		n++
	}
	return n
}

// srMaxRun is the most PSNs before a SACK's own that it also names: the BTH's seven
// reserved bits (resv7) carry the count.
const srMaxRun = 0x7f

// placeEarly writes the payload of a kept RDMA WRITE FIRST or MIDDLE into its target
// now, when the target is known: the FIRST's own RETH, checked as its execution will
// check it again, or for a MIDDLE the WRITE in progress or the one whose FIRST was kept
// last. Its slot then keeps the headers alone, and the replay does the packet's
// bookkeeping without the copy. A kept packet otherwise costs a copy into a kept buffer
// and a second one out of it; at 1% loss over the veth pair (TestVethLoss) more than
// half of a stream's packets were kept, and those copies, into buffers long out of the
// cache, were the largest share of what the loss cost beyond its resends.
//
// The LAST (which completes the WRITE and carries its immediate) is never placed early,
// so that a WRITE's last byte still lands after the rest, for programs that poll it.
// A WRITE whose execution then fails (a key invalidated by a SEND with Invalidate lost
// before it, a bad length) has written part of what its key allowed, as a WRITE failing
// midway does; what its key does not allow is never written. qp.mu is held.
func (qp *QP) placeEarly(p *wire.Packet, psn wire.PSN) bool {
	fl := p.Op.Flags
	if qp.xrcd != nil || !fl.Has(wire.OpWrite) || len(p.Payload) != qp.mtu ||
		qp.attr.AccessFlags&driver.AccessRemoteWrite == 0 {
		return false
	}
	sr, r := qp.sr, &qp.resp
	var b []byte
	var reg *region
	off := 0
	switch {
	case fl.Has(wire.First):
		sr.early = earlyWrite{}
		va, rkey, n := p.RETH.VA(), p.RETH.RKey(), p.RETH.DMALen()
		if n > MaxMsgSize || int(n) <= qp.mtu {
			return false
		}
		if reg = qp.dev.keys.lookup(rkey); reg == nil {
			return false
		}
		var ok bool
		if b, ok = reg.span(qp.memPD(), va, n, driver.AccessRemoteWrite); !ok {
			return false
		}
		sr.early = earlyWrite{first: psn, b: b, reg: reg}
	case !fl.Has(wire.Middle):
		return false
	case sr.early.b != nil && psn.After(sr.early.first) && sr.kept(sr.early.first):
		b, reg, off = sr.early.b, sr.early.reg, int(psn.Diff(sr.early.first))*qp.mtu
	case r.inMsg == msgWrite && r.write != nil:
		b, reg, off = r.write, r.writeReg, r.writeOff+int(psn.Diff(r.psn))*qp.mtu
	default:
		return false
	}
	if off+qp.mtu >= len(b) { // a LAST must follow
		return false
	}
	if !reg.acquire() {
		return false
	}
	copy(b[off:], p.Payload)
	reg.release()
	return true
}

func (qp *QP) freeSlot(s *srSlot) {
	if s.buf != nil {
		qp.dev.srBufs.Put(s.buf)
	}
	s.buf, s.used, s.n, s.placed = nil, false, 0, false
	qp.sr.nkept--
}

// replayKept executes the kept packets that are now due, in PSN order, and acknowledges
// through the last. A kept packet that does not advance the expected PSN (no receive
// WQE: an RNR NAK; an error NAK) ends the replay and drops what is kept: the requester
// goes back N from there and resends them.
func (qp *QP) replayKept() {
	sr, r := qp.sr, &qp.resp
	replayed := false
	for sr.nkept > 0 {
		s := &sr.slots[uint32(r.psn)%uint32(len(sr.slots))]
		if !s.used || s.psn != r.psn {
			break
		}
		before := r.psn
		b := sr.scratch
		if s.buf != nil {
			b = *s.buf
		} else {
			// A placed WRITE: its headers, and a payload's length of whatever the
			// scratch holds (the replay does not copy it: r.placed).
			copy(b, s.hdr[:s.hlen])
		}
		if _, ok := sr.pkt.TryParse(b[:s.n], wire.MTU4096.Bytes()); ok {
			r.placed = s.placed
			qp.respond(&sr.pkt)
			r.placed = false
		}
		sr.pkt = wire.Packet{} // no reference into the buffer outlives it
		qp.freeSlot(s)
		if r.psn == before || qp.state == driver.QPStateErr {
			qp.dropKept()
			break
		}
		replayed = true
	}
	if replayed {
		qp.queueAck(r.psn.Sub(1))
	}
}

// dropKept forgets every kept packet (QP reset, a replay that stopped).
func (qp *QP) dropKept() {
	sr := qp.sr
	sr.early = earlyWrite{}
	for i := range sr.slots {
		if sr.slots[i].used {
			qp.freeSlot(&sr.slots[i])
		}
	}
	sr.nkept = 0
}

// buildSACK adds a SACK NAK to tx: expected is missing, sacked and the run PSNs
// before it were kept.
func (qp *QP) buildSACK(tx *txBatch, expected, sacked wire.PSN, run uint32) {
	h := wire.Headers{BTH: wire.BTHFields{Opcode: wire.RCAck, PKey: 0xffff, DestQP: qp.attr.DestQPN, PSN: expected, Resv8a: srSACKFlag, Resv7: uint8(run)}}
	h.AETH = wire.AETHFields{Syndrome: wire.NAKSyndrome(wire.NAKPSNSeqError), MSN: uint32(sacked) & wire.PSNMask}
	qp.dev.emit(tx, qp.remote, qp.attr.AH.TrafficClass, &h, &payload{}, false)
	qp.Stats.TxPackets++
}

// selectiveNak takes a NAK at the requester; it reports false when the NAK is not a
// SACK (no flag, or not a sequence error), for the go-back-N path. qp.mu is held.
func (qp *QP) selectiveNak(p *wire.Packet, psn wire.PSN) bool {
	sw := qp.sr.sw
	if sw == nil || p.BTH.Resv8a()&srSACKFlag == 0 || p.AETH.Syndrome().NAKCode() != wire.NAKPSNSeqError {
		return false
	}
	qp.Stats.SeqNakReceived++
	qp.dev.counters.SeqNakReceived.Add(1)
	qp.sr.peerSACKs = true
	last := wire.PSN(p.AETH.MSN())
	sw.NAKRun(psn, last.Sub(uint32(p.BTH.Resv7())), last)
	return true
}

// srTimeout is the local ACK timeout with selective repeat (onRetransmitTimer): it
// queues for resending every outstanding PSN the responder has not SACKed
// (SendWindow.Timeout), instead of going back N from the oldest unacknowledged one, and
// reports whether it did. The PSNs neither acknowledged nor SACKed are the ones in
// flight, which the requester keeps at or below a window (srFull), so the burst is at
// most go-back-N's window and usually a few PSNs; going back N resent everything from
// Una, up to the span (four windows), most of it kept at the responder already.
//
// It goes back N (reports false) when the responder has never SACKed on this connection
// (a go-back-N peer, such as rxe: nothing changes for it), when a READ or atomic is
// outstanding (its responses are the responder's to resend, and rewind handles them),
// and when the requester is going back N already. qp.mu is held.
func (qp *QP) srTimeout() bool {
	sr := qp.sr
	if sr == nil || sr.sw == nil || !sr.peerSACKs || qp.req.outstandingRdAtom > 0 || qp.req.psn.Before(qp.req.high) {
		return false
	}
	sr.sw.Timeout()
	return true
}

// srSent records new PSNs sent, up to next. qp.mu is held.
func (qp *QP) srSent(next wire.PSN) {
	sr := qp.sr
	if sr.sw == nil {
		sr.sw = congestion.NewSendWindow(qp.comp.psn, int(qp.window()))
	}
	sr.sw.SentNew(next.Sub(1))
}

// resendSelective sends the retransmissions SACKs asked for, before any new packet. A
// lost READ or atomic request goes back N from it (its responses are the responder's to
// resend, and rewind already handles them). qp.mu is held.
func (qp *QP) resendSelective(tx *txBatch) {
	sw := qp.sr.sw
	for qp.cc == nil || qp.cc.budget > 0 {
		psn, ok := sw.Retransmission()
		if !ok {
			return
		}
		w := qp.wqeHolding(psn)
		if w == nil {
			continue // acknowledged meanwhile
		}
		if w.isReadOrAtomic() {
			qp.rewind(psn)
			return
		}
		inline := w.wr.Flags&driver.SendInline != 0
		if !inline && !w.local.acquire() {
			qp.localError(w, driver.WCLocProtErr)
			return
		}
		ok = qp.emitPacket(w, uint32(psn.Diff(w.firstPSN)), tx, qp.remote, true)
		if !inline {
			w.local.release()
		}
		if !ok {
			qp.localError(w, driver.WCLocProtErr)
			return
		}
		qp.Stats.TxPackets++
		qp.Stats.Retransmits++
		qp.dev.counters.Retransmits.Add(1)
		qp.dev.counters.SelectiveRetransmits.Add(1)
		qp.armProbe()
	}
}

// armProbe starts the probe timer, unless it runs: while retransmissions are in flight
// it ticks every eighth of the local ACK timeout (at least srProbeMin), and a
// retransmission still missing after a whole tick is sent again (SendWindow.Probe).
// A retransmission is lost as often as any packet, and what shows the loss is a SACK of
// a packet sent after it; when the requester has nothing more to send (its window
// full, or nothing posted: a loss holds every completion after it) nothing shows it,
// and the local ACK timer went back N a timeout later. Over the veth pair at 1% loss
// (TestVethLoss, timeout 16.8 ms) that happened up to five times in six runs of 300 ms
// under load. qp.mu is held.
func (qp *QP) armProbe() {
	sr := qp.sr
	d := max(timeoutDuration(qp.attr.Timeout)/8, srProbeMin)
	if sr.probeOn || qp.attr.Timeout == 0 {
		return
	}
	sr.probeOn = true
	if sr.probe == nil {
		sr.probe = time.AfterFunc(d, qp.onProbe)
	} else {
		sr.probe.Reset(d)
	}
}

// srProbeMin is the shortest probe tick: Go's timers fire about a millisecond late below
// that anyway.
const srProbeMin = time.Millisecond

func (qp *QP) onProbe() {
	qp.mu.Lock()
	defer qp.mu.Unlock()
	sr := qp.sr
	if !sr.probeOn {
		return // stopped (stopProbe) after this firing had begun
	}
	sr.probeOn = false
	if qp.closed || qp.state != driver.QPStateRTS && qp.state != driver.QPStateSQD || sr.sw == nil {
		return
	}
	if sr.sw.Probe() {
		qp.runRequester()
	}
	if sr.sw.Resending() {
		qp.armProbe()
	}
}

// stopProbe stops the probe timer (QP reset, error, close). qp.mu is held.
func (qp *QP) stopProbe() {
	if sr := qp.sr; sr != nil && sr.probe != nil {
		sr.probe.Stop()
		sr.probeOn = false
	}
}

// srFull is the requester's window with selective repeat: at most a window of packets in
// flight (sent, neither acknowledged nor SACKed), and at most srSpan windows of PSNs from
// the oldest unacknowledged one (what the responder keeps within). What the
// responder has kept counts as delivered, so new packets keep leaving while a loss is
// repaired, as IRN's sender does; they are what reveals a lost retransmission (a SACK of
// a PSN sent after it). Counted from the oldest unacknowledged PSN, as go-back-N counts,
// a window whose every PSN had left before a retransmission left nothing behind it, and
// a lost retransmission waited for the local ACK timeout. In flight is capped at the
// window, not below: a lower cap stalled on every lost ACK until the timeout.
//
// A requester going back N (after a timeout, an RNR NAK, a NAK without a SACK) resends
// within go-back-N's window alone. win is qp.window(). qp.mu is held.
func (qp *QP) srFull(win int32) bool {
	out := qp.req.psn.Diff(qp.comp.psn)
	sw := qp.sr.sw
	if sw == nil || qp.req.psn.Before(qp.req.high) {
		return out >= win
	}
	return out >= srSpan*win || sw.InFlight() >= int(win)
}

// srRunDue reports whether a SACK that acknowledged nothing cumulatively should run the
// requester: when it queued a resend, or when the packets SACKed since the requester
// last ran have opened the window by srBurst. Each SACK frees one packet's room in
// flight; run on every one, the requester sent one packet per SACK, each in a send of
// its own (a syscall per packet while a loss was repaired, a tenth and more of a veth
// stream's goodput at 1% loss). The requester's batch is the unit, as for ACKs.
func (qp *QP) srRunDue() bool {
	sw := qp.sr.sw
	return sw == nil || sw.RetransmissionQueued() || int(qp.window())-sw.InFlight() >= srBurst
}

// srRunLater runs the requester once at the end of the receive batch, for a SACK that
// did not run it (srRunDue). The responder sends no plain ACK beside a SACK that says the
// same (sackCarries); that ACK, arriving after the batch's SACKs, is what ran the
// requester once per batch of SACKs before, and sent the room they had opened. Without
// a run in its place that room waited for the next burst's worth of SACKs or for
// another goroutine's kick (a post, a timer). The end of the receive batch is the same
// point, on the same goroutine. qp.mu is held.
func (qp *QP) srRunLater() {
	if sr := qp.sr; !sr.runListed {
		sr.runListed = true
		qp.dev.srRuns = append(qp.dev.srRuns, qp)
	}
}

// runSRRequesters runs the requesters srRunLater listed during the receive batch. The
// receive path calls it, at the end of every batch (inputBatch).
func (d *Device) runSRRequesters() {
	for i, qp := range d.srRuns {
		qp.mu.Lock()
		qp.sr.runListed = false
		if !qp.closed && (qp.state == driver.QPStateRTS || qp.state == driver.QPStateSQD) {
			qp.runRequester()
		}
		qp.mu.Unlock()
		d.srRuns[i] = nil
	}
	d.srRuns = d.srRuns[:0]
}

// srBurst is how many packets' room a run of SACKs opens before the requester runs:
// 64 KiB at MTU 4096.
const srBurst = 16

// srSpan is how many windows of PSNs a selective-repeat requester may have outstanding,
// and so how far beyond its expected PSN the responder keeps packets: SendWindow's span.
// A loss holds the oldest unacknowledged PSN for a repair round trip, two trips through
// the responder's standing queue (a window deep while the stream runs). Over the veth
// pair at 1% loss (TestVethLoss) that was about 0.9 ms, 270 packets at 10 Gb/s, and with
// a span of two windows (256 PSNs at MTU 4096) the requester ran out of span during
// repairs and waited.
const srSpan = congestion.SpanFactor

// resendQueued reports whether SACKs have asked for resends not yet sent.
func (qp *QP) resendQueued() bool {
	return qp.sr != nil && qp.sr.sw != nil && qp.sr.sw.RetransmissionQueued()
}

// wqeHolding is the sent, unfinished WQE whose PSNs include psn, or nil.
func (qp *QP) wqeHolding(psn wire.PSN) *sendWQE {
	end := qp.sq.req
	if end != qp.sq.tail && qp.sq.at(end).state == wqeSending {
		end++
	}
	for i := qp.sq.head; i != end; i++ {
		w := qp.sq.at(i)
		if w.state == wqeDone || w.state == wqePosted {
			continue
		}
		if !psn.Before(w.firstPSN) && !psn.After(w.lastPSN()) {
			if w.state == wqeSending && !psn.Before(w.firstPSN.Add(w.next)) {
				return nil // not sent yet
			}
			return w
		}
	}
	return nil
}

// sackCarries reports whether the newest queued response is a SACK for the PSN after psn:
// a NAK acknowledges the requests before the PSN it names (complete acts on it as on an
// ACK of the PSN before, as a go-back-N requester does too), so the batch's ACK of psn
// would say nothing more, and sendOwedAck leaves it out. While a loss is repaired most
// receive batches end in a SACK, and the ACK beside each was a third of the responder's
// datagrams over the veth pair at 1% loss (TestVethLoss's stream for 400 ms: 14,000
// datagrams from the responder, 9,800 without it), each a send's and a receive's work. The requester ran once per batch on that ACK; it now runs
// at the end of its receive batch instead (srRunLater). qp.mu is held.
func (qp *QP) sackCarries(psn wire.PSN) bool {
	if qp.sr == nil {
		return false
	}
	q := &qp.resp.out
	n := len(q.items)
	return n > q.head && q.items[n-1].kind == respSACK && q.items[n-1].psn == psn.Add(1)
}

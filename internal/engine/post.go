// Posting: PostSend and PostRecv check and copy work requests into the queues, and
// decide whether the requester runs now or later (doorbell batching): on the sender
// goroutine, or on a busy-poll device at the application's next poll.

package engine

import (
	"net/netip"
	"time"

	"github.com/goverbs/goverbs/verbs/driver"
)

// PostSend queues work requests on the send queue and runs the requester at once in the
// caller's goroutine (run to completion: the first packets leave before PostSend returns).
func (qp *QP) PostSend(wrs []driver.SendWR) error {
	qp.mu.Lock()
	defer qp.mu.Unlock()
	if qp.closed {
		return ErrQPClosed
	}
	switch qp.state {
	case driver.QPStateRTS, driver.QPStateSQD, driver.QPStateSQE, driver.QPStateErr:
	default:
		return ErrQPState
	}
	for i := range wrs {
		if err := qp.enqueueSend(&wrs[i]); err != nil {
			qp.kickSend()
			return &driver.PostError{Index: i, Err: err}
		}
	}
	polls := qp.dev.polls.Load()
	toPoll := qp.dev.poller != nil || qp.dev.pollDriven.Load()
	afterPoll := polls != qp.lastPolls
	if qp.deferPost(polls, toPoll) && !(toPoll && qp.awaitedPosted(wrs)) {
		if !qp.txQueued {
			qp.txQueued = true
			if toPoll {
				qp.dev.doorbell.add(qp.dev, qp)
			} else {
				qp.dev.sender.add(qp)
			}
		}
	} else {
		qp.kickSend()
		if toPoll && afterPoll {
			// Where polls drive the device, a post after a poll is isolated whenever
			// it comes (deferPost), and so is the next one after another poll: a busy
			// ping-pong's posts never need the time, and a clock read is about 20 ns
			// of its turn (19 in the in-memory ping-pong's CPU profile, DESIGN.md, "The
			// per-message cost budget"). A post that follows this one without a poll
			// is taken for a stream's second post, which leaves at once as it would
			// have: only its third waits for the poll.
			qp.lastPost = postAfterPoll
		} else {
			qp.lastPost = nanotime()
		}
	}
	qp.lastPolls = polls
	return nil
}

// deferPost reports whether a post is part of a stream, to be sent later with whatever
// else is posted meanwhile, in as few syscalls as GSO allows (doorbell batching): by the
// device's sender goroutine, or, when the application's polls drive the device
// (toPoll: busy-poll, or a program spinning on a default-mode CQ, pollDriven), at its
// next poll (doorbell.go). Otherwise the post leaves before PostSend returns. polls is
// the device's poll count now. qp.mu is held.
//
//   - A post after one of the application's polls of the device is isolated (a
//     ping-pong's reply follows the previous post's return by less than streamGap, the
//     send having taken most of the round trip, and deferring it would cost two
//     timerfd syscalls a turn, several times a busy ping-pong's latency). A stream is
//     posted between polls.
//   - Where a stream waits for a poll, the post that makes maxDeferred requests wait
//     sends them, a full GSO run; and a post that joins posts already waiting is
//     deferred with no clock read (a reading is a noticeable share of a small-message
//     stream's posting thread).
//   - Otherwise a post within streamGap of the previous post's end is part of a stream.
//     The end counts because an inline send takes a syscall and a stream of them must
//     still be recognized; a deferred post is short, so its start serves (one clock
//     read per streamed post, not two).
//   - Where the stream would wait for a poll, its second post still leaves at once: a
//     deferral arms the doorbell's alarm (a timerfd syscall, and the alarm's wake-up),
//     more than the send it saves in a burst of two (rdmanet's data and credit, whose
//     request/response was slower when that pair waited for the poll).
//
// Waking the sender goroutine for every burst of a spinning program's stream, rather
// than waiting for its poll, costs a thread wake-up each (DESIGN.md, "Doorbell
// batching", has the figures of these rules).
func (qp *QP) deferPost(polls uint32, toPoll bool) bool {
	if polls != qp.lastPolls || qp.state != driver.QPStateRTS ||
		toPoll && qp.sq.tail-qp.sq.req >= maxDeferred {
		qp.streamPosts = 0
		return false
	}
	if toPoll && qp.txQueued {
		return true
	}
	now := nanotime()
	if qp.lastPost == postAfterPoll && toPoll {
		// The previous post followed a poll and read no clock (PostSend), and this one
		// came with no poll in between: a stream's second post, which leaves at once.
		qp.lastPost = now
		qp.streamPosts = 1
		return false
	}
	if now-qp.lastPost >= int64(streamGap) {
		qp.streamPosts = 0
		return false
	}
	qp.lastPost = now
	qp.streamPosts = min(qp.streamPosts+1, 2)
	return !toPoll || qp.streamPosts == 2
}

// awaitedPosted reports whether wrs, just queued, hold the completion the application
// will wait for next on this QP: a signaled work request (or any, on a sig-all QP) with
// no signaled one queued before it that has not completed. Where a stream's posts wait
// for the program's next poll (the doorbell), such a post leaves at once, with the
// stream's posts queued before it. (Where they go to the sender goroutine, it is woken
// at once and sends them from another thread, in parallel with the posts that follow:
// sending from the poster instead cost RC WRITE 64 KiB in process some 8%.) A program
// that keeps a window of requests in flight and asks for a completion every so often
// (perftest's write_bw: 128 in flight, one completion per 100)
// waits for that completion when its window is full; deferred, the request went out
// only when the program had posted the rest of its window and polled, and the program
// then sat idle for the whole round trip, once per completion. Sent at once, its
// acknowledgement comes back while the program posts the rest. A stream that signals
// every request keeps its batching: one of them is always outstanding. Only where a
// completion waits for the peer's acknowledgement (RC, XRC): an unreliable send completes
// as it leaves, at the poll that sends it. qp.mu is held.
func (qp *QP) awaitedPosted(wrs []driver.SendWR) bool {
	if qp.typ != driver.QPTypeRC && qp.typ != driver.QPTypeXRCSend {
		return false
	}
	first := -1
	for i := range wrs {
		if qp.sigAll || wrs[i].Flags&driver.SendSignaled != 0 {
			first = i
			break
		}
	}
	if first < 0 {
		return false
	}
	mine := qp.sq.tail - uint64(len(wrs)) + uint64(first)
	if qp.sigAll {
		return qp.sq.head == mine
	}
	for i := qp.sq.head; i < mine; i++ {
		if qp.sq.at(i).wr.Flags&driver.SendSignaled != 0 {
			return false
		}
	}
	return true
}

// copyWR returns wr with sgl for its SGL, and no AH or Bind (the WQE keeps the UD
// destination and the resolved binding by value). No pointer of the caller's is stored, not
// even to be overwritten next: escape analysis would see the store and move every SGL
// a caller writes as a literal to the heap, an allocation per post.
// TestCopyWRKeepsEveryField catches a field added to SendWR and not here.
func copyWR(wr *driver.SendWR, sgl []driver.SGE) driver.SendWR {
	return driver.SendWR{
		ID: wr.ID, Opcode: wr.Opcode, Flags: wr.Flags, SGL: sgl, Imm: wr.Imm,
		RemoteAddr: wr.RemoteAddr, RKey: wr.RKey, CompareAdd: wr.CompareAdd, Swap: wr.Swap,
		RemoteQPN: wr.RemoteQPN, RemoteQKey: wr.RemoteQKey, RemoteSRQN: wr.RemoteSRQN,
	}
}

// streamGap is how soon after the previous post a post counts as part of a stream:
// posted back to back, with no work of the program's in between. It is
// streamGapNative, or ten times that under the race detector (race.go), whose
// instrumented PostSend alone can take longer than the native gap on a slow machine,
// so that no stream was ever recognized there (the doorbell tests failed on a 2-core
// AMD EPYC VM, 2026-11-28).
const streamGapNative = 3 * time.Microsecond

// postAfterPoll is QP.lastPost for a post that followed a poll on a device whose polls
// drive it, which reads no clock (PostSend). nanotime never returns it.
const postAfterPoll = -1

// sendQueued sends the posts PostSend batched (txQueued), unless the QP has closed or
// been reset since: the sender goroutine's work, and a busy-poll doorbell's. qp.mu is
// held.
func (qp *QP) sendQueued() {
	if !qp.txQueued {
		return
	}
	qp.txQueued = false
	if !qp.closed && qp.state != driver.QPStateReset {
		qp.kickSend()
	}
}

func (qp *QP) kickSend() {
	if qp.state == driver.QPStateErr {
		qp.flush()
		return
	}
	qp.runRequester()
}

func (qp *QP) enqueueSend(wr *driver.SendWR) error {
	if qp.sq.full() {
		return ErrSendQueueFull
	}
	if !opAllowed(qp.typ, wr.Opcode) {
		return ErrBadOpcode
	}
	if len(wr.SGL) > int(qp.cap.MaxSendSGE) {
		return ErrTooManySGE
	}
	var total uint64
	for _, s := range wr.SGL {
		total += uint64(s.Length)
	}
	if total > MaxMsgSize {
		return ErrMsgTooLarge
	}
	var ah *AH
	if qp.typ == driver.QPTypeUD {
		if wr.AH != nil {
			ah, _ = wr.AH.DriverAH().(*AH) // another provider's handle is no address here
		}
		if ah == nil {
			return ErrNoAH
		}
		if ah.closed.Load() {
			return ErrAHClosed
		}
		if qp.mtu > 0 && total > uint64(qp.mtu) {
			return ErrUDTooLarge
		}
	}
	inline := wr.Flags&driver.SendInline != 0 && (wr.Opcode == driver.WRSend || wr.Opcode == driver.WRSendWithImm ||
		wr.Opcode == driver.WRSendWithInv || wr.Opcode == driver.WRRDMAWrite || wr.Opcode == driver.WRRDMAWriteWithImm)
	if inline && total > uint64(qp.cap.MaxInline) {
		return ErrInlineTooLarge
	}
	var bind BindMW
	if wr.Opcode == driver.WRBindMW {
		var err error
		if bind, err = resolveBind(wr.Bind); err != nil {
			return err
		}
	}
	w := qp.sq.at(qp.sq.tail)
	w.wr = copyWR(wr, append(w.sgeStore[:0], wr.SGL...))
	w.bind = bind
	if ah != nil {
		w.udDst, w.udTC = netip.AddrPortFrom(ah.addr(), qp.dev.peerPort), ah.TrafficClass
	}
	w.length = int(total)
	w.state = wqePosted
	w.status = driver.WCSuccess
	w.vendor = 0
	w.next = 0
	w.local.segs = w.local.segs[:0]
	w.local.regs = w.local.regs[:0]
	w.local.total = 0
	if inline {
		// Inline data is copied now: the caller may reuse its buffer as soon as PostSend
		// returns (IBV_SEND_INLINE). The SGEs must still name registered memory here, as
		// a Go SGE has no other way to name bytes; the C library stages a C program's
		// unregistered inline bytes in a region of its own (capi/inline.c).
		w.inline = w.inline[:0]
		ok := true
		for _, s := range wr.SGL {
			r := qp.dev.keys.lookup(s.LKey)
			if r == nil {
				ok = false
				break
			}
			b, in := r.span(r.pd, s.Addr, s.Length, 0)
			if !in || !r.acquire() {
				ok = false
				break
			}
			w.inline = append(w.inline, b...)
			r.release()
		}
		if !ok {
			return errInlineKey
		}
		w.wr.Flags |= driver.SendInline
	} else {
		w.wr.Flags &^= driver.SendInline
	}
	qp.sq.tail++
	return nil
}

var errInlineKey = driver.NewError(driver.ErrInvalidAttr, "inline SGE does not name registered memory")

func opAllowed(t driver.QPType, op driver.WROpcode) bool {
	switch t {
	case driver.QPTypeRC, driver.QPTypeXRCSend:
		switch op {
		case driver.WRRDMAWrite, driver.WRRDMAWriteWithImm, driver.WRSend, driver.WRSendWithImm, driver.WRRDMARead,
			driver.WRAtomicCmpAndSwp, driver.WRAtomicFetchAdd, driver.WRLocalInv, driver.WRSendWithInv, driver.WRBindMW:
			return true
		}
	case driver.QPTypeUC:
		switch op {
		case driver.WRRDMAWrite, driver.WRRDMAWriteWithImm, driver.WRSend, driver.WRSendWithImm, driver.WRLocalInv, driver.WRBindMW:
			return true
		}
	case driver.QPTypeUD:
		return op == driver.WRSend || op == driver.WRSendWithImm
	}
	return false
}

// PostRecv queues receive work requests.
func (qp *QP) PostRecv(wrs []driver.RecvWR) error {
	qp.mu.Lock()
	defer qp.mu.Unlock()
	if qp.closed {
		return ErrQPClosed
	}
	if qp.srq != nil || qp.typ.XRC() {
		return ErrQPState // the receives of an SRQ's QP, or of XRC, are the SRQ's
	}
	if qp.state == driver.QPStateReset {
		return ErrQPState
	}
	for i := range wrs {
		wr := &wrs[i]
		if qp.rq.full() {
			return &driver.PostError{Index: i, Err: ErrRecvQueueFull}
		}
		if len(wr.SGL) > int(qp.cap.MaxRecvSGE) {
			return &driver.PostError{Index: i, Err: ErrTooManySGE}
		}
		r := qp.rq.at(qp.rq.tail)
		r.id = wr.ID
		r.sgeStore = append(r.sgeStore[:0], wr.SGL...)
		r.local.segs = r.local.segs[:0]
		r.local.regs = r.local.regs[:0]
		r.local.total = -1 // resolved when a message lands in it
		qp.rq.tail++
	}
	if qp.state == driver.QPStateErr {
		qp.flush()
	}
	return nil
}

// resolveBind reads a BIND_MW request's window and region, which must be this engine's
// (a *MW and a *MR behind the driver references). A binding without a region (a nil
// MR reference) unbinds; a reference to a nil region is an error, not an unbind.
func resolveBind(b *driver.MWBindWR) (BindMW, error) {
	if b == nil || b.MW == nil {
		return BindMW{}, ErrBadBind
	}
	mw, _ := b.MW.DriverMW().(*MW)
	if mw == nil {
		return BindMW{}, ErrBadBind
	}
	if mw.closed.Load() { // ibv_dealloc_mw made it unusable
		return BindMW{}, ErrMWClosed
	}
	out := BindMW{MW: mw, Addr: b.Addr, Length: b.Length, Access: b.Access, RKey: b.RKey}
	if b.MR != nil {
		if out.MR, _ = b.MR.DriverMR().(*MR); out.MR == nil {
			return BindMW{}, ErrBadBind
		}
		if !out.MR.valid.Load() { // deregistered
			return BindMW{}, ErrMRClosed
		}
	}
	return out, nil
}

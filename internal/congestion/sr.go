package congestion

import (
	"math"
	"math/bits"
	"time"

	"github.com/goverbs/goverbs/wire"
)

// Selective repeat for RC, as IRN does it (Mittal et al., "Revisiting Network
// Support for RDMA", SIGCOMM 2018): the responder keeps packets that arrive
// beyond a gap instead of dropping them, and NAKs the first missing PSN with the
// PSN that revealed the gap (a selective acknowledgement); the requester
// retransmits only what is missing, once per loss, and keeps at most a
// bandwidth-delay product of packets in flight. These are the two sides'
// bookkeeping, with no packets and no clock; internal/engine/selective.go wires
// them in, behind a switch so that go-back-N peers (rxe) see no change.

// psnSet is a set of PSNs within a window of a fixed size from a moving base,
// kept as a ring bitmap: PSN p is bit p mod the ring's size.
type psnSet struct {
	words []uint64
	mask  uint32
}

func newPSNSet(size int) psnSet {
	n := 64
	for n < size {
		n <<= 1
	}
	return psnSet{words: make([]uint64, n/64), mask: uint32(n - 1)}
}

func (s *psnSet) has(p wire.PSN) bool {
	i := uint32(p) & s.mask
	return s.words[i/64]&(1<<(i%64)) != 0
}

func (s *psnSet) set(p wire.PSN) {
	i := uint32(p) & s.mask
	s.words[i/64] |= 1 << (i % 64)
}

func (s *psnSet) clear(p wire.PSN) {
	i := uint32(p) & s.mask
	s.words[i/64] &^= 1 << (i % 64)
}

func (s *psnSet) count() int {
	n := 0
	for _, w := range s.words {
		n += bits.OnesCount64(w)
	}
	return n
}

// RecvResult is what a Tracker made of an arriving PSN.
type RecvResult uint8

// Results of Tracker.Receive.
const (
	// RecvInOrder: the expected PSN; Expected has moved past it and past any
	// kept packets that followed it. Execute it (and them, in order).
	RecvInOrder RecvResult = iota
	// RecvOutOfOrder: beyond a gap, within the window: kept. NAK
	// Expected (PSN sequence error) with this PSN as the selective
	// acknowledgement.
	RecvOutOfOrder
	// RecvDuplicate: already received (before Expected, or kept): ACK again,
	// execute nothing (a duplicate READ or atomic is answered from the saved
	// responder resources as today).
	RecvDuplicate
	// RecvOutOfWindow: too far ahead to keep; drop it, and NAK Expected as
	// go-back-N does. A requester that keeps to the BDP cap never causes it.
	RecvOutOfWindow
)

func (r RecvResult) String() string {
	switch r {
	case RecvInOrder:
		return "in-order"
	case RecvOutOfOrder:
		return "out-of-order"
	case RecvDuplicate:
		return "duplicate"
	case RecvOutOfWindow:
		return "out-of-window"
	}
	return "RecvResult(?)"
}

// TrackerStats counts a Tracker's decisions.
type TrackerStats struct {
	InOrder, OutOfOrder, Duplicate, OutOfWindow uint64
}

// Tracker is the responder's side of selective repeat for one QP: the expected
// PSN and which PSNs beyond it, within a window, have arrived and been kept.
type Tracker struct {
	expected wire.PSN
	window   int
	kept     psnSet
	nkept    int
	stats    TrackerStats
}

// NewTracker returns a Tracker expecting first, keeping up to window PSNs beyond
// it (at least 1; the requester's BDP cap is the natural size).
func NewTracker(first wire.PSN, window int) *Tracker {
	window = min(max(window, 1), 1<<22)
	return &Tracker{expected: first & wire.PSNMask, window: window, kept: newPSNSet(window + 1)}
}

// Expected is the next PSN due in order: every PSN before it has arrived.
func (t *Tracker) Expected() wire.PSN { return t.expected }

// Kept is the number of packets held beyond a gap.
func (t *Tracker) Kept() int { return t.nkept }

// Stats returns the Tracker's counters.
func (t *Tracker) Stats() TrackerStats { return t.stats }

// Receive records the arrival of psn and says what to do with it.
func (t *Tracker) Receive(psn wire.PSN) RecvResult {
	psn &= wire.PSNMask
	d := psn.Diff(t.expected)
	switch {
	case d < 0:
		t.stats.Duplicate++
		return RecvDuplicate
	case d == 0:
		t.expected = t.expected.Add(1)
		for t.nkept > 0 && t.kept.has(t.expected) {
			t.kept.clear(t.expected)
			t.nkept--
			t.expected = t.expected.Add(1)
		}
		t.stats.InOrder++
		return RecvInOrder
	case int(d) > t.window:
		t.stats.OutOfWindow++
		return RecvOutOfWindow
	case t.kept.has(psn):
		t.stats.Duplicate++
		return RecvDuplicate
	}
	t.kept.set(psn)
	t.nkept++
	t.stats.OutOfOrder++
	return RecvOutOfOrder
}

// Has reports whether psn has arrived: before Expected, or kept.
func (t *Tracker) Has(psn wire.PSN) bool {
	psn &= wire.PSNMask
	d := psn.Diff(t.expected)
	return d < 0 || d > 0 && int(d) <= t.window && t.kept.has(psn)
}

// SendWindowStats counts a SendWindow's work.
type SendWindowStats struct {
	Sent          uint64 // packets handed out by Next, new and retransmitted
	Retransmitted uint64 // of which retransmissions
	Timeouts      uint64
	NAKs          uint64
	LostAgain     uint64 // retransmissions a later SACK showed lost
}

// SendWindow is the requester's side of selective repeat for one QP: PSNs from
// Una (oldest unacknowledged) to NextNew (next never sent), which of them the
// responder has acknowledged selectively, and which must be sent again.
//
// It keeps at most cap packets in flight (sent, neither acknowledged nor
// selectively acknowledged): IRN's BDP cap. Counting what the responder has
// already kept as delivered lets the sender go on while a loss is repaired
// (two round trips from the loss to the cumulative ACK), as IRN does. The
// span from Una to NextNew is bounded too, by Span (SpanFactor × cap): the
// responder's Tracker must keep that many PSNs beyond its expected one.
type SendWindow struct {
	una, next wire.PSN
	cap, span int
	nsacked   int
	sacked    psnSet // acknowledged selectively, in [una, next)
	retxDone  psnSet // retransmitted since the last timeout, in [una, next)
	queued    psnSet // in retx
	// retxAt[p mod len] is NextNew when p was last retransmitted: a SACK of a PSN
	// at or after it, with p still missing, means the retransmission was lost
	// too (the path keeps order), and p goes again without waiting for a timeout.
	retxAt []wire.PSN
	// retxProbe[p mod len] is the probe count (Probe) when p was last retransmitted.
	retxProbe []uint32
	probes    uint32
	retx      []wire.PSN
	// resent lists the PSNs retransmitted and not known delivered, for NAK's check
	// for lost retransmissions; scanExp and scanTo say that NAK has looked at every
	// PSN in [scanExp, scanTo) for the expected PSN scanExp, so that a run of SACKs
	// for one gap costs each PSN one look, not one per SACK.
	resent          []wire.PSN
	scanExp, scanTo wire.PSN
	stats           SendWindowStats
}

// SpanFactor is how many BDP caps a SendWindow's span may reach.
const SpanFactor = 4

// NewSendWindow returns a window whose first PSN is first, with at most cap
// packets in flight (at least 1).
func NewSendWindow(first wire.PSN, cap int) *SendWindow {
	cap = min(max(cap, 1), 1<<20)
	span := SpanFactor * cap
	w := &SendWindow{una: first & wire.PSNMask, next: first & wire.PSNMask, cap: cap, span: span,
		sacked: newPSNSet(span + 1), retxDone: newPSNSet(span + 1), queued: newPSNSet(span + 1)}
	w.retxAt = make([]wire.PSN, len(w.sacked.words)*64)
	w.retxProbe = make([]uint32, len(w.retxAt))
	return w
}

// Span is the most PSNs from Una to NextNew: the window a responder's Tracker
// must have.
func (w *SendWindow) Span() int { return w.span }

// InFlight is the number of packets sent and neither acknowledged nor
// selectively acknowledged.
func (w *SendWindow) InFlight() int { return w.Outstanding() - w.nsacked }

// Una is the oldest PSN not yet acknowledged.
func (w *SendWindow) Una() wire.PSN { return w.una }

// NextNew is the next PSN never sent.
func (w *SendWindow) NextNew() wire.PSN { return w.next }

// Outstanding is the number of PSNs sent and not cumulatively acknowledged.
func (w *SendWindow) Outstanding() int { return int(w.next.Diff(w.una)) }

// Stats returns the window's counters.
func (w *SendWindow) Stats() SendWindowStats { return w.stats }

// CanSend reports whether Next has a PSN to hand out.
func (w *SendWindow) CanSend() bool {
	return len(w.retx) > 0 || w.canSendNew()
}

func (w *SendWindow) canSendNew() bool {
	return w.InFlight() < w.cap && w.Outstanding() < w.span
}

// Next is the PSN to send now: a retransmission first, then a new PSN while
// fewer than cap are in flight. ok is false when there is nothing to send.
func (w *SendWindow) Next() (psn wire.PSN, ok bool) {
	if p, ok := w.Retransmission(); ok {
		return p, true
	}
	if !w.canSendNew() {
		return 0, false
	}
	p := w.next
	w.next = w.next.Add(1)
	w.stats.Sent++
	return p, true
}

// Retransmission is Next for a requester that numbers its new packets itself
// (the engine, which reports them with SentNew): the next PSN queued for
// retransmission, if any.
func (w *SendWindow) Retransmission() (psn wire.PSN, ok bool) {
	for len(w.retx) > 0 {
		p := w.retx[0]
		w.retx = w.retx[1:]
		if len(w.retx) == 0 {
			w.retx = w.retx[:0:0]
		}
		if !w.outstanding(p) || !w.queued.has(p) {
			continue // acknowledged meanwhile
		}
		w.queued.clear(p)
		if w.sacked.has(p) {
			continue
		}
		w.retxDone.set(p)
		w.retxAt[uint32(p)&w.sacked.mask] = w.next
		w.retxProbe[uint32(p)&w.sacked.mask] = w.probes
		w.resent = append(w.resent, p)
		w.stats.Sent++
		w.stats.Retransmitted++
		return p, true
	}
	return 0, false
}

// RetransmissionQueued reports whether Retransmission has a PSN to hand out.
func (w *SendWindow) RetransmissionQueued() bool { return len(w.retx) > 0 }

// SentNew records that a requester which numbers its packets itself sent psn
// for the first time: NextNew moves past it. A PSN before NextNew, or beyond
// the span, changes nothing.
func (w *SendWindow) SentNew(psn wire.PSN) {
	if d := psn.Diff(w.next); d >= 0 && int(psn.Diff(w.una)) < w.span {
		w.next = psn.Add(1)
		w.stats.Sent++
	}
}

// Restart forgets every selective acknowledgement and queued retransmission
// and makes [una, next) the outstanding PSNs: after the requester went back N
// (a timeout, an RNR NAK, a NAK without a selective acknowledgement), which
// resends all of them anyway. It allocates nothing.
func (w *SendWindow) Restart(una, next wire.PSN) {
	clear(w.sacked.words)
	clear(w.retxDone.words)
	clear(w.queued.words)
	w.retx = w.retx[:0]
	w.resent = w.resent[:0]
	w.scanExp, w.scanTo = 0, 0
	w.nsacked = 0
	w.una = una & wire.PSNMask
	w.next = w.una
	if d := next.Diff(w.una); d > 0 && int(d) <= w.span {
		w.next = next & wire.PSNMask
	}
}

// outstanding reports whether p is in [una, next).
func (w *SendWindow) outstanding(p wire.PSN) bool {
	d := p.Diff(w.una)
	return d >= 0 && d < w.next.Diff(w.una)
}

// ACK takes a cumulative acknowledgement: every PSN up to psn has arrived. An
// acknowledgement of nothing new, or of what was never sent, changes nothing.
func (w *SendWindow) ACK(psn wire.PSN) {
	w.advance(psn.Add(1))
}

// advance moves Una to una (when it lies within the window), forgetting the
// state of the PSNs it passes.
func (w *SendWindow) advance(una wire.PSN) {
	d := una.Diff(w.una)
	if d <= 0 || d > w.next.Diff(w.una) {
		return
	}
	for p := w.una; p != una; p = p.Add(1) {
		if w.sacked.has(p) {
			w.nsacked--
		}
		w.sacked.clear(p)
		w.retxDone.clear(p)
		w.queued.clear(p)
	}
	w.una = una
}

// NAK takes a PSN-sequence-error NAK: everything before expected has arrived,
// expected has not, and sacked (the PSN whose arrival revealed the gap) has.
// Every PSN from expected up to sacked that is neither acknowledged nor already
// retransmitted since the last timeout is queued for retransmission: in a
// network that keeps order (one path), those were lost. A NAK without a
// selective acknowledgement passes sacked = expected. A NAK naming PSNs
// outside the window is ignored beyond what it acknowledges.
func (w *SendWindow) NAK(expected, sacked wire.PSN) {
	w.NAKRun(expected, sacked, sacked)
}

// NAKRun is NAK for a selective acknowledgement of a run: every PSN from first
// to last has arrived (a responder that kept several packets in a row names
// them in one NAK). The PSNs before first are judged as NAK judges those
// before sacked; the part of the run outside the window is ignored.
func (w *SendWindow) NAKRun(expected, first, last wire.PSN) {
	w.stats.NAKs++
	w.advance(expected)
	if !w.outstanding(expected) {
		return
	}
	sacked := last
	if w.outstanding(last) && last != expected {
		if first.After(last) {
			first = last // a run turned round names its last PSN alone
		}
		if !first.After(expected) {
			first = expected.Add(1)
		}
		for p := first; ; p = p.Add(1) {
			if !w.sacked.has(p) {
				w.sacked.set(p)
				w.nsacked++
			}
			if p == last {
				break
			}
		}
	} else {
		first, sacked = expected.Add(1), expected.Add(1)
	}
	// Retransmissions sent before sacked that have not arrived were lost again.
	kept := w.resent[:0]
	for _, p := range w.resent {
		if !w.outstanding(p) || w.sacked.has(p) || !w.retxDone.has(p) {
			continue // delivered, or queued again already
		}
		if p.Before(sacked) && !sacked.Before(w.retxAt[uint32(p)&w.sacked.mask]) {
			w.retxDone.clear(p)
			w.stats.LostAgain++
			w.queue(p)
			continue
		}
		kept = append(kept, p)
	}
	w.resent = kept
	start := expected
	if w.scanExp == expected && w.outstanding(w.scanTo) && w.scanTo.After(expected) {
		start = w.scanTo
	}
	for p := start; p.Before(first); p = p.Add(1) {
		if !w.sacked.has(p) && !w.retxDone.has(p) {
			w.queue(p)
		}
	}
	if w.scanExp != expected || sacked.After(w.scanTo) {
		w.scanExp, w.scanTo = expected, sacked
	}
}

// queue puts p on the retransmission queue, once.
func (w *SendWindow) queue(p wire.PSN) {
	if !w.queued.has(p) {
		w.queued.set(p)
		w.retx = append(w.retx, p)
	}
}

// Probe is a tick of the requester's probe timer, which ticks while
// retransmissions are in flight (Resending). A retransmission that was in flight
// at the previous tick and has neither arrived (acknowledged, selectively or
// not) nor been queued again since is taken as lost and queued again: so a
// lost retransmission costs one to two ticks, where nothing sent after it
// would have shown the loss (the requester out of window or of work) and the
// local ACK timeout would have come instead. It reports whether it queued any.
func (w *SendWindow) Probe() bool {
	w.probes++
	queued := false
	kept := w.resent[:0]
	for _, p := range w.resent {
		if !w.outstanding(p) || w.sacked.has(p) || !w.retxDone.has(p) {
			continue // delivered, or queued again already
		}
		if w.probes-w.retxProbe[uint32(p)&w.sacked.mask] >= 2 {
			w.retxDone.clear(p)
			w.stats.LostAgain++
			w.queue(p)
			queued = true
			continue
		}
		kept = append(kept, p)
	}
	w.resent = kept
	return queued
}

// Resending reports whether retransmissions are in flight or queued: whether
// the requester's probe timer should tick.
func (w *SendWindow) Resending() bool { return len(w.resent) > 0 || len(w.retx) > 0 }

// Timeout is the retransmission timer's expiry: every outstanding PSN not
// selectively acknowledged is sent again.
func (w *SendWindow) Timeout() {
	w.stats.Timeouts++
	w.resent = w.resent[:0] // every retransmission is forgotten: what was not SACKed goes again
	for p := w.una; p != w.next; p = p.Add(1) {
		w.retxDone.clear(p)
		if !w.sacked.has(p) && !w.queued.has(p) {
			w.queued.set(p)
			w.retx = append(w.retx, p)
		}
	}
}

// BDPCap is IRN's cap on packets in flight: the path's bandwidth-delay product
// in packets of mtu bytes, rounded up, at least 1.
func BDPCap(bandwidth float64, rtt time.Duration, mtu int) int {
	if !(bandwidth > 0) || rtt <= 0 || mtu <= 0 {
		return 1
	}
	p := math.Ceil(bandwidth * rtt.Seconds() / 8 / float64(mtu))
	if p > 1<<22 {
		return 1 << 22
	}
	return max(1, int(p))
}

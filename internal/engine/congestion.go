// Congestion control (DCQCN; IBTA Annex A17.9, RoCEv2 congestion management): ECT(0) on
// requests and responses, a CNP for CE-marked packets (the notification point), a rate
// cut for a received CNP and the pacing of the requester to the QP's rate (the reaction
// point). The state machines are internal/congestion's; this file is their wiring. A
// device whose Config.Congestion is off gives its QPs no qpCC: the hot path then tests
// one nil pointer and nothing else changes.

package engine

import (
	"math"
	"time"

	"github.com/goverbs/goverbs/internal/congestion"
	"github.com/goverbs/goverbs/netio"
	"github.com/goverbs/goverbs/verbs/driver"
	"github.com/goverbs/goverbs/wire"
)

// qpCC is a QP's congestion-control state, under qp.mu.
type qpCC struct {
	rp *congestion.RP // the reaction point: this QP's requests' rate
	np congestion.NP  // the notification point: CNPs for CE-marked packets to this QP

	// Pacing: the budget of the requester's current batch, and the one timer that
	// resumes a requester which ran out of budget with work left.
	now      time.Time // when the current batch's budget was read
	budget   int       // bytes the batch may still send; the last packet may overdraw
	sent     int       // bytes the batch sent
	unpaced  bool      // the batch runs at line rate: not paced, not charged
	paceWait bool      // the requester waits for pace to fire
	pace     *time.Timer
}

// newQPCC returns a QP's congestion state, or nil when the device runs without.
func (d *Device) newQPCC() *qpCC {
	if !d.cc.Enabled {
		return nil
	}
	now := time.Now()
	return &qpCC{rp: congestion.NewRP(d.cc, now), np: congestion.NewNP(d.cc), now: now}
}

// ecnFor is the ECN codepoint a packet with opcode op leaves with: ECT(0) on RC and UC
// requests and responses when congestion control is on and the Conn carries ECN (Annex
// A17.9: the RoCEv2 sender marks its packets ECN-capable so that switches mark instead of
// dropping); Not-ECT on ACKs and CNPs, which carry no data and are not paced, and on UD,
// which has no reaction point (RFC 3168 §5: only a transport that reacts to CE may send
// ECT).
func (d *Device) ecnFor(op wire.Opcode) netio.ECN {
	if !d.ect || op == wire.RCAck {
		return netio.ECNNotECT
	}
	if t := op.Info().Transport; t != wire.TransportRC && t != wire.TransportUC {
		return netio.ECNNotECT
	}
	return netio.ECNECT0
}

// ceMarked handles a packet of qp's that arrived CE-marked and passed the QP's checks
// (qp.receive): the notification point (DCQCN; Annex A17.9.3) answers with a CNP to the
// peer's QP, at most one per QP per CNPInterval. It covers requests at the responder and
// READ responses at the requester alike: the CNP goes to the QP that sent them. qp.mu
// is held.
func (qp *QP) ceMarked(p *wire.Packet) {
	d := qp.dev
	d.counters.ECNCEReceived.Add(1)
	cc := qp.cc
	if cc == nil || qp.closed || qp.typ == driver.QPTypeUD || p.Op.Transport != transportOf[qp.typ] ||
		qp.state < driver.QPStateRTR || qp.state > driver.QPStateSQE {
		return
	}
	if !cc.np.CE(time.Now()) {
		d.counters.CNPSuppressed.Add(1)
		return
	}
	qp.sendCNP()
}

// sendCNP sends the peer's QP a CNP now (Annex A17.9.3: BTH opcode 0x81, the
// destination QP the sender of the marked packets, PSN 0, the BECN bit set as RNICs send
// it, 16 reserved bytes, the ICRC). It leaves at once, in a datagram of its own, ahead of
// anything queued: it is at most one per QP per CNPInterval, and a late one is worth less.
func (qp *QP) sendCNP() {
	h := wire.Headers{BTH: wire.BTHFields{Opcode: wire.CNP, PKey: 0xffff, DestQP: qp.attr.DestQPN, Resv8a: 0x40}}
	tx := qp.dev.getTx()
	qp.dev.emit(tx, qp.remote, qp.attr.AH.TrafficClass, &h, &payload{}, false)
	qp.dev.putTx(tx)
	qp.dev.counters.CNPSent.Add(1)
}

// inputCNP handles a CNP that passed the device's checks: the reaction point of the QP it
// names cuts that QP's rate. A CNP for no QP, or for a QP that sends nothing that could
// have been marked (UD), is a counted drop, never an error; a device running without
// congestion control counts it and carries on (rxe drops it as unknown).
func (d *Device) inputCNP(qp *QP) {
	d.counters.CNPReceived.Add(1)
	if qp == nil {
		d.counters.NoQP.Add(1)
		return
	}
	qp.mu.Lock()
	if cc := qp.cc; cc != nil && !qp.closed && qp.typ != driver.QPTypeUD {
		before := cc.rp.Stats().Cuts
		cc.rp.CNP(time.Now())
		d.counters.RateCuts.Add(cc.rp.Stats().Cuts - before)
	}
	qp.mu.Unlock()
}

// paceStart reads the batch's budget before the requester sends; false when there is
// none now (the pace timer is armed, or already waiting). qp.mu is held.
func (qp *QP) paceStart() bool {
	cc := qp.cc
	if cc.paceWait {
		return false
	}
	cc.now = time.Now()
	cuts := cc.rp.Stats().Cuts
	cc.rp.Advance(cc.now)
	qp.dev.counters.RateCuts.Add(cc.rp.Stats().Cuts - cuts) // a held cut applied late
	cc.sent = 0
	cc.unpaced = cc.rp.Phase() == congestion.PhaseLine
	if cc.unpaced {
		// At line rate (no CNP yet, or recovered) the QP is not paced: an RNIC's port
		// sends no faster than its line, and a software device's only limit is its host.
		// Paced here, a stream that nothing congests was held to what one timer wake-up
		// per burst allows, below the line rate on loopback.
		cc.budget = math.MaxInt
		return true
	}
	cc.budget = cc.rp.Budget(cc.now)
	if cc.budget <= 0 {
		qp.armPace()
		return false
	}
	return true
}

// paceSent charges a packet of n wire bytes to the batch's budget.
func (cc *qpCC) paceSent(n int) {
	cc.budget -= n
	cc.sent += n
}

// pacedAckReq reports whether a packet of n wire bytes, the last its batch's budget
// allows while the QP is throttled, asks for an ACK. The local ACK timer (IBTA 9.7.6.1.3)
// measures the responder's silence; a throttled requester that held the rest of a
// message back for the pacer would otherwise wait that long for the ACK of the message's
// last packet, and at a low rate time out with nothing lost. An ACK per paced burst keeps
// the timer measuring the network, at a cost only while congested.
func (qp *QP) pacedAckReq(n int) bool {
	cc := qp.cc
	if cc.budget > n || cc.rp.Phase() == congestion.PhaseLine {
		return false
	}
	qp.restartAckCount()
	return true
}

// paceEnd reports the batch's bytes to the reaction point and, when the budget ran out
// with work left, arms the pace timer. qp.mu is held.
func (qp *QP) paceEnd() {
	cc := qp.cc
	if cc.unpaced {
		cc.sent = 0 // not charged: a pacer in debt for unpaced bytes would stall the first cut
		return
	}
	cc.rp.Sent(cc.now, cc.sent)
	cc.sent = 0
	if cc.budget <= 0 && qp.sq.req != qp.sq.tail {
		qp.armPace()
	}
}

// armPace schedules the requester's resumption when its budget is positive again, or
// earlier at the reaction point's next event (a rate increase makes the wait shorter).
// One timer per QP, armed as the RNR timer is: no timer per packet. qp.mu is held.
func (qp *QP) armPace() {
	cc := qp.cc
	now := time.Now()
	at := cc.rp.NextSend(now)
	if dl := cc.rp.Deadline(); !dl.IsZero() && (at.IsZero() || dl.Before(at)) {
		at = dl
	}
	wait := at.Sub(now)
	if at.IsZero() || wait > time.Second {
		wait = time.Second // a debt beyond any clock (a hostile rate): look again later
	}
	cc.paceWait = true
	qp.dev.counters.PaceWaits.Add(1)
	if cc.pace == nil {
		cc.pace = time.AfterFunc(max(wait, 0), qp.onPaceTimer)
	} else {
		cc.pace.Reset(max(wait, 0))
	}
}

func (qp *QP) onPaceTimer() {
	qp.mu.Lock()
	defer qp.mu.Unlock()
	if qp.closed || qp.cc == nil || !qp.cc.paceWait {
		return
	}
	qp.cc.paceWait = false
	qp.runRequester()
}

// stopPace stops the pace timer (QP reset, error, close). qp.mu is held.
func (qp *QP) stopPace() {
	if cc := qp.cc; cc != nil {
		cc.paceWait = false
		if cc.pace != nil {
			cc.pace.Stop()
		}
	}
}

// rateMbps is the QP's current rate in Mb/s: its line rate when unthrottled, 0 without
// congestion control.
func (qp *QP) rateMbps() uint64 {
	qp.mu.Lock()
	defer qp.mu.Unlock()
	if qp.cc == nil || qp.closed {
		return 0
	}
	qp.cc.rp.Advance(time.Now())
	return uint64(qp.cc.rp.Rate() / 1e6)
}

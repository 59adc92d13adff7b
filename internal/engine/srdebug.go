package engine

import (
	"sync/atomic"

	"github.com/goverbs/goverbs/wire"
)

// TEMPORARY instrumentation (issue 31): where a selective-repeat requester waits.

const (
	srdRun = iota // can send (it stopped for another reason)
	srdEmpty
	srdCap
	srdCapHole
	srdSpan
	srdGBN
	srdN
)

var srdNames = [srdN]string{"other", "sq-empty", "cap", "cap+hole", "span", "gbn"}

type srDbg struct {
	state   int
	since   int64
	ns      [srdN]int64
	n       [srdN]int64
	retxQ   int64 // when a SACK queued the first resend
	retxLat int64
	retxN   int64
	holeNs  int64 // time with a SACKed PSN beyond Una
	holeOn  bool
	holeT   int64
	runs    int64
	capIF   int64 // sum of Outstanding at cap stops
	capSack int64 // sum of sacked at cap stops
	rttPSN  wire.PSN
	rttT    int64
	rttSum  int64
	rttN    int64
}

// srRTTSent samples a new PSN's send time.
func (qp *QP) srRTTSent(psn wire.PSN) {
	g := &qp.sr.dbg
	if g.rttT == 0 && uint32(psn)%32 == 0 {
		g.rttPSN, g.rttT = psn, nanotime()
	}
}

// srRTTAcked: every PSN before una has arrived, and first..last.
func (qp *QP) srRTTAcked(una, first, last wire.PSN) {
	g := &qp.sr.dbg
	if g.rttT == 0 {
		return
	}
	if g.rttPSN.Before(una) || !g.rttPSN.Before(first) && !g.rttPSN.After(last) {
		g.rttSum += nanotime() - g.rttT
		g.rttN++
		g.rttT = 0
	}
}

type devDbg struct {
	readNs, reads, readPkts  atomic.Int64
	polls, pollPkts, pollOne atomic.Int64
	procNs, procs            atomic.Int64
}

func (qp *QP) srNote() {
	sr := qp.sr
	if sr == nil || sr.sw == nil {
		return
	}
	now := nanotime()
	g := &sr.dbg
	sw := sr.sw
	st := srdRun
	out := qp.req.psn.Diff(qp.comp.psn)
	win := qp.window()
	switch {
	case qp.sq.req == qp.sq.tail && !sw.RetransmissionQueued():
		st = srdEmpty
	case qp.req.psn.Before(qp.req.high) && out >= win:
		st = srdGBN
	case out >= srSpan*win:
		st = srdSpan
	case sw.InFlight() >= int(win):
		st = srdCap
		if sw.Outstanding() > sw.InFlight() {
			st = srdCapHole
		}
		g.capIF += int64(sw.Outstanding())
		g.capSack += int64(sw.Outstanding() - sw.InFlight())
	}
	if g.since != 0 {
		g.ns[g.state] += now - g.since
	}
	g.n[st]++
	g.state, g.since = st, now
	g.runs++
	hole := sw.Outstanding() > sw.InFlight()
	if hole != g.holeOn {
		if g.holeOn {
			g.holeNs += now - g.holeT
		}
		g.holeOn, g.holeT = hole, now
	}
}

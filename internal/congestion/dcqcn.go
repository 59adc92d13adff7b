package congestion

import (
	"math"
	"time"
)

// Phase is where a reaction point's rate stands.
type Phase uint8

// Phases of the RP (DCQCN paper, after QCN's reaction point).
const (
	// PhaseLine: unthrottled, at line rate; no timer runs. A QP starts here
	// and returns here when its rate has climbed back to line rate.
	PhaseLine Phase = iota
	// PhaseFastRecovery: the first F increase events after a cut, each
	// halving the distance to the target rate (Rc ← (Rt+Rc)/2).
	PhaseFastRecovery
	// PhaseAdditive: the target rate grows by RateAI per increase event.
	PhaseAdditive
	// PhaseHyper: the target rate grows by RateHAI per increase event.
	PhaseHyper
)

func (p Phase) String() string {
	switch p {
	case PhaseLine:
		return "line-rate"
	case PhaseFastRecovery:
		return "fast-recovery"
	case PhaseAdditive:
		return "additive-increase"
	case PhaseHyper:
		return "hyper-increase"
	}
	return "Phase(?)"
}

// RPStats counts what a reaction point did.
type RPStats struct {
	CNPs           uint64 // CNPs received (counted also when disabled)
	Cuts           uint64 // rate decreases
	FastRecoveries uint64 // increase events in fast recovery
	Additive       uint64 // additive increase events
	Hyper          uint64 // hyper increase events
	Bytes          uint64 // bytes reported sent
}

// RP is DCQCN's reaction point for one QP: the current rate Rc, the target
// rate Rt, the congestion estimate α, the increase timer and byte counter,
// and the pacer that holds the QP's packets to Rc.
//
//	CNP (at most one cut per DecreaseInterval):
//	    Rt ← Rc;  Rc ← max(MinRate, Rc·(1 − α/2));  α ← (1 − g)·α + g
//	    timer, byte counter and both stage counts restart
//	every AlphaInterval without a CNP:  α ← (1 − g)·α
//	increase event (every IncreaseInterval, every ByteCounter bytes):
//	    fast recovery (first F events):  Rc ← (Rt + Rc)/2
//	    additive:   Rt ← min(LineRate, Rt + RateAI);   Rc ← (Rt + Rc)/2
//	    hyper:      Rt ← min(LineRate, Rt + RateHAI);  Rc ← (Rt + Rc)/2
//
// α is 1 when the first CNP arrives, so the first CNP halves the rate (DCQCN
// paper; ConnectX's initial_alpha_value 1023/1024). α's decay is kept
// lazily: it is brought up to date whenever the RP is used, so it costs no
// deadline.
//
// The zero RP is not usable; make one with NewRP. An RP is not safe for
// concurrent use: it belongs to its QP's send path.
type RP struct {
	cfg Config

	rc, rt, alpha float64
	active        bool      // throttled: the increase timer runs
	cutSeen       bool      // a cut has happened (α's timer runs)
	alphaAt       time.Time // when α was last updated
	lastCut       time.Time
	cutPending    bool      // a CNP arrived within DecreaseInterval of the last cut
	timerAt       time.Time // the increase timer's next expiry, when active
	timerStage    int       // increase-timer events since the last cut
	byteStage     int       // byte-counter events since the last cut
	bytes         int64     // bytes since the last byte-counter event
	pacer         Pacer
	stats         RPStats
}

// NewRP returns the reaction point of a QP created at now, at line rate. cfg
// should pass Validate; an enabled Config that does not is run as disabled,
// never trusted.
func NewRP(cfg Config, now time.Time) *RP {
	if cfg.Validate() != nil {
		cfg.Enabled = false
	}
	r := &RP{cfg: cfg, rc: cfg.LineRate, rt: cfg.LineRate, alpha: 1, alphaAt: now}
	r.pacer = NewPacer(cfg.LineRate, cfg.Burst, now)
	return r
}

// Enabled reports whether the RP limits its QP.
func (r *RP) Enabled() bool { return r.cfg.Enabled }

// Rate is the current rate Rc in bits per second (0 when disabled: no limit).
func (r *RP) Rate() float64 {
	if !r.cfg.Enabled {
		return 0
	}
	return r.rc
}

// Target is the target rate Rt in bits per second.
func (r *RP) Target() float64 { return r.rt }

// Alpha is the congestion estimate α as of the last call that took a time.
func (r *RP) Alpha() float64 { return r.alpha }

// Phase is where the rate stands.
func (r *RP) Phase() Phase {
	if !r.active {
		return PhaseLine
	}
	return r.phase()
}

// Stats returns the RP's counters.
func (r *RP) Stats() RPStats { return r.stats }

// phase is the increase phase the next increase event is in, from the stage
// counts so far. With the byte counter (DCQCN, after QCN): fast recovery while
// both counts are below F, hyper increase once both have reached it, additive
// in between. With the timer alone (ConnectX, as the HPCC simulator models it):
// fast recovery for F events, one additive event, then hyper.
func (r *RP) phase() Phase {
	f := r.cfg.F
	if r.cfg.ByteCounter <= 0 {
		switch {
		case r.timerStage < f:
			return PhaseFastRecovery
		case r.timerStage == f:
			return PhaseAdditive
		}
		return PhaseHyper
	}
	hi, lo := max(r.timerStage, r.byteStage), min(r.timerStage, r.byteStage)
	switch {
	case hi < f:
		return PhaseFastRecovery
	case lo >= f:
		return PhaseHyper
	}
	return PhaseAdditive
}

// CNP handles a congestion notification for the QP at now: it cuts the rate,
// or, within DecreaseInterval of the last cut, holds the cut until then.
func (r *RP) CNP(now time.Time) {
	r.stats.CNPs++
	if !r.cfg.Enabled {
		return
	}
	r.Advance(now)
	if r.cutSeen && r.cfg.DecreaseInterval > 0 && now.Before(r.lastCut.Add(r.cfg.DecreaseInterval)) {
		r.cutPending = true
		return
	}
	r.cut(now)
}

// cut is the rate decrease at t.
func (r *RP) cut(t time.Time) {
	r.decayAlpha(t)
	r.rt = r.rc
	r.rc = max(r.cfg.MinRate, r.rc*(1-r.alpha/2))
	r.alpha = (1-r.cfg.G)*r.alpha + r.cfg.G
	r.alphaAt = t
	r.cutSeen, r.cutPending, r.lastCut = true, false, t
	r.active = true
	r.timerAt = t.Add(r.cfg.IncreaseInterval)
	r.timerStage, r.byteStage, r.bytes = 0, 0, 0
	r.pacer.SetRate(t, r.rc)
	r.stats.Cuts++
}

// decayAlpha applies α ← (1−g)·α once for every whole AlphaInterval since α
// was last updated. α's timer starts with the first cut.
func (r *RP) decayAlpha(t time.Time) {
	if !r.cutSeen || !t.After(r.alphaAt) {
		return
	}
	k := int64(t.Sub(r.alphaAt) / r.cfg.AlphaInterval)
	if k <= 0 {
		return
	}
	if k == 1 {
		r.alpha *= 1 - r.cfg.G
	} else {
		r.alpha *= math.Pow(1-r.cfg.G, float64(k))
	}
	r.alphaAt = r.alphaAt.Add(time.Duration(k) * r.cfg.AlphaInterval)
}

// maxEvents bounds the timer events one Advance carries out, so that a clock
// that jumps far ahead costs bounded work: the rate is back at line speed long
// before (at most F + (LineRate − MinRate)/RateAI events).
const maxEvents = 1 << 16

// Advance carries out, in time order, everything due by now: a held cut and
// the increase timer's expiries. The device calls it at Deadline; every other
// method that takes now calls it first.
func (r *RP) Advance(now time.Time) {
	if !r.cfg.Enabled {
		return
	}
	for i := 0; i < maxEvents; i++ {
		cutAt := r.lastCut.Add(r.cfg.DecreaseInterval)
		switch {
		case r.cutPending && !cutAt.After(now) && (!r.active || !r.timerAt.Before(cutAt)):
			r.cut(cutAt)
		case r.active && !r.timerAt.After(now):
			t := r.timerAt
			r.timerAt = t.Add(r.cfg.IncreaseInterval)
			r.increase(t, true)
		default:
			r.decayAlpha(now)
			return
		}
	}
	// Too far behind: skip the remaining expiries.
	if r.active && !r.timerAt.After(now) {
		r.timerAt = now.Add(r.cfg.IncreaseInterval)
	}
	r.decayAlpha(now)
}

// increase is one increase event at t, of the timer (byTimer) or of the byte
// counter.
func (r *RP) increase(t time.Time, byTimer bool) {
	r.decayAlpha(t)
	switch r.phase() {
	case PhaseFastRecovery:
		r.stats.FastRecoveries++
	case PhaseAdditive:
		r.rt = min(r.cfg.LineRate, r.rt+r.cfg.RateAI)
		r.stats.Additive++
	default:
		r.rt = min(r.cfg.LineRate, r.rt+r.cfg.RateHAI)
		r.stats.Hyper++
	}
	r.rc = (r.rt + r.rc) / 2
	if byTimer {
		r.timerStage++
	} else {
		r.byteStage++
	}
	// Back at line rate (within a ten-thousandth): unthrottled again, no
	// timer, until the next CNP.
	if r.rt >= r.cfg.LineRate && r.cfg.LineRate-r.rc <= r.cfg.LineRate*1e-4 {
		r.rc, r.rt, r.active = r.cfg.LineRate, r.cfg.LineRate, false
		r.timerStage, r.byteStage, r.bytes = 0, 0, 0
	}
	r.pacer.SetRate(t, r.rc)
}

// Deadline is when the RP next needs Advance (a held cut, the increase
// timer), or the zero Time when nothing is due. Pacing is not a deadline: a
// send path that has run out of budget asks NextSend.
func (r *RP) Deadline() time.Time {
	if !r.cfg.Enabled {
		return time.Time{}
	}
	var d time.Time
	if r.active {
		d = r.timerAt
	}
	if r.cutPending {
		if c := r.lastCut.Add(r.cfg.DecreaseInterval); d.IsZero() || c.Before(d) {
			d = c
		}
	}
	return d
}

// Budget is how many bytes the QP may send now: it may send packets while the
// budget is positive (the last one may overdraw it; the pacer carries the
// debt). Unlimited (math.MaxInt) when disabled.
func (r *RP) Budget(now time.Time) int {
	if !r.cfg.Enabled {
		return math.MaxInt
	}
	r.Advance(now)
	return r.pacer.Budget(now)
}

// NextSend is the earliest time the budget is positive again at the current
// rate: now if it is already; the zero Time if never (a debt beyond any
// clock). A rate increase before then makes it earlier: a send path that
// sleeps should wake at the earlier of NextSend and Deadline.
func (r *RP) NextSend(now time.Time) time.Time {
	if !r.cfg.Enabled {
		return now
	}
	r.Advance(now)
	return r.pacer.Next(now)
}

// Sent reports n bytes sent at now: it charges the pacer and feeds the byte
// counter.
func (r *RP) Sent(now time.Time, n int) {
	if n <= 0 {
		return
	}
	r.stats.Bytes += uint64(n)
	if !r.cfg.Enabled {
		return
	}
	r.Advance(now)
	r.pacer.Charge(n)
	if !r.active || r.cfg.ByteCounter <= 0 {
		return
	}
	r.bytes += int64(n)
	for i := 0; r.active && r.bytes >= r.cfg.ByteCounter; i++ {
		if i == 64 { // a hostile n: do not loop for it
			r.bytes = 0
			break
		}
		r.bytes -= r.cfg.ByteCounter
		r.increase(now, false)
	}
}

// NP is DCQCN's notification point for one QP: the receiver that saw
// CE-marked packets asks, for each, whether to send a CNP now. It sends at
// most one per CNPInterval (DCQCN paper).
type NP struct {
	interval time.Duration
	enabled  bool
	last     time.Time
	sent     bool
	stats    NPStats
}

// NPStats counts a notification point's work.
type NPStats struct {
	CE         uint64 // CE-marked packets seen
	CNPs       uint64 // CNPs asked for
	Suppressed uint64 // CE packets that asked for none: within CNPInterval of the last CNP
}

// NewNP returns a QP's notification point.
func NewNP(cfg Config) NP {
	return NP{interval: cfg.CNPInterval, enabled: cfg.Enabled && cfg.Validate() == nil}
}

// CE reports a CE-marked packet for the QP at now, and whether the device
// should send the requester a CNP now.
func (n *NP) CE(now time.Time) bool {
	n.stats.CE++
	if !n.enabled {
		return false
	}
	if n.sent && now.Sub(n.last) < n.interval {
		n.stats.Suppressed++
		return false
	}
	n.last, n.sent = now, true
	n.stats.CNPs++
	return true
}

// Stats returns the NP's counters.
func (n *NP) Stats() NPStats { return n.stats }

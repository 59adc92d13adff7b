package congestion

import (
	"math"
	"time"
)

// Pacer holds a sender to a rate without a timer per packet: a token bucket
// of credit in bytes that fills at the rate, up to a burst. The send path
// asks for its Budget once per batch, sends packets while it lasts (the last
// may overdraw it: the debt is paid from the next credit), reports what it
// sent with Charge, and when the budget is gone sleeps until Next. Over any
// interval it sends at most rate × interval + burst + one packet.
type Pacer struct {
	rate   float64 // bits per second
	burst  float64 // bytes
	credit float64 // bytes; negative is debt
	at     time.Time
}

// NewPacer returns a pacer at rate bits per second with a full bucket of
// burst bytes at now.
func NewPacer(rate float64, burst int, now time.Time) Pacer {
	return Pacer{rate: max(rate, 0), burst: float64(max(burst, 1)), credit: float64(max(burst, 1)), at: now}
}

// Rate is the pacer's rate in bits per second.
func (p *Pacer) Rate() float64 { return p.rate }

// fill adds the credit earned since the last call, at the rate in force.
func (p *Pacer) fill(now time.Time) {
	if !now.After(p.at) {
		return
	}
	p.credit = min(p.burst, p.credit+p.rate*now.Sub(p.at).Seconds()/8)
	p.at = now
}

// SetRate changes the rate at now: credit earned until now counts at the old
// rate.
func (p *Pacer) SetRate(now time.Time, rate float64) {
	p.fill(now)
	p.rate = max(rate, 0)
}

// Budget is how many bytes may be sent now (0 while the pacer is in debt).
func (p *Pacer) Budget(now time.Time) int {
	p.fill(now)
	if p.credit <= 0 {
		return 0
	}
	return int(math.Ceil(p.credit))
}

// Charge takes n bytes sent from the credit.
func (p *Pacer) Charge(n int) {
	if n > 0 {
		p.credit -= float64(n)
	}
}

// Next is the earliest time Budget is positive: now if it already is, the
// zero Time if it never will be (rate 0).
func (p *Pacer) Next(now time.Time) time.Time {
	p.fill(now)
	if p.credit > 0 {
		return now
	}
	if p.rate <= 0 {
		return time.Time{}
	}
	ns := math.Ceil(-p.credit * 8 / p.rate * 1e9)
	if ns > float64(math.MaxInt64/2) {
		return time.Time{}
	}
	return p.at.Add(time.Duration(ns) + 1) // one more nanosecond: credit strictly positive
}

package congestion

import (
	"math"
	"math/rand/v2"
	"testing"
	"time"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

const (
	us      = time.Microsecond
	line10G = 10e9
)

// near reports whether got is within a relative 1e-12 of want: the formulas
// are checked to the last few bits, allowing math.Pow its rounding.
func near(got, want float64) bool {
	return math.Abs(got-want) <= 1e-12*math.Max(math.Abs(want), 1)
}

func checkRates(t *testing.T, r *RP, step string, rc, rt, alpha float64) {
	t.Helper()
	if !near(r.Rate(), rc) || !near(r.Target(), rt) || !near(r.Alpha(), alpha) {
		t.Errorf("%s: Rc %.6g Rt %.6g α %.12g, want Rc %.6g Rt %.6g α %.12g", step, r.Rate(), r.Target(), r.Alpha(), rc, rt, alpha)
	}
}

// TestFirstCNPHalves: α starts at 1, so the first CNP halves the rate, makes the
// old rate the target, and leaves α at (1−g)·1 + g = 1.
func TestFirstCNPHalves(t *testing.T) {
	cfg := PaperConfig(line10G)
	r := NewRP(cfg, t0)
	if r.Phase() != PhaseLine || !r.Deadline().IsZero() {
		t.Fatalf("new RP: phase %v, deadline %v", r.Phase(), r.Deadline())
	}
	r.CNP(t0.Add(time.Millisecond)) // a QP that ran a while at line rate: α has not decayed
	checkRates(t, r, "first CNP", 5e9, 10e9, 1)
	if r.Phase() != PhaseFastRecovery || !r.Deadline().Equal(t0.Add(time.Millisecond+cfg.IncreaseInterval)) {
		t.Errorf("after the cut: phase %v, deadline %v", r.Phase(), r.Deadline())
	}
	if s := r.Stats(); s.CNPs != 1 || s.Cuts != 1 {
		t.Errorf("stats %+v", s)
	}
}

// TestCutFormula: a later cut uses α as decayed by then: Rt ← Rc, Rc ← Rc(1−α/2),
// then α ← (1−g)α + g.
func TestCutFormula(t *testing.T) {
	cfg := PaperConfig(line10G)
	cfg.IncreaseInterval = time.Hour // no increase between the cuts
	g := cfg.G
	r := NewRP(cfg, t0)
	r.CNP(t0)
	// 120 µs later: two α periods (55 µs) have passed without a CNP.
	r.CNP(t0.Add(120 * us))
	a := 1 * (1 - g) * (1 - g)
	rc := 5e9 * (1 - a/2)
	checkRates(t, r, "second CNP", rc, 5e9, (1-g)*a+g)
}

// TestAlphaDecay: every AlphaInterval without a CNP multiplies α by (1−g), step by
// step, and a partial period does nothing.
func TestAlphaDecay(t *testing.T) {
	cfg := PaperConfig(line10G)
	cfg.G = 1.0 / 16 // large enough to see each step plainly
	r := NewRP(cfg, t0)
	r.CNP(t0)
	want := 1.0
	for k := 1; k <= 6; k++ {
		r.Advance(t0.Add(time.Duration(k)*cfg.AlphaInterval - 1))
		if !near(r.Alpha(), want) {
			t.Fatalf("just before period %d: α %.15g, want %.15g", k, r.Alpha(), want)
		}
		want *= 1 - cfg.G
		r.Advance(t0.Add(time.Duration(k) * cfg.AlphaInterval))
		if !near(r.Alpha(), want) {
			t.Fatalf("period %d: α %.15g, want %.15g", k, r.Alpha(), want)
		}
	}
	// Many periods at once (a QP idle for a while) give the same as one by one.
	r.Advance(t0.Add(100 * cfg.AlphaInterval))
	if w := math.Pow(1-cfg.G, 100); !near(r.Alpha(), w) {
		t.Errorf("after 100 periods α %.15g, want %.15g", r.Alpha(), w)
	}
}

// twoCuts brings an RP to Rt = 5 Gb/s, Rc = 2.5 Gb/s (two CNPs 10 µs apart: α is
// still 1), so that increases have room below line rate.
func twoCuts(t *testing.T, cfg Config) *RP {
	t.Helper()
	r := NewRP(cfg, t0)
	r.CNP(t0)
	r.CNP(t0.Add(10 * us))
	checkRates(t, r, "two cuts", 2.5e9, 5e9, 1)
	return r
}

// TestFastRecoveryThenIncrease: the timer alone (ConnectX's way): F fast-recovery
// steps Rc ← (Rt+Rc)/2, one additive step Rt += R_AI, then hyper steps Rt += R_HAI,
// each with Rc ← (Rt+Rc)/2.
func TestFastRecoveryThenIncrease(t *testing.T) {
	cfg := PaperConfig(line10G)
	cfg.ByteCounter = 0
	r := twoCuts(t, cfg)
	cut := t0.Add(10 * us)
	rc, rt := 2.5e9, 5e9
	step := func(k int, phase Phase) {
		t.Helper()
		if r.Phase() != phase {
			t.Fatalf("event %d: phase %v, want %v", k, r.Phase(), phase)
		}
		at := cut.Add(time.Duration(k) * cfg.IncreaseInterval)
		if d := r.Deadline(); !d.Equal(at) {
			t.Fatalf("event %d: deadline %v, want %v", k, d.Sub(t0), at.Sub(t0))
		}
		r.Advance(at)
		switch phase {
		case PhaseAdditive:
			rt += cfg.RateAI
		case PhaseHyper:
			rt += cfg.RateHAI
		}
		rc = (rt + rc) / 2
		a := math.Pow(1-cfg.G, float64(int64(at.Sub(cut)/cfg.AlphaInterval)))
		checkRates(t, r, phase.String(), rc, rt, a)
	}
	for k := 1; k <= cfg.F; k++ {
		step(k, PhaseFastRecovery)
	}
	step(cfg.F+1, PhaseAdditive)
	step(cfg.F+2, PhaseHyper)
	step(cfg.F+3, PhaseHyper)
	if s := r.Stats(); s.FastRecoveries != uint64(cfg.F) || s.Additive != 1 || s.Hyper != 2 {
		t.Errorf("stats %+v", s)
	}
}

// TestByteCounter: with the byte counter (the DCQCN paper's way) additive increase
// lasts while only one of timer and byte counter has reached F, and hyper increase
// starts when both have; bytes drive events as the timer does.
func TestByteCounter(t *testing.T) {
	cfg := PaperConfig(line10G)
	cfg.ByteCounter = 1 << 20
	r := twoCuts(t, cfg)
	now := t0.Add(10 * us)
	rc, rt := 2.5e9, 5e9
	// F byte-counter events: fast recovery.
	for k := 1; k <= cfg.F; k++ {
		now = now.Add(us)
		r.Sent(now, 1<<20)
		rc = (rt + rc) / 2
		checkRates(t, r, "byte fast recovery", rc, rt, 1)
	}
	// Byte stage at F, timer stage 0: additive.
	if r.Phase() != PhaseAdditive {
		t.Fatalf("phase %v, want additive", r.Phase())
	}
	now = now.Add(us)
	r.Sent(now, 1<<20)
	rt += cfg.RateAI
	rc = (rt + rc) / 2
	checkRates(t, r, "byte additive", rc, rt, 1)
	// F timer events: still additive until the timer's count reaches F too.
	cut := t0.Add(10 * us)
	for k := 1; k <= cfg.F; k++ {
		at := cut.Add(time.Duration(k) * cfg.IncreaseInterval)
		r.Advance(at)
		rt += cfg.RateAI
		rc = (rt + rc) / 2
		a := math.Pow(1-cfg.G, float64(int64(at.Sub(cut)/cfg.AlphaInterval)))
		checkRates(t, r, "timer additive", rc, rt, a)
	}
	if r.Phase() != PhaseHyper {
		t.Fatalf("phase %v, want hyper", r.Phase())
	}
	// A send smaller than the counter is no event.
	at := cut.Add(time.Duration(cfg.F) * cfg.IncreaseInterval)
	r.Sent(at, 1000)
	checkRates(t, r, "partial", rc, rt, r.Alpha())
}

// TestFloor: cuts stop at MinRate.
func TestFloor(t *testing.T) {
	cfg := PaperConfig(line10G)
	r := NewRP(cfg, t0)
	now := t0
	for i := 0; i < 40; i++ {
		r.CNP(now)
		now = now.Add(50 * us)
		if r.Rate() < cfg.MinRate {
			t.Fatalf("cut %d: Rc %.6g below the floor", i, r.Rate())
		}
	}
	if r.Rate() != cfg.MinRate {
		t.Errorf("after 40 cuts Rc %.6g, want the floor %.6g", r.Rate(), cfg.MinRate)
	}
}

// TestBackToLineRate: with no more CNPs the rate climbs back to line rate, never
// past it, and the RP goes quiet (no deadline).
func TestBackToLineRate(t *testing.T) {
	cfg := PaperConfig(line10G)
	r := NewRP(cfg, t0)
	r.CNP(t0)
	now := t0
	for i := 0; i < 10000 && !r.Deadline().IsZero(); i++ {
		now = r.Deadline()
		r.Advance(now)
		if r.Target() > cfg.LineRate || r.Rate() > r.Target() {
			t.Fatalf("Rc %.6g Rt %.6g above line rate", r.Rate(), r.Target())
		}
	}
	if r.Phase() != PhaseLine || r.Rate() != cfg.LineRate || !r.Deadline().IsZero() {
		t.Fatalf("phase %v, Rc %.6g, deadline %v", r.Phase(), r.Rate(), r.Deadline())
	}
	t.Logf("back to line rate %v after the cut", now.Sub(t0))
}

// TestDecreaseInterval: a CNP within DecreaseInterval of a cut is held until the
// interval ends; more CNPs in between make one cut.
func TestDecreaseInterval(t *testing.T) {
	cfg := PaperConfig(line10G)
	r := NewRP(cfg, t0)
	r.CNP(t0)
	r.CNP(t0.Add(1 * us))
	r.CNP(t0.Add(2 * us))
	if r.Stats().Cuts != 1 || r.Rate() != 5e9 {
		t.Fatalf("cuts %d, Rc %.6g", r.Stats().Cuts, r.Rate())
	}
	if d := r.Deadline(); !d.Equal(t0.Add(cfg.DecreaseInterval)) {
		t.Fatalf("deadline %v, want the end of the interval", d.Sub(t0))
	}
	r.Advance(t0.Add(cfg.DecreaseInterval))
	checkRates(t, r, "held cut", 2.5e9, 5e9, 1)
	if r.Stats().Cuts != 2 || r.Stats().CNPs != 3 {
		t.Errorf("stats %+v", r.Stats())
	}
}

// TestDisabled: off, the RP never limits and never cuts, though it counts CNPs,
// and the NP never asks for a CNP.
func TestDisabled(t *testing.T) {
	var cfg Config
	r := NewRP(cfg, t0)
	r.CNP(t0)
	r.Sent(t0, 1<<30)
	if r.Budget(t0) != math.MaxInt || !r.NextSend(t0).Equal(t0) || !r.Deadline().IsZero() || r.Stats().Cuts != 0 || r.Stats().CNPs != 1 {
		t.Errorf("disabled RP limits: budget %d, stats %+v", r.Budget(t0), r.Stats())
	}
	np := NewNP(cfg)
	if np.CE(t0) || np.Stats().CE != 1 {
		t.Error("disabled NP asked for a CNP")
	}
}

// TestHostileConfig: a Config that cannot run is refused by Validate and run as
// disabled by NewRP, never trusted.
func TestHostileConfig(t *testing.T) {
	for _, mod := range []func(*Config){
		func(c *Config) { c.LineRate = math.NaN() },
		func(c *Config) { c.LineRate = -1 },
		func(c *Config) { c.MinRate = 2 * c.LineRate },
		func(c *Config) { c.G = 0 },
		func(c *Config) { c.G = math.Inf(1) },
		func(c *Config) { c.AlphaInterval = 0 },
		func(c *Config) { c.IncreaseInterval = -1 },
		func(c *Config) { c.RateAI = 0 },
		func(c *Config) { c.RateHAI = c.RateAI / 2 },
		func(c *Config) { c.Burst = 0 },
		func(c *Config) { c.F = -1 },
	} {
		cfg := PaperConfig(line10G)
		mod(&cfg)
		if cfg.Validate() == nil {
			t.Errorf("%+v validated", cfg)
		}
		r := NewRP(cfg, t0)
		r.CNP(t0)
		r.Advance(t0.Add(time.Hour))
		if r.Enabled() || r.Budget(t0) != math.MaxInt {
			t.Errorf("%+v: RP enabled", cfg)
		}
	}
}

// TestInvariants drives RPs with seeded random CNPs, sends and clock jumps:
// MinRate ≤ Rc ≤ Rt ≤ LineRate and 0 ≤ α ≤ 1 always hold.
func TestInvariants(t *testing.T) {
	rng := rand.New(rand.NewPCG(31, 31))
	for _, bc := range []int64{0, 10 << 20, 64 << 10} {
		cfg := PaperConfig(line10G)
		cfg.ByteCounter = bc
		r := NewRP(cfg, t0)
		now := t0
		for i := 0; i < 20000; i++ {
			now = now.Add(time.Duration(rng.ExpFloat64() * float64(20*us)))
			switch rng.IntN(4) {
			case 0:
				r.CNP(now)
			case 1:
				r.Sent(now, rng.IntN(1<<20))
			case 2:
				if d := r.Deadline(); !d.IsZero() {
					now = d
				}
				r.Advance(now)
			default:
				_ = r.Budget(now)
			}
			if !(cfg.MinRate <= r.Rate() && r.Rate() <= r.Target() && r.Target() <= cfg.LineRate) || !(r.Alpha() >= 0 && r.Alpha() <= 1) {
				t.Fatalf("step %d: Rc %.6g Rt %.6g α %g", i, r.Rate(), r.Target(), r.Alpha())
			}
		}
	}
}

// TestNPPacing: at most one CNP per QP per CNPInterval.
func TestNPPacing(t *testing.T) {
	cfg := PaperConfig(line10G)
	np := NewNP(cfg)
	for _, c := range []struct {
		at   time.Duration
		want bool
	}{{0, true}, {10 * us, false}, {49 * us, false}, {50 * us, true}, {99 * us, false}, {120 * us, true}} {
		if got := np.CE(t0.Add(c.at)); got != c.want {
			t.Errorf("CE at %v: CNP %v, want %v", c.at, got, c.want)
		}
	}
	if s := np.Stats(); s.CE != 6 || s.CNPs != 3 || s.Suppressed != 3 {
		t.Errorf("stats %+v", s)
	}
}

// TestPacer: the budget starts at the burst, a send may overdraw it, the debt is
// paid at the rate, and a long run keeps to rate × time + burst.
func TestPacer(t *testing.T) {
	p := NewPacer(1e9, 16<<10, t0)
	if b := p.Budget(t0); b != 16<<10 {
		t.Fatalf("budget %d, want the burst", b)
	}
	p.Charge(16<<10 + 4096)
	if b := p.Budget(t0); b != 0 {
		t.Fatalf("in debt, budget %d", b)
	}
	next := p.Next(t0)
	want := t0.Add(32768*time.Nanosecond + 1) // 4096 bytes at 1 Gb/s, and a nanosecond more
	if !next.Equal(want) {
		t.Fatalf("Next %v, want %v", next.Sub(t0), want.Sub(t0))
	}
	if b := p.Budget(next); b != 1 {
		t.Errorf("budget at Next %d, want 1", b)
	}
	// A sender that sends 4096-byte packets whenever allowed, for 10 ms.
	p = NewPacer(1e9, 16<<10, t0)
	now, sent := t0, 0
	end := t0.Add(10 * time.Millisecond)
	for now.Before(end) {
		for p.Budget(now) > 0 {
			p.Charge(4096)
			sent += 4096
		}
		now = p.Next(now)
	}
	limit := 1e9*0.01/8 + 16<<10 + 4096
	if float64(sent) > limit || float64(sent) < 1e9*0.01/8 {
		t.Errorf("sent %d bytes in 10 ms at 1 Gb/s (limit %.0f)", sent, limit)
	}
	// Halving the rate halves the refill from then on.
	p = NewPacer(1e9, 1<<20, t0)
	p.Charge(1 << 20)
	p.SetRate(t0.Add(time.Millisecond), 0.5e9) // 125000 bytes earned at 1 Gb/s
	if b := p.Budget(t0.Add(2 * time.Millisecond)); b != 125000+62500 {
		t.Errorf("budget %d after a rate change", b)
	}
}

// TestRPPaces: an RP's budget follows its rate: after the first CNP a QP sending
// as fast as allowed gets half the line rate.
func TestRPPaces(t *testing.T) {
	cfg := PaperConfig(line10G)
	cfg.IncreaseInterval = time.Hour // hold the rate still
	r := NewRP(cfg, t0)
	r.CNP(t0)
	now, sent := t0, 0
	end := t0.Add(time.Millisecond)
	for now.Before(end) {
		for r.Budget(now) > 0 {
			r.Sent(now, 4096)
			sent += 4096
		}
		now = r.NextSend(now)
	}
	got := float64(sent-cfg.Burst) * 8 / 1e-3
	if got < 4.9e9 || got > 5.1e9 {
		t.Errorf("paced at %.3g b/s, want 5e9", got)
	}
}

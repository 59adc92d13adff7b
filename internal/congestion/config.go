// Package congestion is RoCEv2 congestion control for the software device,
// written without I/O: DCQCN's reaction point (RP, the sender's rate per QP)
// with its pacer, and its notification point (NP, the receiver's CNP pacing).
// It is also the home of the selective-repeat bookkeeping IRN adds to RC
// (see Tracker and SendWindow).
//
// Nothing here starts a goroutine, reads a clock or sets a timer. Every method
// that depends on time takes now, and the state machines report their next
// deadline, so one run loop, the device's, owns the one timer (as
// cm/internal/ibcm does for connection setup). The device calls:
//
//   - on a CE-marked packet received for a QP: NP.CE(now); send a CNP to the
//     requester's QP when it returns true;
//   - on a CNP received for a QP: RP.CNP(now);
//   - before sending: RP.Budget(now) bytes may go now; after sending n bytes,
//     RP.Sent(now, n); with no budget, wait until RP.NextSend(now);
//   - at RP.Deadline() (rate-increase timer, deferred cut): RP.Advance(now).
//
// See docs/congestion.md for the state machines and where each parameter's
// default comes from.
package congestion

import (
	"errors"
	"fmt"
	"time"
)

// Config holds DCQCN's parameters for a device; every QP's RP and NP read the
// Config they were made with. Rates are in bits per second.
//
// Two published sets of values are provided, each value's source named where
// it is set: PaperConfig, after the DCQCN paper (Zhu et al., "Congestion
// Control for Large-Scale RDMA Deployments", SIGCOMM 2015; the default), and
// ConnectXConfig, after the HPCC simulator's model of ConnectX
// DCQCN (github.com/alibaba-edu/High-Precision-Congestion-Control:
// simulation/run.py, --cc dcqcn, and the RdmaHw attribute defaults in
// simulation/src/point-to-point/model/rdma-hw.cc), which follows NVIDIA's
// firmware parameters (dce_tcp_rtt, rate_reduce_monitor_period,
// rpg_time_reset, rpg_threshold, rpg_ai_rate, rpg_hai_rate).
type Config struct {
	// Enabled turns congestion control on. Off (the zero Config), an RP
	// never limits its QP (Budget is unlimited, CNPs are only counted) and an
	// NP never asks for a CNP: the device behaves as rxe does.
	Enabled bool

	// LineRate is where a QP's rate starts and the most it may reach (the
	// port's speed). Required when Enabled.
	LineRate float64
	// MinRate is the floor no cut goes below.
	MinRate float64

	// G is the gain of α's moving average: on a cut α ← (1−g)α + g, and
	// α ← (1−g)α every AlphaInterval without a CNP.
	G float64
	// AlphaInterval is α's decay period.
	AlphaInterval time.Duration
	// DecreaseInterval is the shortest time between two rate cuts: a CNP
	// that arrives sooner is held and applied when the interval ends. 0 cuts
	// on every CNP.
	DecreaseInterval time.Duration

	// IncreaseInterval is the rate-increase timer T: every T after a cut
	// without a new one is one increase event.
	IncreaseInterval time.Duration
	// ByteCounter is the rate-increase byte counter B: every B bytes sent
	// after a cut is one increase event. 0 turns it off: the timer alone
	// drives the increase, as ConnectX does.
	ByteCounter int64
	// F is the number of fast-recovery events (Rc ← (Rt+Rc)/2) before the
	// target rate itself grows.
	F int
	// RateAI is the additive increase of the target rate per increase event.
	RateAI float64
	// RateHAI is the hyper increase of the target rate per increase event.
	RateHAI float64

	// CNPInterval is the NP's pacing: at most one CNP per QP per interval.
	CNPInterval time.Duration

	// Burst is the pacer's bucket: the most bytes a QP may send back to back
	// at line speed after being idle, and the granularity at which the send
	// path is released. Larger bursts mean fewer wake-ups and deeper switch
	// queues.
	Burst int
}

// PaperConfig returns congestion control on, for a port of lineRate bits per
// second, with the DCQCN paper's parameters.
func PaperConfig(lineRate float64) Config {
	return Config{
		Enabled:  true,
		LineRate: lineRate,
		// The HPCC simulator's RdmaHw MinRate attribute default.
		MinRate: 100e6,
		// DCQCN paper: g = 1/256; the α timer K = 55 µs, longer than the
		// NP's CNP interval N = 50 µs.
		G:             1.0 / 256,
		AlphaInterval: 55 * time.Microsecond,
		// The paper's RP cuts on every CNP, which its NP sends at most every
		// 50 µs per QP; holding cuts 4 µs apart (ConnectX, below) changes
		// nothing then and bounds the work when several NPs notify one QP.
		DecreaseInterval: 4 * time.Microsecond,
		// The rate-increase timer as the HPCC simulator's "dcqcn_paper"
		// configuration reads the paper (RP_TIMER 55); the simulator's
		// RPTimer attribute default is 1.5 ms.
		IncreaseInterval: 55 * time.Microsecond,
		// DCQCN paper: byte counter B = 10 MB, F = 5 fast-recovery steps.
		ByteCounter: 10 << 20,
		F:           5,
		// The HPCC simulator's RateAI and RateHAI attribute defaults (NVIDIA's
		// rpg_ai_rate and rpg_hai_rate defaults).
		RateAI:  5e6,
		RateHAI: 50e6,
		// DCQCN paper: at most one CNP per QP per N = 50 µs (issue 31 asks
		// for the same).
		CNPInterval: 50 * time.Microsecond,
		// Ours: four 4096-byte packets.
		Burst: 16 << 10,
	}
}

// ConnectXConfig returns congestion control on, for a port of lineRate bits
// per second, with the parameters the HPCC simulator runs as "Mellanox
// DCQCN" (simulation/run.py, --cc dcqcn), which follow ConnectX firmware:
//
//   - α updated every 1 µs (ALPHA_RESUME_INTERVAL 1; NVIDIA dce_tcp_rtt
//     1 µs), g = 1/256 (EWMA_GAIN 0.00390625);
//   - at most one cut per 4 µs (RATE_DECREASE_INTERVAL 4; NVIDIA
//     rate_reduce_monitor_period);
//   - rate-increase timer 300 µs (RP_TIMER 300; NVIDIA rpg_time_reset), no
//     byte counter;
//   - one fast-recovery step (FAST_RECOVERY_TIMES 1; NVIDIA rpg_threshold 1);
//   - RateAI 5 Mb/s and RateHAI 50 Mb/s per 25 Gb/s of line rate
//     (RATE_AI 5·bw/25, RATE_HAI 50·bw/25);
//   - MinRate 100 Mb/s (the simulator's attribute default; run.py sets
//     1 Gb/s for its 25–100 Gb/s fabrics);
//   - the NP as in PaperConfig: one CNP per QP per 50 µs.
//
// α then tracks the fraction of microseconds with a CNP, so cuts are gentle
// and frequent rather than the paper's deep and rare ones.
func ConnectXConfig(lineRate float64) Config {
	c := PaperConfig(lineRate)
	c.AlphaInterval = time.Microsecond
	c.DecreaseInterval = 4 * time.Microsecond
	c.IncreaseInterval = 300 * time.Microsecond
	c.ByteCounter = 0
	c.F = 1
	c.RateAI = 5e6 * lineRate / 25e9
	c.RateHAI = 50e6 * lineRate / 25e9
	return c
}

// DefaultConfig is PaperConfig, which did best in the incast model (see
// TestIncastModel and docs/congestion.md): the port full, the queue within
// the marking band, no drop.
func DefaultConfig(lineRate float64) Config { return PaperConfig(lineRate) }

// ErrConfig is wrapped by Validate's errors.
var ErrConfig = errors.New("congestion: invalid config")

// Validate reports a Config an RP could not run on: rates that are not
// positive or not ordered, a gain outside (0, 1], intervals that are not
// positive. A disabled Config is always valid.
func (c *Config) Validate() error {
	if !c.Enabled {
		return nil
	}
	bad := func(what string, v any) error { return fmt.Errorf("%w: %s %v", ErrConfig, what, v) }
	switch {
	case !(c.LineRate > 0) || c.LineRate > 1e15:
		return bad("LineRate", c.LineRate)
	case !(c.MinRate > 0) || c.MinRate > c.LineRate:
		return bad("MinRate", c.MinRate)
	case !(c.G > 0) || c.G > 1:
		return bad("G", c.G)
	case c.AlphaInterval <= 0:
		return bad("AlphaInterval", c.AlphaInterval)
	case c.DecreaseInterval < 0:
		return bad("DecreaseInterval", c.DecreaseInterval)
	case c.IncreaseInterval <= 0:
		return bad("IncreaseInterval", c.IncreaseInterval)
	case c.ByteCounter < 0:
		return bad("ByteCounter", c.ByteCounter)
	case c.F < 0:
		return bad("F", c.F)
	case !(c.RateAI > 0):
		return bad("RateAI", c.RateAI)
	case !(c.RateHAI >= c.RateAI):
		return bad("RateHAI", c.RateHAI)
	case c.CNPInterval < 0:
		return bad("CNPInterval", c.CNPInterval)
	case c.Burst <= 0:
		return bad("Burst", c.Burst)
	}
	return nil
}

// Jain is Jain's fairness index of xs: (Σx)² / (n·Σx²), 1 when all are equal, 1/n when
// one has everything; 0 when all are 0. The incast experiments judge DCQCN's fairness
// by it (the bar: ≥ 0.95 over the senders).
func Jain(xs []float64) float64 {
	var s, q float64
	for _, x := range xs {
		s += x
		q += x * x
	}
	if q == 0 {
		return 0
	}
	return s * s / (float64(len(xs)) * q)
}

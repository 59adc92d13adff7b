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
// The defaults (DefaultConfig) come from two published sources, named at each
// field: the DCQCN paper (Zhu et al., "Congestion Control for Large-Scale RDMA
// Deployments", SIGCOMM 2015, §3 and §5) and the HPCC simulator's model of
// ConnectX DCQCN (alibaba-edu/High-Precision-Congestion-Control:
// simulation/src/point-to-point/model/rdma-hw.cc attribute defaults and
// simulation/run.py's "dcqcn" configuration, which follows NVIDIA's firmware
// defaults rpg_time_reset, rpg_ai_rate, rpg_hai_rate).
type Config struct {
	// Enabled turns congestion control on. Off (the zero Config), an RP
	// never limits its QP (Budget is unlimited, CNPs are only counted) and an
	// NP never asks for a CNP: the device behaves as rxe does.
	Enabled bool

	// LineRate is where a QP's rate starts and the most it may reach (the
	// port's speed). Required when Enabled.
	LineRate float64
	// MinRate is the floor no cut goes below. Default 100 Mb/s: the HPCC
	// simulator's RdmaHw MinRate default.
	MinRate float64

	// G is the gain of α's moving average: on a cut α ← (1−g)α + g, and
	// α ← (1−g)α every AlphaInterval without a CNP. Default 1/256: DCQCN
	// paper §5 (and HPCC run.py EWMA_GAIN 0.00390625).
	G float64
	// AlphaInterval is α's decay period K. Default 55 µs: DCQCN paper §3.2
	// ("K = 55 µs", longer than the NP's 50 µs CNP interval).
	AlphaInterval time.Duration
	// DecreaseInterval is the shortest time between two rate cuts: a CNP
	// that arrives sooner is held and applied when the interval ends. The
	// default, 4 µs, is ConnectX's rate_reduce_monitor_period as the HPCC
	// simulator models it (RateDecreaseInterval 4 µs). 0 cuts on every CNP,
	// as the paper's RP does.
	DecreaseInterval time.Duration

	// IncreaseInterval is the rate-increase timer T: every T after a cut
	// without a new one is one increase event. Default 300 µs: the HPCC
	// simulator's "dcqcn" (ConnectX) configuration, RP_TIMER 300, as
	// NVIDIA's rpg_time_reset default; the simulator's attribute default is
	// 1500 µs.
	IncreaseInterval time.Duration
	// ByteCounter is the rate-increase byte counter B: every B bytes sent
	// after a cut is one increase event. Default 10 MB: DCQCN paper §5.
	// 0 turns it off: the timer alone drives the increase, as ConnectX and
	// the HPCC simulator do.
	ByteCounter int64
	// F is the number of fast-recovery steps (Rc ← (Rt+Rc)/2) before
	// additive increase. Default 5: DCQCN paper §3.2 (and the HPCC
	// simulator's FastRecoveryTimes default).
	F int
	// RateAI is the additive increase of the target rate per increase event.
	// Default 5 Mb/s: the HPCC simulator's RateAI default (NVIDIA
	// rpg_ai_rate).
	RateAI float64
	// RateHAI is the hyper increase of the target rate per increase event.
	// Default 50 Mb/s: the HPCC simulator's RateHAI default (NVIDIA
	// rpg_hai_rate).
	RateHAI float64

	// CNPInterval is the NP's pacing: at most one CNP per QP per interval.
	// Default 50 µs: DCQCN paper §3.1 ("N = 50 µs"), the RoCEv2 CNP
	// practice issue 31 asks for.
	CNPInterval time.Duration

	// Burst is the pacer's bucket: the most bytes a QP may send back to back
	// at line speed after being idle, and the granularity at which the send
	// path is released. Default 16 KiB (four 4096-byte packets). Larger
	// bursts mean fewer wake-ups and deeper switch queues.
	Burst int
}

// Defaults, with their sources (see Config).
const (
	DefaultMinRate          = 100e6
	DefaultG                = 1.0 / 256
	DefaultAlphaInterval    = 55 * time.Microsecond
	DefaultDecreaseInterval = 4 * time.Microsecond
	DefaultIncreaseInterval = 300 * time.Microsecond
	DefaultByteCounter      = 10 << 20
	DefaultF                = 5
	DefaultRateAI           = 5e6
	DefaultRateHAI          = 50e6
	DefaultCNPInterval      = 50 * time.Microsecond
	DefaultBurst            = 16 << 10
)

// DefaultConfig returns congestion control on, for a port of lineRate bits
// per second, with the published defaults.
func DefaultConfig(lineRate float64) Config {
	return Config{
		Enabled:          true,
		LineRate:         lineRate,
		MinRate:          DefaultMinRate,
		G:                DefaultG,
		AlphaInterval:    DefaultAlphaInterval,
		DecreaseInterval: DefaultDecreaseInterval,
		IncreaseInterval: DefaultIncreaseInterval,
		ByteCounter:      DefaultByteCounter,
		F:                DefaultF,
		RateAI:           DefaultRateAI,
		RateHAI:          DefaultRateHAI,
		CNPInterval:      DefaultCNPInterval,
		Burst:            DefaultBurst,
	}
}

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

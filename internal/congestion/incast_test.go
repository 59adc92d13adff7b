package congestion

import (
	"fmt"
	"testing"
	"time"
)

// TestIncastModel: 8 senders into 1 receiver through one 10 Gb/s switch port with a
// 1 MB queue, for one second of virtual time, on the simnet fabric. This is the model
// of model_test.go (go-back-N RC senders with rxe's 128-packet window, paced by this
// package's RP; a receiver answering CE with CNPs paced by this package's NP), not
// the engine, which is wired to this package later.
//
// With DCQCN the port stays full (goodput counts payload only: 4096 of every 4178
// wire bytes, so 9.80 Gb/s is all a 10 Gb/s port carries), the senders share it
// fairly, the queue stays within the marking band and nothing is dropped or timed
// out. Without it the queue sits at its 1 MB capacity, tail drops cost each
// go-back-N sender a window of retransmissions and a timeout, and goodput falls.
func TestIncastModel(t *testing.T) {
	mc := defaultModel(8, DefaultConfig(10e9))
	on := runModel(t, shorten(mc))
	t.Logf("DCQCN on: %v", on)
	port := mc.bandwidth
	if on.Aggregate < 0.9*port {
		t.Errorf("DCQCN on: aggregate goodput %.3f Gb/s, below 90%% of the port", on.Aggregate/1e9)
	}
	if on.Jain < 0.95 {
		t.Errorf("DCQCN on: Jain's fairness %.4f", on.Jain)
	}
	if on.Net.TailDrop != 0 || on.Net.LinkLoss != 0 {
		t.Errorf("DCQCN on: %d tail drops", on.Net.TailDrop)
	}
	for i, f := range on.Flows {
		if f.Timeouts != 0 || f.Retrans != 0 || f.Cuts == 0 {
			t.Errorf("DCQCN on: flow %d: %d timeouts, %d retransmissions, %d cuts", i, f.Timeouts, f.Retrans, f.Cuts)
		}
	}
	k := mc.red
	if p := on.QueueP; p[2] < k.Kmin || p[4] > k.Kmax || on.InKRange < 0.95 {
		t.Errorf("DCQCN on: queue p1..p99 %v, %.1f%% of samples within [%d, %d]", p, 100*on.InKRange, k.Kmin, k.Kmax)
	}

	// A shorter run shows the collapse as well, at a quarter of the events.
	mc.cc = Config{}
	mc.duration, mc.warmup = 300*time.Millisecond, 100*time.Millisecond
	off := runModel(t, shorten(mc))
	t.Logf("DCQCN off: %v", off)
	if off.Net.TailDrop == 0 || off.QueueP[2] < mc.queue*9/10 || off.Aggregate > 0.75*on.Aggregate {
		t.Errorf("DCQCN off: no collapse to show: %v", off)
	}
}

// TestIncastDeterministic: the same seed gives the same run, to the last counter.
func TestIncastDeterministic(t *testing.T) {
	mc := defaultModel(8, DefaultConfig(10e9))
	mc.duration, mc.warmup = 30*time.Millisecond, 10*time.Millisecond
	a, b := runModel(t, mc), runModel(t, mc)
	if fmt.Sprintf("%+v", a) != fmt.Sprintf("%+v", b) {
		t.Errorf("two runs differ:\n%+v\n%+v", a, b)
	}
}

// TestLossModel: one RC stream over a fabric path of 100 µs round trip whose first
// link loses 1% of packets at random (the model of model_test.go, not the engine).
// Selective repeat (this package's Tracker and SendWindow, in-flight data capped at
// the path's bandwidth-delay product) keeps at least 90% of its lossless goodput
// and retransmits about one packet per packet lost; go-back-N with rxe's
// 128-packet window retransmits what was in flight behind every loss.
func TestLossModel(t *testing.T) {
	const rtt = 100 * time.Microsecond
	base := defaultModel(1, Config{})
	base.delay = 23300 * time.Nanosecond // 4 × 23.3 µs + two 3.3 µs transmissions ≈ 100 µs
	base.duration, base.warmup = 500*time.Millisecond, 50*time.Millisecond
	bdp := BDPCap(base.bandwidth, rtt, base.mtu)
	type row struct {
		name     string
		lossless modelResult
		lossy    modelResult
	}
	var rows []row
	for _, sel := range []bool{false, true} {
		mc := base
		mc.selective = sel
		name := "go-back-N"
		if sel {
			name = "selective"
			mc.window = bdp + mc.ackEvery // in flight: the BDP and the ACKs' coalescing
		}
		r := row{name: name, lossless: runModel(t, shorten(mc))}
		mc.lossUp = 0.01
		r.lossy = runModel(t, shorten(mc))
		f := r.lossy.Flows[0]
		t.Logf("%s (window %d): lossless %.3f Gb/s, 1%% loss %.3f Gb/s (%.1f%%): %d lost, %d retransmitted, %d timeouts",
			name, mc.window, r.lossless.Aggregate/1e9, r.lossy.Aggregate/1e9, 100*r.lossy.Aggregate/r.lossless.Aggregate,
			r.lossy.Net.LinkLoss, f.Retrans, f.Timeouts)
		rows = append(rows, r)
	}
	sr := rows[1]
	if sr.lossy.Aggregate < 0.9*sr.lossless.Aggregate {
		t.Errorf("selective repeat kept %.1f%% of its lossless goodput", 100*sr.lossy.Aggregate/sr.lossless.Aggregate)
	}
	lost, retx := sr.lossy.Net.LinkLoss, uint64(sr.lossy.Flows[0].Retrans)
	// A loss in the run's last round trip may not have been resent by its end.
	if retx+2 < lost || float64(retx) > 1.1*float64(lost) {
		t.Errorf("selective repeat: %d packets lost, %d retransmitted", lost, retx)
	}
	if gbn := rows[0]; gbn.lossy.Aggregate >= sr.lossy.Aggregate {
		t.Errorf("go-back-N did as well as selective repeat: %.3f against %.3f Gb/s", gbn.lossy.Aggregate/1e9, sr.lossy.Aggregate/1e9)
	}
}

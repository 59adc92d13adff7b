package engine_test

import (
	"encoding/binary"
	"fmt"
	"math"
	"net/netip"
	"runtime"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/goverbs/goverbs/internal/congestion"
	"github.com/goverbs/goverbs/internal/engine"
	"github.com/goverbs/goverbs/netio"
	"github.com/goverbs/goverbs/netio/simnet"
	"github.com/goverbs/goverbs/verbs"
	"github.com/goverbs/goverbs/wire"
)

// Congestion control in the engine (congestion.go) on simnet's fabric, under
// testing/synctest: real devices, virtual time.

// fabricHost opens a device on the fabric at addr, with cc.
func fabricHost(t *testing.T, n *simnet.Network, addr string, cc congestion.Config) *host {
	t.Helper()
	c, err := n.Listen(netip.AddrPortFrom(netip.MustParseAddr(addr), wire.UDPPort))
	if err != nil {
		t.Fatal(err)
	}
	return newHostCfg(t, verbs.SoftConfig{Addr: netip.MustParseAddr(addr), Conn: c, MTU: verbs.MTU4096, Congestion: cc})
}

// ccWriteStream keeps depth RDMA WRITEs of size bytes outstanding from p.QA into dst until
// stop, and reports the bytes whose completion came within [from, stop).
func ccWriteStream(t *testing.T, p *pair, size, depth int, from, stop time.Time) (int64, error) {
	src := p.A.MR(t, size, allAccess)
	dst := p.B.MR(t, size, allAccess)
	wr := verbs.SendWR{Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled, SGL: []verbs.SGE{src.SGE(0, size)},
		RemoteAddr: dst.Addr(), RKey: dst.RKey()}
	wcs := make([]verbs.WC, 16)
	var got int64
	out := 0
	for time.Now().Before(stop) {
		for ; out < depth; out++ {
			if err := p.QA.PostSend(wr); err != nil {
				return got, err
			}
		}
		k, _ := p.A.CQ.Poll(wcs)
		for _, wc := range wcs[:k] {
			if wc.Status != verbs.WCSuccess {
				return got, fmt.Errorf("completion %+v", wc)
			}
			if !time.Now().Before(from) {
				got += int64(size)
			}
		}
		out -= k
		if k == 0 {
			time.Sleep(2 * time.Microsecond)
		}
	}
	return got, nil
}

// TestCNPCutsRate: a 10 Gb/s sender into a 1 Gb/s port whose switch marks ECN. The
// receiver sees CE-marked requests and answers with CNPs, at most one per 50 µs; the
// sender counts them, cuts its rate, and its data still arrives whole.
func TestCNPCutsRate(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := simnet.New(7, simnet.Faults{})
		defer n.Close()
		sw := n.AddSwitch("s", simnet.SwitchConfig{ECN: simnet.RED{Kmin: 5 << 10, Kmax: 200 << 10, Pmax: 0.2, OnDequeue: true}})
		n.Attach(netip.MustParseAddr("10.31.1.1"), sw, simnet.Link{Bandwidth: 10e9, Delay: time.Microsecond})
		_, toB, _ := n.Attach(netip.MustParseAddr("10.31.1.2"), sw, simnet.Link{Bandwidth: 1e9, Delay: time.Microsecond})
		cc := congestion.PaperConfig(10e9)
		a, b := fabricHost(t, n, "10.31.1.1", cc), fabricHost(t, n, "10.31.1.2", cc)
		p := newPair(t, a, b, verbs.QPTypeRC, defaultRC())
		start := time.Now()
		got, err := ccWriteStream(t, p, 64<<10, 8, start, start.Add(5*time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		ca, cb := a.Dev.Counters(), b.Dev.Counters()
		t.Logf("%d bytes in 5 ms; receiver: ecn_ce_rcvd %d sent_cnp %d cnp_suppressed %d; sender: rcvd_cnp %d rate_cuts %d pace_waits %d cc_rate_min_mbps %d; port %+v",
			got, cb.Get("ecn_ce_rcvd"), cb.Get("sent_cnp"), cb.Get("cnp_suppressed"), ca.Get("rcvd_cnp"), ca.Get("rate_cuts"),
			ca.Get("pace_waits"), ca.Get("cc_rate_min_mbps"), toB.Stats())
		switch {
		case cb.Get("ecn_ce_rcvd") == 0 || cb.Get("sent_cnp") == 0:
			t.Error("no CE-marked packet answered with a CNP")
		case cb.Get("sent_cnp") > uint64(5*time.Millisecond/cc.CNPInterval)+1:
			t.Errorf("%d CNPs in 5 ms: more than one per %v", cb.Get("sent_cnp"), cc.CNPInterval)
		case ca.Get("rcvd_cnp") != cb.Get("sent_cnp"):
			t.Errorf("sent %d CNPs, received %d", cb.Get("sent_cnp"), ca.Get("rcvd_cnp"))
		case ca.Get("rate_cuts") == 0 || ca.Get("cc_rate_min_mbps") >= 10000:
			t.Error("no rate cut")
		case ca.Get("retry_timeouts") != 0 || toB.Stats().TailDrop != 0:
			t.Errorf("%d timeouts, %d tail drops", ca.Get("retry_timeouts"), toB.Stats().TailDrop)
		case got == 0:
			t.Error("nothing delivered")
		}
		if cb.Get("bad_transport_drop")+ca.Get("bad_transport_drop")+ca.Get("no_qp_drop") != 0 {
			t.Error("a CNP was dropped as unknown")
		}
		a.Dev.Close()
		b.Dev.Close()
	})
}

// TestCNPWithoutCongestionControl: a device running without congestion control counts a
// CNP and carries on, as does a device with it that gets a CNP for no QP; neither sends
// ECT or CNPs.
func TestCNPWithoutCongestionControl(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := simnet.New(7, simnet.Faults{})
		defer n.Close()
		a := fabricHost(t, n, "10.31.2.1", congestion.Config{})
		b := fabricHost(t, n, "10.31.2.2", congestion.PaperConfig(10e9))
		p := newPair(t, a, b, verbs.QPTypeRC, defaultRC())
		raw, err := n.Listen(netip.MustParseAddrPort("10.31.2.3:4791"))
		if err != nil {
			t.Fatal(err)
		}
		cnp := func(to netip.AddrPort, qpn uint32) {
			h := wire.Headers{BTH: wire.BTHFields{Opcode: wire.CNP, PKey: 0xffff, DestQP: qpn}}
			buf := make([]byte, 64)
			k := wire.Finish(buf, h.Encode(buf), 0)
			f := wire.NewICRCFlow(&wire.IPHeader{Src: raw.LocalAddr().Addr(), Dst: to.Addr(),
				SrcPort: raw.LocalAddr().Port(), DstPort: to.Port(), DF: true})
			binary.LittleEndian.PutUint32(buf[k:], f.Sum(0, buf[:k], nil, 0))
			if _, err := raw.WriteBatch([]netio.Message{{Buf: buf, N: k + wire.ICRCLen, Addr: to}}); err != nil {
				t.Fatal(err)
			}
		}
		cnp(netip.AddrPortFrom(a.GID.Addr(), wire.UDPPort), p.QA.QPN())
		cnp(netip.AddrPortFrom(b.GID.Addr(), wire.UDPPort), 0xabcdef)
		time.Sleep(time.Millisecond)
		ca, cb := a.Dev.Counters(), b.Dev.Counters()
		if ca.Get("rcvd_cnp") != 1 || ca.Get("rate_cuts") != 0 || cb.Get("rcvd_cnp") != 1 || cb.Get("no_qp_drop") != 1 {
			t.Fatalf("a: rcvd_cnp %d rate_cuts %d; b: rcvd_cnp %d no_qp_drop %d",
				ca.Get("rcvd_cnp"), ca.Get("rate_cuts"), cb.Get("rcvd_cnp"), cb.Get("no_qp_drop"))
		}
		if _, err := ccWriteStream(t, p, 8192, 2, time.Now(), time.Now().Add(100*time.Microsecond)); err != nil {
			t.Fatal(err)
		}
		raw.Close()
		a.Dev.Close()
		b.Dev.Close()
	})
}

// incastResult is one incast run's figures.
type incastResult struct {
	goodput    float64 // payload bits per second delivered, all senders
	jain       float64
	queue      []int // the bottleneck's queue, sampled every 10 µs after the warm-up
	inBand     float64
	tailDrops  uint64 // after the warm-up
	startDrops uint64 // during it
	timeouts   uint64
	marked     uint64
	cnps, cuts uint64
	failed     int // senders whose QP failed (retry exceeded)
}

func (r incastResult) String() string {
	q := func(p float64) int { return r.queue[min(len(r.queue)-1, int(p*float64(len(r.queue))))] >> 10 }
	return fmt.Sprintf("goodput %.3f Gb/s, Jain %.4f, queue p10/p50/p90/p99 %d/%d/%d/%d KB, %.1f%% in [Kmin, Kmax], tail drops %d (%d in the warm-up), timeouts %d, marked %d, CNPs %d, cuts %d, failed QPs %d",
		r.goodput/1e9, r.jain, q(0.1), q(0.5), q(0.9), q(0.99), 100*r.inBand, r.tailDrops, r.startDrops, r.timeouts, r.marked, r.cnps, r.cuts, r.failed)
}

// runIncast runs 8 senders into 1 receiver through one 10 Gb/s port (1 MB queue, DCQCN's
// marking on dequeue as docs/congestion.md's model) for dur, measured after warm.
func runIncast(t *testing.T, cc congestion.Config, warm, dur time.Duration) incastResult {
	var r incastResult
	synctest.Test(t, func(t *testing.T) {
		const senders = 8
		red := simnet.RED{Kmin: 5 << 10, Kmax: 200 << 10, Pmax: 0.2, OnDequeue: true}
		n := simnet.New(31, simnet.Faults{})
		defer n.Close()
		sw := n.AddSwitch("tor", simnet.SwitchConfig{QueueBytes: 1 << 20, ECN: red})
		link := simnet.Link{Bandwidth: 10e9, Delay: time.Microsecond}
		_, port, _ := n.Attach(netip.MustParseAddr("10.31.0.100"), sw, link)
		recv := fabricHost(t, n, "10.31.0.100", cc)
		params := defaultRC()
		params.MTU = verbs.MTU4096
		params.Timeout = 8 // 1 ms, the model's retransmission timeout
		var pairs []*pair
		var hosts []*host
		for i := range senders {
			addr := fmt.Sprintf("10.31.0.%d", i+1)
			n.Attach(netip.MustParseAddr(addr), sw, link)
			h := fabricHost(t, n, addr, cc)
			hosts = append(hosts, h)
			pairs = append(pairs, newPair(t, h, recv, verbs.QPTypeRC, params))
		}
		start := time.Now()
		from, stop := start.Add(warm), start.Add(warm+dur)
		got := make([]float64, senders)
		var wg sync.WaitGroup
		var mu sync.Mutex
		for i, p := range pairs {
			wg.Go(func() {
				b, err := ccWriteStream(t, p, 64<<10, 12, from, stop)
				if err != nil {
					mu.Lock()
					r.failed++
					mu.Unlock()
					t.Logf("sender %d: %v", i, err)
				}
				got[i] = float64(b)
			})
		}
		wg.Go(func() {
			time.Sleep(warm)
			r.startDrops = port.Stats().TailDrop
			for time.Now().Before(stop) {
				r.queue = append(r.queue, port.Queue())
				time.Sleep(10 * time.Microsecond)
			}
		})
		wg.Wait()
		var sum float64
		for _, g := range got {
			sum += g
		}
		r.goodput = sum * 8 / dur.Seconds()
		r.jain = congestion.Jain(got)
		slices.Sort(r.queue)
		in := 0
		for _, q := range r.queue {
			if q >= red.Kmin && q <= red.Kmax {
				in++
			}
		}
		r.inBand = float64(in) / float64(max(len(r.queue), 1))
		st := port.Stats()
		r.tailDrops, r.marked = st.TailDrop-r.startDrops, st.Marked
		r.cnps = recv.Dev.Counters().Get("sent_cnp")
		for _, h := range hosts {
			c := h.Dev.Counters()
			r.timeouts += c.Get("retry_timeouts")
			r.cuts += c.Get("rate_cuts")
			h.Dev.Close()
		}
		recv.Dev.Close()
	})
	return r
}

// TestEngineIncast: DCQCN in the engine holds 8 → 1 at the port's rate, fairly, with the
// queue in the marking band and no timeouts; without it the port's queue sits at its
// capacity, drops, and senders time out. The figures are docs/congestion.md's.
func TestEngineIncast(t *testing.T) {
	warm, dur := 20*time.Millisecond, 80*time.Millisecond
	if engine.RaceEnabled || testing.Short() {
		// The same warm-up (the start's cuts recover within it), a shorter measurement.
		dur = 10 * time.Millisecond
	}
	on := runIncast(t, congestion.PaperConfig(10e9), warm, dur)
	t.Logf("DCQCN: %v", on)
	off := runIncast(t, congestion.Config{}, warm, dur)
	t.Logf("off:   %v", off)
	const port = 10e9 * 4096 / 4178 // payload of a port full of 4 KiB packets
	// The start's drops are DCQCN's as ConnectX runs it: a QP is not paced until its first
	// CNP, so every sender's first window leaves at once, before any mark comes back.
	if on.goodput < 0.9*port || on.jain < 0.95 || on.timeouts != 0 || on.tailDrops != 0 || on.failed != 0 {
		t.Errorf("DCQCN: %v; want goodput ≥ %.2f Gb/s, Jain ≥ 0.95, no timeouts, no drops after the warm-up", on, 0.9*port/1e9)
	}
	const band = 0.9
	if on.inBand < band || on.queue[len(on.queue)*99/100] > 200<<10 {
		t.Errorf("DCQCN: the queue in [Kmin, Kmax] %.1f%% of the time (want ≥ %.0f%%), p99 %d KB (want ≤ Kmax)",
			100*on.inBand, 100*band, on.queue[len(on.queue)*99/100]>>10)
	}
	if off.tailDrops+off.startDrops == 0 || off.queue[len(off.queue)/2] < 200<<10 {
		t.Errorf("without congestion control: %v; want the queue past Kmax and drops", off)
	}
	if math.IsNaN(on.jain) {
		t.Error("no traffic")
	}
}

// TestCongestionAllocsNothing: with congestion control on, an RC WRITE stream (its
// packets ECN-capable, unpaced at line rate, paced once a CNP has cut its rate)
// allocates nothing per message once its QP's pace timer exists.
func TestCongestionAllocsNothing(t *testing.T) {
	if engine.RaceEnabled {
		t.Skip("allocation counts are meaningless under the race detector")
	}
	// The paper's parameters, except that nothing depends on the time between steps: every
	// CNP cuts (no DecreaseInterval to wait out) and the rate never climbs back during the
	// test (an hour's increase timer, no byte counter, α never decays). With the paper's
	// 55 µs timer a loaded machine let the rate recover between the cuts' sleeps, or
	// before the paced writes, and the paced half measured unpaced writes.
	cc := congestion.PaperConfig(10e9)
	cc.DecreaseInterval = 0
	cc.IncreaseInterval = time.Hour
	cc.ByteCounter = 0
	cc.AlphaInterval = time.Hour
	a, b := newHostCfg(t, verbs.SoftConfig{Congestion: cc}), newHostCfg(t, verbs.SoftConfig{Congestion: cc})
	p := newPair(t, a, b, verbs.QPTypeRC, defaultRC())
	src, dst := a.MR(t, 64<<10, allAccess), b.MR(t, 64<<10, allAccess)
	wcs := make([]verbs.WC, 4)
	write := func() {
		if err := p.QA.PostSend(verbs.SendWR{ID: 1, Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled,
			SGL: []verbs.SGE{src.SGE(0, 64<<10)}, RemoteAddr: dst.Addr(), RKey: dst.RKey()}); err != nil {
			t.Fatal(err)
		}
		for deadline := time.Now().Add(5 * time.Second); ; {
			if k, _ := a.CQ.Poll(wcs); k > 0 {
				if wcs[0].Status != verbs.WCSuccess {
					t.Fatalf("completion %+v", wcs[0])
				}
				return
			}
			if time.Now().After(deadline) {
				t.Fatal("no completion")
			}
			runtime.Gosched()
		}
	}
	for range 8 {
		write()
	}
	if n := testing.AllocsPerRun(20, write); n != 0 {
		t.Errorf("%v allocations per unpaced 64 KiB WRITE", n)
	}
	// Five CNPs cut the rate to 10 Gb/s / 32, about 312 Mb/s, where it stays: the writes
	// below are paced, each 64 KiB WRITE waiting for its budget several times.
	for range 5 {
		if !engine.InjectCNP(a.GID, p.QA.QPN()) {
			t.Fatal("no such QP")
		}
	}
	if cuts := a.Dev.Counters().Get("rate_cuts"); cuts != 5 {
		t.Fatalf("%d rate cuts for 5 CNPs", cuts)
	}
	for range 4 {
		write()
	}
	waits := a.Dev.Counters().Get("pace_waits")
	if n := testing.AllocsPerRun(20, write); n != 0 {
		t.Errorf("%v allocations per paced 64 KiB WRITE", n)
	}
	// The measured writes themselves were paced (AllocsPerRun makes 21 calls), at the
	// cut rate.
	if w := a.Dev.Counters().Get("pace_waits") - waits; w < 21 {
		t.Errorf("%d pace waits over 21 paced 64 KiB WRITEs: the measured stream was not paced", w)
	}
	if r := a.Dev.Counters().Get("cc_rate_min_mbps"); r == 0 || r > 400 {
		t.Errorf("rate %d Mb/s after five cuts from 10 Gb/s, want about 312", r)
	}
}

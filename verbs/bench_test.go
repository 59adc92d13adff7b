package verbs_test

import (
	"context"
	"io"
	"net"
	"testing"

	"github.com/goverbs/goverbs/verbs"
)

// Benchmarks of the RC data path between two software devices on loopback, each beside
// its baseline (Go TCP, or UDP for latency) measured in the same run, so the figures are
// read as ratios: go test -run ^$ -bench . -benchmem ./verbs
// The two devices are of one process and reach each other through the same-host
// shortcut's rings, their default; GOVERBS_SHM=0 in the environment measures the
// kernel's UDP path instead (BenchmarkRCWrite64K 1.78x the UDP path's MB/s, 3 rounds of
// bench/inproc.sh ea5c775 8981c20).

// cqWaiter waits for completions the way an event-driven verbs program does: poll, and
// when the CQ is empty arm it, poll once more (a completion may have slipped in before
// the arm) and sleep on the completion channel. Spinning instead would starve Go's
// netpoller, which wakes the devices' receive loops, on a machine with few cores.
type cqWaiter struct {
	cq  *verbs.CQ
	ch  *verbs.CompChannel
	wcs []verbs.WC
}

func newCQWaiter(b testing.TB, d *verbs.Device, depth int) *cqWaiter {
	ch := d.CreateCompChannel()
	cq, err := d.CreateCQ(depth, ch)
	if err != nil {
		b.Fatal(err)
	}
	return &cqWaiter{cq: cq, ch: ch, wcs: make([]verbs.WC, 32)}
}

// poll returns at least one completion, blocking until there is one.
func (w *cqWaiter) poll(b testing.TB) []verbs.WC {
	for {
		k, err := w.cq.Poll(w.wcs)
		if err != nil {
			b.Fatal(err)
		}
		if k > 0 {
			for _, wc := range w.wcs[:k] {
				if wc.Status != verbs.WCSuccess {
					b.Fatalf("completion %+v", wc)
				}
			}
			return w.wcs[:k]
		}
		w.cq.RequestNotify(false)
		if k, _ = w.cq.Poll(w.wcs); k > 0 {
			return w.wcs[:k]
		}
		if _, err := w.ch.Wait(context.Background()); err != nil {
			b.Fatal(err)
		}
	}
}

// qpWith creates an RC QP on h whose completions go to the given CQs.
func qpWith(b testing.TB, h *host, scq, rcq *verbs.CQ) *verbs.QP {
	qp, err := h.PD.CreateQP(verbs.QPInitAttr{Type: verbs.QPTypeRC, SendCQ: scq, RecvCQ: rcq,
		Cap: verbs.QPCap{MaxSendWR: 256, MaxRecvWR: 256, MaxSendSGE: 1, MaxRecvSGE: 1, MaxInline: 64}})
	if err != nil {
		b.Fatal(err)
	}
	return qp
}

// connectedPair connects qa and qc with the loopback port's active MTU, 4096.
func connectedPair(b testing.TB, a, c *host, qa, qc *verbs.QP) {
	p := defaultRC()
	p.MTU = verbs.MTU4096
	connect(b, qa, p, c.GID, qc.QPN(), 0x100, 0xabc000)
	connect(b, qc, p, a.GID, qa.QPN(), 0xabc000, 0x100)
}

// streamWrites posts b.N copies of wr keeping up to depth outstanding, every
// signalEvery-th signaled (the last one always), and waits for the last completion.
func streamWrites(b *testing.B, qa *verbs.QP, w *cqWaiter, wr verbs.SendWR, depth, signalEvery int) {
	inflight := 0
	for i := 0; i < b.N; i++ {
		wr.Flags = 0
		if i%signalEvery == signalEvery-1 || i == b.N-1 {
			wr.Flags = verbs.SendSignaled
		}
		for inflight >= depth {
			inflight -= len(w.poll(b)) * signalEvery
		}
		if err := qa.PostSend(wr); err != nil {
			b.Fatal(err)
		}
		inflight++
	}
	for inflight > 0 {
		inflight -= len(w.poll(b)) * signalEvery
	}
}

func BenchmarkRCWrite64K(b *testing.B) { benchRCWrite64K(b, verbs.MTU4096) }

// BenchmarkRCWrite64KMTU1024 is BenchmarkRCWrite64K at path MTU 1024, what rxe and goverbs
// take from an interface MTU of 1500 (a veth pair, most Ethernet): 64 packets a message
// instead of 16, so the per-packet costs (header build and parse, ICRC, the GSO run's
// segments, the receive path's copy under a pin) weigh four times as much. It measures
// the kernel's UDP path (GSO and GRO on loopback) whatever the same-host shortcut's
// default: GOVERBS_SHM=0.
func BenchmarkRCWrite64KMTU1024(b *testing.B) {
	b.Setenv("GOVERBS_SHM", "0")
	benchRCWrite64K(b, verbs.MTU1024)
}

// benchRCWrite64K streams 64 KiB RC WRITEs between two devices of this process at path
// MTU mtu, 32 outstanding, every eighth signaled.
func benchRCWrite64K(b *testing.B, mtu verbs.MTU) {
	const size, depth, signalEvery = 64 << 10, 32, 8
	a, c := newHost(b), newHost(b)
	w := newCQWaiter(b, a.Dev, 256)
	qa, qc := qpWith(b, a, w.cq, a.RCQ), qpWith(b, c, c.CQ, c.RCQ)
	p := defaultRC()
	p.MTU = mtu
	connect(b, qa, p, c.GID, qc.QPN(), 0x100, 0xabc000)
	connect(b, qc, p, a.GID, qa.QPN(), 0xabc000, 0x100)
	src, dst := a.MR(b, size, allAccess), c.MR(b, size, allAccess)
	wr := verbs.SendWR{Opcode: verbs.WRRDMAWrite, SGL: []verbs.SGE{src.SGE(0, size)}, RemoteAddr: dst.Addr(), RKey: dst.RKey()}
	b.SetBytes(size)
	b.ReportAllocs()
	b.ResetTimer()
	streamWrites(b, qa, w, wr, depth, signalEvery)
}

func BenchmarkTCPStream64K(b *testing.B) {
	ln, err := net.Listen("tcp", "127.10.0.2:0")
	if err != nil {
		b.Fatal(err)
	}
	defer ln.Close()
	got := make(chan int64)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			got <- 0
			return
		}
		n, _ := io.Copy(io.Discard, c)
		c.Close()
		got <- n
	}()
	conn, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		b.Fatal(err)
	}
	buf := make([]byte, 64<<10)
	b.SetBytes(int64(len(buf)))
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := conn.Write(buf); err != nil {
			b.Fatal(err)
		}
	}
	conn.Close()
	if n := <-got; n != int64(b.N)*int64(len(buf)) {
		b.Fatalf("received %d bytes", n)
	}
}

// pingPong is an RC pair set up for an 8-byte SEND ping-pong: receives posted on both
// sides, and the two unsignaled inline sends (the send CQs stay empty, as in
// ibv_rc_pingpong's fast path).
type pingPong struct {
	qa, qc       *verbs.QP
	recvA, recvC verbs.RecvWR
	ping, pong   verbs.SendWR
}

func newPingPong(b testing.TB, a, c *host, rcqA, rcqC *verbs.CQ) *pingPong {
	p := &pingPong{qa: qpWith(b, a, a.CQ, rcqA), qc: qpWith(b, c, c.CQ, rcqC)}
	connectedPair(b, a, c, p.qa, p.qc)
	ma, mc := a.MR(b, 64, allAccess), c.MR(b, 64, allAccess)
	p.recvA, p.recvC = verbs.RecvWR{ID: 1, SGL: []verbs.SGE{ma.SGE(0, 64)}}, verbs.RecvWR{ID: 2, SGL: []verbs.SGE{mc.SGE(0, 64)}}
	for i := 0; i < 16; i++ {
		p.qa.PostRecv(p.recvA)
		p.qc.PostRecv(p.recvC)
	}
	p.ping = verbs.SendWR{Opcode: verbs.WRSend, Flags: verbs.SendInline, SGL: []verbs.SGE{ma.SGE(0, 8)}}
	p.pong = verbs.SendWR{Opcode: verbs.WRSend, Flags: verbs.SendInline, SGL: []verbs.SGE{mc.SGE(0, 8)}}
	return p
}

func BenchmarkRCSendPingPong8(b *testing.B) {
	a, c := newHost(b), newHost(b)
	wa, wc := newCQWaiter(b, a.Dev, 64), newCQWaiter(b, c.Dev, 64)
	pp := newPingPong(b, a, c, wa.cq, wc.cq)
	qa, qc, recvA, recvC, ping, pong := pp.qa, pp.qc, pp.recvA, pp.recvC, pp.ping, pp.pong
	stop := make(chan struct{})
	go func() { // the far side answers every ping
		for {
			for range wc.poll(b) {
				qc.PostRecv(recvC)
				qc.PostSend(pong)
			}
			select {
			case <-stop:
				return
			default:
			}
		}
	}()
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if err := qa.PostSend(ping); err != nil {
			b.Fatal(err)
		}
		for n := 0; n < 1; n += len(wa.poll(b)) {
		}
		qa.PostRecv(recvA)
	}
	b.StopTimer()
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/2/1000, "us-one-way")
	close(stop)
	qa.PostSend(ping) // wake the far side so it sees stop
}

func BenchmarkUDPPingPong8(b *testing.B) {
	pa, err := net.ListenPacket("udp", "127.10.0.2:0")
	if err != nil {
		b.Fatal(err)
	}
	pc, err := net.ListenPacket("udp", "127.10.0.3:0")
	if err != nil {
		b.Fatal(err)
	}
	defer pa.Close()
	defer pc.Close()
	go func() {
		buf := make([]byte, 64)
		for {
			n, from, err := pc.ReadFrom(buf)
			if err != nil {
				return
			}
			pc.WriteTo(buf[:n], from)
		}
	}()
	buf := make([]byte, 64)
	dst := pc.LocalAddr()
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		pa.WriteTo(buf[:8], dst)
		if _, _, err := pa.ReadFrom(buf); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/2/1000, "us-one-way")
}

// busyHost opens a host whose device runs in busy-poll mode.
func busyHost(b testing.TB) *host {
	return newHostCfg(b, verbs.SoftConfig{BusyPoll: true})
}

// spin polls cq until it returns a completion; in busy-poll mode each empty poll reads
// the socket itself.
func spin(b testing.TB, cq *verbs.CQ, wcs []verbs.WC) {
	for {
		k, err := cq.Poll(wcs)
		if err != nil {
			b.Fatal(err)
		}
		if k > 0 {
			if wcs[0].Status != verbs.WCSuccess {
				b.Fatalf("completion %+v", wcs[0])
			}
			return
		}
	}
}

func BenchmarkRCSendPingPong8BusyPoll(b *testing.B) {
	a, c := busyHost(b), busyHost(b)
	pp := newPingPong(b, a, c, a.RCQ, c.RCQ)
	qa, qc, recvA, recvC, ping, pong := pp.qa, pp.qc, pp.recvA, pp.recvC, pp.ping, pp.pong
	stop := make(chan struct{})
	go func() {
		wcs := make([]verbs.WC, 1)
		for {
			select {
			case <-stop:
				return
			default:
			}
			if k, _ := c.RCQ.Poll(wcs); k > 0 {
				qc.PostRecv(recvC)
				qc.PostSend(pong)
			}
		}
	}()
	defer close(stop)
	wcs := make([]verbs.WC, 1)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		qa.PostSend(ping)
		spin(b, a.RCQ, wcs)
		qa.PostRecv(recvA)
	}
	b.StopTimer()
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/2/1000, "us-one-way")
}

// BenchmarkRCWrite8Rate is the small-message rate: 8-byte WRITEs posted back to back on
// one QP, 128 outstanding, every 32nd signaled; ns/op is the time per message.
func BenchmarkRCWrite8Rate(b *testing.B) {
	const depth, signalEvery = 128, 32
	a, c := newHost(b), newHost(b)
	w := newCQWaiter(b, a.Dev, 256)
	qa, qc := qpWith(b, a, w.cq, a.RCQ), qpWith(b, c, c.CQ, c.RCQ)
	connectedPair(b, a, c, qa, qc)
	src, dst := a.MR(b, 64, allAccess), c.MR(b, 64, allAccess)
	wr := verbs.SendWR{Opcode: verbs.WRRDMAWrite, SGL: []verbs.SGE{src.SGE(0, 8)}, RemoteAddr: dst.Addr(), RKey: dst.RKey()}
	b.ReportAllocs()
	b.ResetTimer()
	streamWrites(b, qa, w, wr, depth, signalEvery)
	b.StopTimer()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds()/1e6, "Mmsg/s")
}

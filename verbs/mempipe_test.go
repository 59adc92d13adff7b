package verbs_test

import (
	"net/netip"
	"testing"

	"github.com/goverbs/goverbs/netio/netiotest"
	"github.com/goverbs/goverbs/verbs"
)

// BenchmarkRCSendPingPong8InMemory is goverbs' own share of a busy-poll ping-pong: two
// busy-poll devices on an in-memory pipe, both driven from this goroutine the way
// `goverbs send_lat --busy-poll` drives each process (signaled 8-byte SENDs, send
// completions reaped as they come, a receive reposted per message). ns/op is one
// round trip of user-space work, two turnarounds; add two kernel UDP sends to
// approximate the loopback round trip.
func BenchmarkRCSendPingPong8InMemory(b *testing.B) {
	ea, ec := netip.MustParseAddrPort("127.10.0.2:4791"), netip.MustParseAddrPort("127.10.0.3:4791")
	ca, cc := netiotest.Pipe(ea, ec)
	a := newHostCfg(b, verbs.SoftConfig{Addr: ea.Addr(), Conn: ca, BusyPoll: true})
	c := newHostCfg(b, verbs.SoftConfig{Addr: ec.Addr(), Conn: cc, BusyPoll: true})
	benchPingPong8(b, a, c)
}

// BenchmarkRCSendPingPong8SameHost is BenchmarkRCSendPingPong8InMemory through the
// same-host shortcut's shared-memory rings (two devices of this process on their own UDP
// sockets, SameHost on): the engine's share of a busy-poll send_lat through the rings,
// the rings' own cost included, in one goroutine and no kernel on the data path.
func BenchmarkRCSendPingPong8SameHost(b *testing.B) {
	a := newHostCfg(b, verbs.SoftConfig{BusyPoll: true, SameHost: true})
	c := newHostCfg(b, verbs.SoftConfig{BusyPoll: true, SameHost: true})
	benchPingPong8(b, a, c)
	checkRings(b, a, c)
}

// checkRings fails b unless both devices sent packets through the rings. (A short run
// may not: the first datagrams can go by UDP while the peers meet.)
func checkRings(b *testing.B, hs ...*host) {
	if b.N < 1000 {
		return
	}
	for _, h := range hs {
		if c := h.Dev.Counters(); c.Get("samehost_tx_pkts") == 0 || c.Get("samehost_rx_pkts") == 0 {
			b.Fatalf("%v sent %d and received %d packets through the rings", h.Dev.Name(), c.Get("samehost_tx_pkts"), c.Get("samehost_rx_pkts"))
		}
	}
}

func benchPingPong8(b *testing.B, a, c *host) {
	pp := newPingPong(b, a, c, a.RCQ, c.RCQ)
	pp.ping.Flags |= verbs.SendSignaled
	pp.pong.Flags |= verbs.SendSignaled
	wcs := make([]verbs.WC, 32)
	var outA, outC int
	// reap polls a send CQ once, as perftest does after each post.
	reap := func(cq *verbs.CQ, out *int) {
		k, err := cq.Poll(wcs)
		if err != nil {
			b.Fatal(err)
		}
		for _, wc := range wcs[:k] {
			if wc.Status != verbs.WCSuccess {
				b.Fatalf("send completion %+v", wc)
			}
		}
		*out -= k
		if *out > 32 {
			b.Fatalf("%d sends not completed", *out)
		}
	}
	one := wcs[:1]
	// turn is one side's half: post the message and reap this side's send CQ; the peer
	// sees the message and reposts its receive.
	turn := func(q *verbs.QP, wr verbs.SendWR, out *int, scq, peerRCQ *verbs.CQ, peer *verbs.QP, peerRecv verbs.RecvWR) {
		if err := q.PostSend(wr); err != nil {
			b.Fatal(err)
		}
		*out++
		reap(scq, out)
		spin(b, peerRCQ, one)
		peer.PostRecv(peerRecv)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		turn(pp.qa, pp.ping, &outA, a.CQ, c.RCQ, pp.qc, pp.recvC)
		turn(pp.qc, pp.pong, &outC, c.CQ, a.RCQ, pp.qa, pp.recvA)
	}
}

// BenchmarkRCWrite8RateInMemory is goverbs' own share of the small-message rate: 8-byte
// WRITEs on one QP between two busy-poll devices on an in-memory pipe, both driven from
// this goroutine (a post, then one poll of each device, as `goverbs write_bw -s 8
// --busy-poll` polls after each post), 128 outstanding, every 32nd signaled. ns/op is
// one message's user-space work on both sides, no kernel: the sender's post, requester,
// packet build and ICRC, and the receiver's input and ACK.
func BenchmarkRCWrite8RateInMemory(b *testing.B) {
	ea, ec := netip.MustParseAddrPort("127.10.0.4:4791"), netip.MustParseAddrPort("127.10.0.5:4791")
	ca, cc := netiotest.Pipe(ea, ec)
	a := newHostCfg(b, verbs.SoftConfig{Addr: ea.Addr(), Conn: ca, BusyPoll: true})
	c := newHostCfg(b, verbs.SoftConfig{Addr: ec.Addr(), Conn: cc, BusyPoll: true})
	benchWriteRate(b, a, c, 8)
}

// BenchmarkRCWrite8RateSameHost is BenchmarkRCWrite8RateInMemory through the same-host
// shortcut's shared-memory rings (see BenchmarkRCSendPingPong8SameHost): the engine's
// and the rings' share of `goverbs write_bw -s 8` between two processes on one host.
func BenchmarkRCWrite8RateSameHost(b *testing.B) {
	a := newHostCfg(b, verbs.SoftConfig{BusyPoll: true, SameHost: true})
	c := newHostCfg(b, verbs.SoftConfig{BusyPoll: true, SameHost: true})
	benchWriteRate(b, a, c, 8)
	checkRings(b, a, c)
}

// BenchmarkRCWrite64KSameHost is BenchmarkRCWrite8RateSameHost with 64 KiB WRITEs: the
// user-space work of both sides of `goverbs write_bw` through the rings per 64 KiB, the
// sender's copy into the ring and its ICRC, the receiver's ICRC and copy out of it, and
// each side's per-packet work, on one core (cpu-ns/op, the process's CPU time, is what
// to compare on a loaded machine). Between two processes each side does its half on a
// core of its own, and every line of the payload crosses from one core's cache to the
// other's, which this does not measure (docs/guide/same-host.md, "What is left").
func BenchmarkRCWrite64KSameHost(b *testing.B) {
	a := newHostCfg(b, verbs.SoftConfig{BusyPoll: true, SameHost: true})
	c := newHostCfg(b, verbs.SoftConfig{BusyPoll: true, SameHost: true})
	benchWriteRate(b, a, c, 64<<10)
	checkRings(b, a, c)
}

// benchWriteRate streams size-byte WRITEs on one QP from a to c, both busy-poll devices
// driven from this goroutine: a post, then one poll of each device, 128 outstanding,
// every 32nd signaled. It reports messages per second, and the process's CPU time per
// WRITE where the platform tells it (processCPU).
func benchWriteRate(b *testing.B, a, c *host, size int) {
	const depth, signalEvery = 128, 32
	qa, qc := qpWith(b, a, a.CQ, a.RCQ), qpWith(b, c, c.CQ, c.RCQ)
	connectedPair(b, a, c, qa, qc)
	src, dst := a.MR(b, max(size, 64), allAccess), c.MR(b, max(size, 64), allAccess)
	wr := verbs.SendWR{Opcode: verbs.WRRDMAWrite, SGL: []verbs.SGE{src.SGE(0, size)}, RemoteAddr: dst.Addr(), RKey: dst.RKey()}
	wcs := make([]verbs.WC, 16)
	inflight := 0
	// step polls each device once: the receiver takes what arrived and ACKs it, the
	// sender takes the ACKs and its completions.
	step := func() {
		if _, err := c.CQ.Poll(wcs); err != nil {
			b.Fatal(err)
		}
		k, err := a.CQ.Poll(wcs)
		if err != nil {
			b.Fatal(err)
		}
		for _, wc := range wcs[:k] {
			if wc.Status != verbs.WCSuccess {
				b.Fatalf("completion %+v", wc)
			}
		}
		inflight -= k * signalEvery
	}
	if size > 8 {
		b.SetBytes(int64(size))
	}
	b.ReportAllocs()
	cpu0 := processCPU()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		wr.Flags = 0
		if i%signalEvery == signalEvery-1 {
			wr.Flags = verbs.SendSignaled
		}
		for inflight >= depth {
			step()
		}
		if err := qa.PostSend(wr); err != nil {
			b.Fatal(err)
		}
		inflight++
		step()
	}
	b.StopTimer()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds()/1e6, "Mmsg/s")
	if cpu0 >= 0 {
		b.ReportMetric(float64(processCPU()-cpu0)/float64(b.N), "cpu-ns/op")
	}
}

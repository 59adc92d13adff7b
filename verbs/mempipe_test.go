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

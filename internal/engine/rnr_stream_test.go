package engine_test

import (
	"testing"
	"testing/synctest"
	"time"

	"github.com/goverbs/goverbs/netio/simnet"
	"github.com/goverbs/goverbs/verbs"
)

// TestRCSendStreamWithRNR streams SENDs, unsignaled but for every 16th, into a receiver
// that reposts its few receives late, so the responder answers RNR NAKs while later
// packets are already on their way; with some loss and reordering on top. Every message
// the requester completes must have reached a receive: the receiver's count of
// completions must reach what the requester reports, with every message in order.
func TestRCSendStreamWithRNR(t *testing.T) {
	for i, f := range []simnet.Faults{
		{Delay: 20 * time.Microsecond},
		{Loss: 0.02, Reorder: 0.02, ReorderDelay: 100 * time.Microsecond, Delay: 20 * time.Microsecond},
	} {
		synctest.Test(t, func(t *testing.T) {
			net := simnet.New(uint64(700+i), f)
			a, b := simHost(t, net, "127.0.100.1"), simHost(t, net, "127.0.100.2")
			params := defaultRC()
			params.MinRNR = 1 // 0.01 ms
			p := newPair(t, a, b, verbs.QPTypeRC, params)
			const msgs, size, recvs = 3000, 256, 8
			src := a.MR(t, size, allAccess)
			dst := b.MR(t, recvs*size, allAccess)
			// The receiver posts its receives only after the first messages have left, as
			// a perftest server that is still setting up does.
			go func() {
				time.Sleep(50 * time.Microsecond)
				for k := range recvs {
					p.QB.PostRecv(verbs.RecvWR{ID: uint64(k), SGL: []verbs.SGE{dst.SGE(k*size, size)}})
					time.Sleep(5 * time.Microsecond)
				}
			}()
			wcs := make([]verbs.WC, 64)
			posted, completed, received := 0, 0, 0
			deadline := time.Now().Add(60 * time.Second)
			for completed < msgs || received < completed {
				if time.Now().After(deadline) {
					t.Fatalf("stuck: posted %d, completed %d, received %d\nA %s\nB %s",
						posted, completed, received, debugA(p), debugB(p))
				}
				for posted < msgs && posted-completed < 64 {
					src.Buf()[0] = byte(posted)
					w := verbs.SendWR{ID: uint64(posted), Opcode: verbs.WRSend, SGL: []verbs.SGE{src.SGE(0, size)}, Flags: verbs.SendInline}
					if posted%16 == 15 || posted == msgs-1 {
						w.Flags |= verbs.SendSignaled
					}
					if err := p.QA.PostSend(w); err != nil {
						t.Fatal(err)
					}
					posted++
				}
				k, _ := a.CQ.Poll(wcs)
				for _, wc := range wcs[:k] {
					if wc.Status != verbs.WCSuccess {
						t.Fatalf("send %d: %v (received %d)", wc.ID, wc.Status, received)
					}
					completed = int(wc.ID) + 1
				}
				// The receiver is slow: it looks at its CQ only every 200 µs.
				time.Sleep(200 * time.Microsecond)
				k, _ = b.RCQ.Poll(wcs)
				for _, wc := range wcs[:k] {
					if wc.Status != verbs.WCSuccess {
						t.Fatalf("receive: %v", wc.Status)
					}
					slot := int(wc.ID)
					if got := dst.Buf()[slot*size]; got != byte(received) {
						t.Fatalf("message %d arrived as %d", received, got)
					}
					received++
					p.QB.PostRecv(verbs.RecvWR{ID: uint64(slot), SGL: []verbs.SGE{dst.SGE(slot*size, size)}})
				}
			}
			t.Logf("faults %+v: %d messages; B RNR NAKs sent %d; %+v", f, msgs, p.QB.Counters().RNRNakSent, net.Stats())
		})
	}
}

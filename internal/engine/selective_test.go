package engine_test

import (
	"bytes"
	"fmt"
	"net/netip"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/goverbs/goverbs/internal/engine"
	"github.com/goverbs/goverbs/internal/softtest"
	"github.com/goverbs/goverbs/netio/simnet"
	"github.com/goverbs/goverbs/verbs"
	"github.com/goverbs/goverbs/wire"
)

// Selective repeat (selective.go) on simnet under testing/synctest.

func srHost(t *testing.T, n *simnet.Network, addr string, sr bool) *host {
	t.Helper()
	c, err := n.Listen(netip.AddrPortFrom(netip.MustParseAddr(addr), wire.UDPPort))
	if err != nil {
		t.Fatal(err)
	}
	return newHostCfg(t, verbs.SoftConfig{Addr: netip.MustParseAddr(addr), Conn: c, MTU: verbs.MTU1024, SelectiveRepeat: sr})
}

// writeAndCheck posts count RDMA WRITEs of size bytes from a to b on p's QPs, each
// signaled, and fails the test unless every one completes successfully and b's memory
// holds exactly a's bytes (filled from seed).
func writeAndCheck(t *testing.T, p *pair, a, b *host, size, count int, seed uint64) {
	t.Helper()
	src, dst := a.MR(t, size*count, allAccess), b.MR(t, size*count, allAccess)
	softtest.Fill(src.Buf(), seed)
	for i := range count {
		if err := p.QA.PostSend(verbs.SendWR{ID: uint64(i), Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled,
			SGL: []verbs.SGE{src.SGE(i*size, size)}, RemoteAddr: dst.Addr() + uint64(i*size), RKey: dst.RKey()}); err != nil {
			t.Fatal(err)
		}
	}
	for _, wc := range softtest.WaitWC(t, a.CQ, count, 10*time.Second) {
		if wc.Status != verbs.WCSuccess {
			t.Fatalf("completion %+v", wc)
		}
	}
	if !bytes.Equal(src.Buf(), dst.Buf()) {
		t.Fatal("the WRITEs' bytes differ at the responder")
	}
}

// TestSelectiveRepeatMixedInterop: every kind of RC work, every byte and atomic checked,
// over a network that loses, reorders and duplicates, with selective repeat on both
// ends, on the requester only and on the responder only: a side without it runs
// go-back-N, and the pair still delivers everything exactly once.
func TestSelectiveRepeatMixedInterop(t *testing.T) {
	f := simnet.Faults{Loss: 0.05, Reorder: 0.05, Duplicate: 0.05, ReorderDelay: 200 * time.Microsecond,
		Delay: 20 * time.Microsecond, Jitter: 10 * time.Microsecond}
	n := 3000
	if testing.Short() || engine.RaceEnabled {
		n = 600
	}
	for i, c := range []struct{ a, b bool }{{true, true}, {true, false}, {false, true}} {
		t.Run(fmt.Sprintf("requester=%v,responder=%v", c.a, c.b), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				net := simnet.New(uint64(3100+i), f)
				// Fates per source: the two devices' goroutines send at the same instants
				// (each answering what arrived then), and from one shared generator the
				// order they reached it in changed the run (simnet.RandomPerSource).
				net.RandomPerSource()
				a, b := srHost(t, net, "127.0.101.1", c.a), srHost(t, net, "127.0.101.2", c.b)
				mixedStream(t, a, b, n, 3000, uint64(i))
				ca, cb := a.Dev.Counters(), b.Dev.Counters()
				t.Logf("A: retransmits %d selective %d timeouts %d; B: ooo_kept %d", ca.Get("retransmits"),
					ca.Get("selective_retransmits"), ca.Get("retry_timeouts"), cb.Get("ooo_kept"))
				if c.a && c.b && (ca.Get("selective_retransmits") == 0 || cb.Get("ooo_kept") == 0) {
					t.Error("both ends with selective repeat, and none was used")
				}
				if !c.a && ca.Get("selective_retransmits") != 0 || !c.b && cb.Get("ooo_kept") != 0 {
					t.Error("selective repeat on a side that has it off")
				}
				a.Dev.Close()
				b.Dev.Close()
			})
		})
	}
}

// lossResult is one loss run's figures.
type lossResult struct {
	goodput                 float64
	lost                    uint64 // datagrams the link lost, data direction
	retransmits, selective  uint64
	timeouts, kept, seqNaks uint64
}

func (r lossResult) String() string {
	return fmt.Sprintf("%.3f Gb/s, lost %d, retransmitted %d (selective %d), timeouts %d, kept %d, sequence NAKs %d",
		r.goodput/1e9, r.lost, r.retransmits, r.selective, r.timeouts, r.kept, r.seqNaks)
}

// runLoss runs one RC WRITE stream (sixteen 64 KiB WRITEs posted, MTU 4096) at
// 10 Gb/s with a 100 µs round trip (two 25 µs hops each way, through one switch) and
// loss on the link into the responder only.
func runLoss(t *testing.T, sr bool, loss float64, warm, dur time.Duration) lossResult {
	return runLossBoth(t, sr, loss, 0, 0, verbs.MTU4096, 25*time.Microsecond, warm, dur)
}

// runLossBoth is runLoss at path MTU mtu, hop delay, with ackBlackout: for that long, a few
// milliseconds into the measured run, the link into the requester loses everything (its
// ACKs and SACKs), so that its retransmit timer fires.
func runLossBoth(t *testing.T, sr bool, loss float64, ackBlackout time.Duration, seed uint64, mtu verbs.MTU, delay, warm, dur time.Duration) lossResult {
	if seed == 0 {
		seed = 41
	}
	var r lossResult
	synctest.Test(t, func(t *testing.T) {
		n := simnet.New(seed, simnet.Faults{})
		defer n.Close()
		sw := n.AddSwitch("s", simnet.SwitchConfig{})
		link := simnet.Link{Bandwidth: 10e9, Delay: delay}
		_, toA, _ := n.Attach(netip.MustParseAddr("10.32.0.1"), sw, link)
		_, toB, _ := n.Attach(netip.MustParseAddr("10.32.0.2"), sw, link)
		toB.SetLink(simnet.Link{Bandwidth: 10e9, Delay: delay, Loss: loss})
		if ackBlackout > 0 {
			time.AfterFunc(warm+5*time.Millisecond, func() {
				toA.SetLink(simnet.Link{Bandwidth: 10e9, Delay: delay, Loss: 1})
				time.AfterFunc(ackBlackout, func() { toA.SetLink(link) })
			})
		}
		mk := func(addr string) *host {
			c, err := n.Listen(netip.AddrPortFrom(netip.MustParseAddr(addr), wire.UDPPort))
			if err != nil {
				t.Fatal(err)
			}
			return newHostCfg(t, verbs.SoftConfig{Addr: netip.MustParseAddr(addr), Conn: c, MTU: mtu, SelectiveRepeat: sr})
		}
		a, b := mk("10.32.0.1"), mk("10.32.0.2")
		params := defaultRC()
		params.MTU = mtu
		params.Timeout = 8 // 1 ms
		p := newPair(t, a, b, verbs.QPTypeRC, params)
		start := time.Now()
		got, err := ccWriteStream(t, p, 64<<10, 16, start.Add(warm), start.Add(warm+dur))
		if err != nil {
			t.Fatal(err)
		}
		r.goodput = float64(got) * 8 / dur.Seconds()
		ca, cb := a.Dev.Counters(), b.Dev.Counters()
		r.lost = toB.Stats().LinkLoss
		r.retransmits, r.selective, r.timeouts = ca.Get("retransmits"), ca.Get("selective_retransmits"), ca.Get("retry_timeouts")
		r.kept, r.seqNaks = cb.Get("ooo_kept"), cb.Get("out_of_seq_nak_sent")
		a.Dev.Close()
		b.Dev.Close()
	})
	return r
}

// TestSelectiveRepeatLoss: 1% random loss at a 100 µs round trip, one RC stream: with
// selective repeat the goodput stays near the lossless one and each lost packet costs
// about one retransmitted packet; go-back-N's figure beside it.
func TestSelectiveRepeatLoss(t *testing.T) {
	warm, dur := 10*time.Millisecond, 60*time.Millisecond
	if engine.RaceEnabled || testing.Short() {
		warm, dur = 5*time.Millisecond, 10*time.Millisecond
	}
	lossless := runLoss(t, true, 0, warm, dur)
	sr := runLoss(t, true, 0.01, warm, dur)
	gbn := runLoss(t, false, 0.01, warm, dur)
	t.Logf("lossless:                %v", lossless)
	t.Logf("selective repeat, 1%%:   %v (%.1f%% of lossless)", sr, 100*sr.goodput/lossless.goodput)
	t.Logf("go-back-N, 1%%:          %v (%.1f%% of lossless)", gbn, 100*gbn.goodput/lossless.goodput)
	if sr.goodput < 0.9*lossless.goodput {
		t.Errorf("selective repeat kept %.1f%% of the lossless goodput, want ≥ 90%%", 100*sr.goodput/lossless.goodput)
	}
	// One lost packet, one retransmitted packet (a loss in the run's last round trip
	// may not be resent by its end); none by go-back-N after a timeout.
	if sr.lost == 0 || sr.retransmits > sr.lost || sr.retransmits+2 < sr.lost || sr.selective != sr.retransmits {
		t.Errorf("selective repeat: %d lost, %d retransmitted (%d selectively); want one per loss", sr.lost, sr.retransmits, sr.selective)
	}
	if gbn.goodput >= sr.goodput {
		t.Errorf("go-back-N did as well as selective repeat")
	}
}

// TestRetryAfterACKBlackout: the requester's ACKs are lost for a few retransmit
// timeouts in the middle of a WRITE stream at MTU 1024 (64 packets a message), with and
// without selective repeat; the stream must go on once they come back. What the
// requester resends after a timeout must ask for an ACK within the first window (its
// window is more than the 64 packets between AckReqs of an unsignaled stream), since the
// responder answers a duplicate only when it asks (9.7.5.1.5).
func TestRetryAfterACKBlackout(t *testing.T) {
	warm, dur := 5*time.Millisecond, 30*time.Millisecond
	for _, sr := range []bool{true, false} {
		r := runLossBoth(t, sr, 0, 4*time.Millisecond, 7, verbs.MTU1024, 2500*time.Nanosecond, warm, dur)
		t.Logf("selective repeat %v: %v", sr, r)
		if r.goodput == 0 {
			t.Errorf("selective repeat %v: nothing delivered", sr)
		}
		if r.timeouts == 0 {
			t.Errorf("selective repeat %v: the blackout caused no timeout; the test tests nothing", sr)
		}
	}
}

// TestSelectiveRepeatPlacesEarly: long WRITEs (64 packets at MTU 1024) over a link that
// loses 3% of the requests: the packets kept beyond a gap are written into their target
// as they arrive (placeEarly) or from the kept copy, and either way every byte lands
// where it belongs, each WRITE's last packet last.
func TestSelectiveRepeatPlacesEarly(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := simnet.New(77, simnet.Faults{})
		defer n.Close()
		sw := n.AddSwitch("s", simnet.SwitchConfig{})
		link := simnet.Link{Bandwidth: 10e9, Delay: 10 * time.Microsecond}
		n.Attach(netip.MustParseAddr("10.33.0.1"), sw, link)
		_, toB, _ := n.Attach(netip.MustParseAddr("10.33.0.2"), sw, link)
		toB.SetLink(simnet.Link{Bandwidth: 10e9, Delay: 10 * time.Microsecond, Loss: 0.03})
		a, b := srHost(t, n, "10.33.0.1", true), srHost(t, n, "10.33.0.2", true)
		p := newPair(t, a, b, verbs.QPTypeRC, defaultRC())
		const size, count = 64 << 10, 24
		writeAndCheck(t, p, a, b, size, count, 77)
		if kept := b.Dev.Counters().Get("ooo_kept"); kept == 0 || toB.Stats().LinkLoss == 0 {
			t.Fatalf("%d kept, %d lost: the test tests nothing", kept, toB.Stats().LinkLoss)
		}
		a.Dev.Close()
		b.Dev.Close()
	})
}

// TestSelectiveTimeout: a WRITE stream loses one request packet, the retransmission a
// SACK asks for and every probe's resend of it, until the local ACK timeout fires. With
// selective repeat on both ends the timeout resends only what the responder has neither
// acknowledged nor kept (SendWindow.Timeout): that one PSN, not everything after it as
// going back N did. Against a go-back-N responder (no SACK ever seen) the timeout still
// goes back N. Either way every byte arrives and every WRITE completes.
func TestSelectiveTimeout(t *testing.T) {
	for i, c := range []struct {
		name      string
		responder bool // selective repeat at the responder
	}{{"selective-responder", true}, {"go-back-N-responder", false}} {
		t.Run(c.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				n := simnet.New(uint64(91+i), simnet.Faults{})
				defer n.Close()
				sw := n.AddSwitch("s", simnet.SwitchConfig{})
				link := simnet.Link{Bandwidth: 10e9, Delay: 10 * time.Microsecond}
				n.Attach(netip.MustParseAddr("10.34.0.1"), sw, link)
				n.Attach(netip.MustParseAddr("10.34.0.2"), sw, link)
				a, b := srHost(t, n, "10.34.0.1", true), srHost(t, n, "10.34.0.2", c.responder)
				const lost = 0xabc000 + 100 // 100 after A's send PSN (softtest.NewPair)
				var mu sync.Mutex
				sent := map[wire.PSN]int{} // request PSN → copies sent
				dropped := 0
				toB := netip.MustParseAddr("10.34.0.2")
				n.SetFilter(func(src, dst netip.AddrPort, pkt []byte) simnet.Verdict {
					if len(pkt) < wire.BTHLen || dst.Addr() != toB {
						return simnet.Pass
					}
					psn := wire.BTH(pkt).PSN()
					mu.Lock()
					defer mu.Unlock()
					sent[psn]++
					// Lost until the first timeout: the first copy, the SACK's resend, the probes'.
					if psn == lost && a.Dev.Counters().Get("retry_timeouts") == 0 {
						dropped++
						return simnet.Drop
					}
					return simnet.Pass
				})
				params := defaultRC()
				params.Timeout = 8 // 1 ms
				p := newPair(t, a, b, verbs.QPTypeRC, params)
				const size, count = 64 << 10, 16 // 1024 packets at MTU 1024, within the span
				writeAndCheck(t, p, a, b, size, count, 91)
				ca := a.Dev.Counters()
				mu.Lock()
				var again []wire.PSN // PSNs sent more than once
				for psn, k := range sent {
					if k > 1 {
						again = append(again, psn)
					}
				}
				total, drops := len(sent), dropped
				mu.Unlock()
				t.Logf("%d PSNs sent, %d sent again, the lost one %d times (%d dropped); timeouts %d, retransmits %d (selective %d)",
					total, len(again), sent[lost], drops, ca.Get("retry_timeouts"), ca.Get("retransmits"), ca.Get("selective_retransmits"))
				if total != size*count/1024 || drops < 2 || ca.Get("retry_timeouts") == 0 {
					t.Fatalf("%d PSNs, %d drops of PSN %#x, %d timeouts: the test tests nothing", total, drops, lost, ca.Get("retry_timeouts"))
				}
				if c.responder {
					if len(again) != 1 || again[0] != lost {
						t.Errorf("resent %d PSNs (%v…), want only the lost one %#x", len(again), again[:min(len(again), 4)], lost)
					}
					if ca.Get("selective_retransmits") != ca.Get("retransmits") {
						t.Errorf("%d retransmits, %d of them selective: a timeout went back N", ca.Get("retransmits"), ca.Get("selective_retransmits"))
					}
				} else {
					if ca.Get("selective_retransmits") != 0 {
						t.Errorf("%d selective retransmits to a responder that never SACKs", ca.Get("selective_retransmits"))
					}
					if len(again) < 2 {
						t.Errorf("resent %d PSNs: go-back-N resends everything after the loss", len(again))
					}
				}
				a.Dev.Close()
				b.Dev.Close()
			})
		})
	}
}

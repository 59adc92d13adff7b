package engine

import (
	"encoding/binary"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/goverbs/goverbs/netio"
	"github.com/goverbs/goverbs/netio/netiotest"
	"github.com/goverbs/goverbs/verbs/driver"
	"github.com/goverbs/goverbs/wire"
)

// TestRequesterNeverReusesAPSN plays a responder that answers in random legal orders:
// ACKs of anything sent, RNR NAKs and sequence NAKs anywhere in the window, crossing one
// another and the requester's timers. Whatever it does, a PSN must always carry the same
// message (a PSN reused for another message is taken for a duplicate by a real responder:
// acknowledged, never delivered), and every message must complete, in order.
func TestRequesterNeverReusesAPSN(t *testing.T) {
	t.Run("sends", func(t *testing.T) { psnModel(t, false, 8) })
	t.Run("sends, reads and atomics", func(t *testing.T) { psnModel(t, true, 8) })
	t.Run("three-packet sends", func(t *testing.T) { psnModel(t, false, 2500) })
}

// psnModel runs the model; with reads, every third message is an 8-byte RDMA READ and
// every seventh left a FETCH_ADD, which this responder answers only once they are the
// oldest outstanding request (responses leave in PSN order); an ACK beyond an unanswered
// one is the implied NAK the requester must resend it for.
//
// Sends of size bytes (MTU 1024) carry their message number at the start of every
// packet's payload; an RNR NAK names only a message's first packet, as a responder
// refuses a message when it begins.
func psnModel(t *testing.T, reads bool, size int) {
	for seed := range uint64(4) {
		for attempt := 1; ; attempt++ {
			silence := psnModelRun(t, reads, size, seed)
			if silence == 0 {
				break
			}
			if attempt == 10 {
				t.Fatalf("seed %d: retry counter exceeded in %d runs, each after this goroutine stalled (last for %v)", seed, attempt, silence)
			}
			t.Logf("seed %d: retry counter exceeded after this goroutine stalled for %v: running the seed again", seed, silence)
		}
	}
}

// The requester's local ACK timeout (IBTA 9.7.6.1.3: 4.096 µs × 2^8, about 1 ms) and
// retry count: short, so that timeouts cross the model's answers all the time.
const psnModelTimeout, psnModelRetries = 8, 7

// psnModelStall is how long the model (this goroutine) must have been silent, within
// psnModelRecent before a retry-exceeded completion, for that completion to be the
// model's fault rather than the requester's: half of the retry budget, (retry_cnt + 1)
// timeouts without progress. On a loaded machine the test goroutine is sometimes not
// scheduled for 10–200 ms while the device's timers keep running; every timeout in such
// a silence is legitimately spent, and once the budget is gone the requester must give
// up. A requester that gives up while the model keeps answering is still a failure.
var (
	psnModelStall  = (psnModelRetries + 1) * timeoutDuration(psnModelTimeout) / 2
	psnModelRecent = 100 * time.Millisecond
)

// psnModelRun plays one seed. It returns zero when every message completed in order, or
// the model's longest silence when the requester exceeded its retry count after a stall
// of at least psnModelStall (the run proves nothing then, and the caller runs the seed
// again). Anything else that goes wrong fails the test.
func psnModelRun(t *testing.T, reads bool, size int, seed uint64) (stalled time.Duration) {
	const readBase, readKey, readMark = 0x1000, 0x42, 1_000_000
	rng := rand.New(rand.NewPCG(seed, 99))
	conn := netiotest.NewConn(fuzzLocal)
	conn.KeepWritten()
	dev, pd, cq, qp := rcOnConn(t, "psnmodel", conn, wire.MTU1024, 1024,
		driver.QPCap{MaxSendWR: 64, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1})
	defer dev.Close()
	all := driver.AccessLocalWrite | driver.AccessRemoteWrite | driver.AccessRemoteRead | driver.AccessRemoteAtomic
	must(t, qp.Modify(&driver.QPAttr{State: driver.QPStateInit, Port: 1, AccessFlags: all}, driver.QPAttrState|driver.QPAttrPort|driver.QPAttrPKeyIndex|driver.QPAttrAccessFlags))
	must(t, qp.Modify(&driver.QPAttr{State: driver.QPStateRTR, AH: driver.AHAttr{DGID: AddrToGID(fuzzPeer.Addr()), Port: 1},
		PathMTU: wire.MTU1024, DestQPN: fuzzPeerQPN, MaxDestRdAtomic: 16, MinRNRTimer: 1},
		driver.QPAttrState|driver.QPAttrAV|driver.QPAttrPathMTU|driver.QPAttrDestQPN|driver.QPAttrRQPSN|driver.QPAttrMaxDestRdAtomic|driver.QPAttrMinRNRTimer))
	must(t, qp.Modify(&driver.QPAttr{State: driver.QPStateRTS, SQPSN: fuzzSQPSN, Timeout: psnModelTimeout, RetryCnt: psnModelRetries, RNRRetry: 7, MaxRdAtomic: 16},
		driver.QPAttrState|driver.QPAttrSQPSN|driver.QPAttrTimeout|driver.QPAttrRetryCnt|driver.QPAttrRNRRetry|driver.QPAttrMaxQPRdAtomic))
	const msgs = 300
	slot := max(8, (size+1023)/1024*1024)
	mem := make([]byte, slot*msgs)
	mr, err := pd.regMR(mem, driver.AccessLocalWrite)
	if err != nil {
		t.Fatal(err)
	}
	isAtomic := func(m int) bool { return reads && m%7 == 6 && m%3 != 2 }
	needsAnswer := func(m int) bool { return reads && (m%3 == 2 || isAtomic(m)) } // a READ or an atomic
	psnMsg := map[wire.PSN]uint64{}                                               // which message each PSN carried
	first := map[wire.PSN]bool{}                                                  // PSNs that begin a message
	high := wire.PSN(fuzzSQPSN)                                                   // the PSN after the highest seen
	acked := wire.PSN(fuzzSQPSN)                                                  // the PSN after the highest this responder acknowledged
	check := func() {
		for _, b := range conn.TakeWritten() {
			var p wire.Packet
			if p.Parse(b, 0) != nil || !p.Op.Flags.Has(wire.OpSend) && p.BTH.Opcode() != wire.RCReadRequest && p.BTH.Opcode() != wire.RCFetchAdd {
				t.Fatalf("seed %d: sent something other than a SEND, READ or FETCH_ADD", seed)
			}
			psn := p.BTH.PSN()
			var m uint64
			switch {
			case p.RETH != nil:
				m = (p.RETH.VA() - readBase) / 8
			case p.AtomicETH != nil:
				m = (p.AtomicETH.VA() - readBase) / 8
			default:
				m = binary.LittleEndian.Uint64(p.Payload)
			}
			if prev, ok := psnMsg[psn]; ok && prev != m {
				t.Fatalf("seed %d: PSN %#x carried message %d, now message %d", seed, uint32(psn), prev, m)
			}
			psnMsg[psn] = m
			first[psn] = p.Op.Flags.Has(wire.First) || p.Op.Flags.Has(wire.Only)
			if !psn.Before(high) {
				high = psn.Add(1)
			}
		}
	}
	respond := func(syn wire.Syndrome, psn wire.PSN) { deliverAck(conn, qp.QPN(), syn, psn) }
	answer := func(psn wire.PSN, m uint64) {
		h := wire.Headers{BTH: wire.BTHFields{Opcode: wire.RCReadResponseOnly, PKey: 0xffff, DestQP: qp.QPN(), PSN: psn},
			AETH: wire.AETHFields{Syndrome: wire.ACKSyndrome(wire.CreditsInvalid)}}
		payload := 8
		if isAtomic(int(m)) {
			h.BTH.Opcode, h.AtomicAckETH, payload = wire.RCAtomicAck, m+readMark, 0
		}
		b := make([]byte, h.Len()+payload+wire.ICRCLen)
		hl := h.Encode(b)
		if payload > 0 {
			binary.LittleEndian.PutUint64(b[hl:], m+readMark)
		}
		n := wire.Finish(b, hl, payload)
		ip := wire.IPHeader{Src: fuzzPeer.Addr(), Dst: fuzzLocal.Addr(), SrcPort: fuzzPeer.Port(), DstPort: fuzzLocal.Port(), DF: true}
		wire.PutICRC(&ip, b, n)
		conn.Deliver([]netio.Message{{Buf: b, N: len(b), Addr: fuzzPeer}}, 1)
	}
	// firstAnswer is the PSN of the oldest unanswered READ or atomic from acked on (high
	// if none).
	firstAnswer := func() wire.PSN {
		for x := acked; x.Before(high); x = x.Add(1) {
			if m, ok := psnMsg[x]; ok && needsAnswer(int(m)) {
				return x
			}
		}
		return high
	}
	posted, completed := 0, 0
	steps := []time.Time{time.Now()} // when each step of the model began
	// recentSilence is the model's longest silence in the last psnModelRecent.
	recentSilence := func() time.Duration {
		now := time.Now()
		longest, later := time.Duration(0), now
		for i := len(steps) - 1; i >= 0; i-- {
			longest, later = max(longest, later.Sub(steps[i])), steps[i]
			if now.Sub(steps[i]) >= psnModelRecent {
				break
			}
		}
		return longest
	}
	wcs := make([]driver.WC, 64)
	poll := func() {
		k, _ := cq.Poll(wcs)
		for _, wc := range wcs[:k] {
			if wc.Status == driver.WCRetryExcErr && wc.ID == uint64(completed) {
				if s := recentSilence(); s >= psnModelStall {
					stalled = s
					return
				}
			}
			if wc.Status != driver.WCSuccess || wc.ID != uint64(completed) {
				t.Fatalf("seed %d: completion %+v, want message %d done", seed, wc, completed)
			}
			if needsAnswer(completed) { // a READ's data or an atomic's original value
				if got := binary.LittleEndian.Uint64(mem[slot*completed:]); got != uint64(completed)+readMark {
					t.Fatalf("seed %d: READ or atomic %d completed with %d in its buffer", seed, completed, got)
				}
			}
			completed++
		}
	}
	for step := 0; completed < msgs; step++ {
		steps = append(steps, time.Now())
		if step > 20000 {
			t.Fatalf("seed %d: %d of %d messages completed after %d steps", seed, completed, msgs, step)
		}
		for posted < msgs && posted-completed < 32 && rng.IntN(2) == 0 {
			for off := 0; off < size; off += 1024 {
				binary.LittleEndian.PutUint64(mem[slot*posted+off:], uint64(posted))
			}
			wr := driver.SendWR{ID: uint64(posted), Opcode: driver.WRSend, Flags: driver.SendSignaled,
				SGL: []driver.SGE{{Addr: mr.Addr() + uint64(slot*posted), Length: uint32(size), LKey: mr.LKey()}}}
			if needsAnswer(posted) {
				wr.Opcode, wr.RemoteAddr, wr.RKey = driver.WRRDMARead, readBase+uint64(8*posted), readKey
				wr.SGL[0].Length = 8
			}
			if isAtomic(posted) {
				wr.Opcode, wr.CompareAdd = driver.WRAtomicFetchAdd, 1
			}
			must(t, qp.PostSend([]driver.SendWR{wr}))
			posted++
		}
		time.Sleep(time.Duration(rng.IntN(40)) * time.Microsecond) // let sends and timers run
		check()
		if span := high.Diff(acked); span > 0 {
			fr := firstAnswer()
			at := acked.Add(uint32(rng.IntN(int(span)))) // somewhere in what is outstanding
			switch r := rng.IntN(5); {
			case fr == acked && r < 2: // the oldest is a READ: answer it
				answer(fr, psnMsg[fr])
				acked = fr.Add(1)
			case r == 0 && !at.After(fr) && at != fr && first[at]:
				respond(wire.RNRNAKSyndrome(1+uint8(rng.IntN(3))), at)
				acked = at // a NAK for at acknowledges what came before it
			case r == 1 && !at.After(fr):
				respond(wire.NAKSyndrome(wire.NAKPSNSeqError), at)
				acked = at
			default:
				// An ACK through at; past an unanswered READ it is an implied NAK for it.
				respond(wire.ACKSyndrome(wire.CreditsInvalid), at)
				if at.Before(fr) {
					acked = at.Add(1)
				} else {
					acked = fr
				}
			}
		}
		poll()
		if stalled > 0 {
			return stalled
		}
		check()
	}
	c := &dev.counters
	t.Logf("seed %d: %d messages, %d retransmitted packets, %d RNR NAKs, %d sequence NAKs, %d implied NAKs, %d timeouts",
		seed, msgs, c.Retransmits.Load(), c.RNRNakReceived.Load(), c.SeqNakReceived.Load(), c.ImpliedNak.Load(), c.RetryTimeouts.Load())
	return 0
}

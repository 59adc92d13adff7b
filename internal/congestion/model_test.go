package congestion

import (
	"fmt"
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/goverbs/goverbs/netio"
	"github.com/goverbs/goverbs/netio/simnet"
	"github.com/goverbs/goverbs/wire"
)

// This file is a model of RC traffic on the simnet fabric, for the incast and loss
// experiments: NOT the engine. Each sender is one RC QP with an endless SEND of
// MTU-sized packets (go-back-N as rxe and goverbs do today, or IRN-style selective
// repeat with this package's Tracker and SendWindow), paced by this package's RP
// when congestion control is on; the receiver answers with ACKs, NAKs and, on CE,
// CNPs paced by this package's NP. Packets carry real BTH/AETH headers (wire) so
// that what crosses the fabric has a RoCEv2 packet's size. The engine's requester,
// responder and completer are wired to this package later (docs/congestion.md);
// these tests show what the building blocks do on a fabric, deterministically.

type modelConfig struct {
	senders   int
	cc        Config
	bandwidth float64       // every link, bits per second
	delay     time.Duration // every link's propagation delay
	queue     int           // switch port capacity, bytes
	red       simnet.RED
	lossUp    float64 // loss on each sender's link towards the switch
	duration  time.Duration
	warmup    time.Duration // excluded from the goodput and queue figures
	mtu       int           // payload bytes per packet
	window    int           // packets in flight per QP
	selective bool          // IRN-style selective repeat instead of go-back-N
	rto       time.Duration // retransmission timeout
	ackEvery  int           // the receiver ACKs every ackEvery in-order packets
	seed      uint64
}

// modelMarking is the DCQCN paper's RED thresholds (Kmin 5 KB, Kmax 200 KB)
// with the HPCC simulator's Pmax (0.2, run.py PMAX_MAP), marked as the
// simulator's switch marks: on dequeue. With the paper's Pmax of 1% the queue
// sat at Kmax (about 205 KB); marked on enqueue, the start of an incast
// overflowed the 1 MB queue before the first marks reached the receiver
// (docs/congestion.md has the figures).
var modelMarking = simnet.RED{Kmin: 5 << 10, Kmax: 200 << 10, Pmax: 0.2, OnDequeue: true}

// rxe's defaults where the model needs one: 128 unacknowledged PSNs, an ACK at
// least every 64 packets (we ACK more often, as goverbs does under load), and a
// timeout of 4.096 µs × 2^8 ≈ 1 ms.
func defaultModel(senders int, cc Config) modelConfig {
	return modelConfig{
		senders:   senders,
		cc:        cc,
		bandwidth: 10e9,
		delay:     time.Microsecond,
		queue:     1 << 20,
		red:       modelMarking,
		duration:  time.Second,
		warmup:    100 * time.Millisecond,
		mtu:       4096,
		window:    128,
		rto:       4096 * time.Nanosecond << 8,
		ackEvery:  8,
		seed:      1,
	}
}

// shorten returns mc with its virtual time cut to a fifth under the race detector
// (see raceEnabled), the warm-up included.
func shorten(mc modelConfig) modelConfig {
	if raceEnabled {
		mc.duration /= 5
		mc.warmup /= 5
	}
	return mc
}

type flowResult struct {
	Goodput  float64 // payload bits per second delivered in order, after the warm-up
	Sent     int     // data packets sent
	Retrans  int     // of which retransmissions
	Timeouts int
	CNPs     uint64 // received by the sender
	Cuts     uint64
}

type modelResult struct {
	Flows     []flowResult
	Aggregate float64 // sum of Goodput
	Jain      float64
	// Queue of the receiver's switch port, sampled every 10 µs after the warm-up:
	// percentiles in bytes, and the fraction of samples within [Kmin, Kmax].
	QueueP    [5]int // 1st, 10th, 50th, 90th, 99th percentile
	InKRange  float64
	Net       simnet.Stats
	Port      simnet.PortStats
	SendBytes int // UDP payload bytes of a data packet
}

func (r modelResult) String() string {
	s := fmt.Sprintf("aggregate %.3f Gb/s, Jain %.4f, queue p1/p10/p50/p90/p99 %v B, in [Kmin,Kmax] %.1f%%, tail drops %d, marked %d",
		r.Aggregate/1e9, r.Jain, r.QueueP, 100*r.InKRange, r.Net.TailDrop, r.Net.Marked)
	for i, f := range r.Flows {
		s += fmt.Sprintf("\n  flow %d: %.3f Gb/s, sent %d, retransmitted %d, timeouts %d, CNPs %d, cuts %d",
			i, f.Goodput/1e9, f.Sent, f.Retrans, f.Timeouts, f.CNPs, f.Cuts)
	}
	return s
}

const (
	dataOp = wire.RCSendMiddle
	qpBase = 0x100
)

type modelSender struct {
	conn         netio.Conn
	rp           *RP
	sw           *SendWindow // selective repeat
	una, next    int         // go-back-N: oldest unacknowledged, next to send
	highest      int         // one past the highest PSN ever sent
	lastProgress time.Time
	wakeAt       time.Time // wake(), as of the last time the sender was touched
	res          flowResult
	msgs         []netio.Message
	bufs         [][]byte // the data packets of a batch, reused: WriteBatch copies
}

type modelFlow struct {
	np        NP
	expected  int
	naked     bool
	tr        *Tracker // selective repeat
	sinceAck  int
	delivered int64 // payload bytes in order, after the warm-up
}

func runModel(t testing.TB, mc modelConfig) modelResult {
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	n := simnet.NewManual(mc.seed, simnet.Faults{}, start)
	defer n.Close()
	n.SetQueueLimit(1 << 20)
	sw := n.AddSwitch("tor", simnet.SwitchConfig{QueueBytes: mc.queue, ECN: mc.red})
	host := func(i int) netip.Addr { return netip.AddrFrom4([4]byte{10, 0, 0, byte(i + 1)}) }
	rxAddr := host(mc.senders)
	_, toRx, err := n.Attach(rxAddr, sw, simnet.Link{Bandwidth: mc.bandwidth, Delay: mc.delay})
	if err != nil {
		t.Fatal(err)
	}
	rx, _ := n.Listen(netip.AddrPortFrom(rxAddr, 4791))
	pktLen := wire.BTHLen + mc.mtu + wire.ICRCLen
	senders := make([]*modelSender, mc.senders)
	flows := make([]*modelFlow, mc.senders)
	byAddr := map[netip.AddrPort]int{}
	for i := range senders {
		l := simnet.Link{Bandwidth: mc.bandwidth, Delay: mc.delay}
		up, _, err := n.Attach(host(i), sw, l)
		if err != nil {
			t.Fatal(err)
		}
		l.Loss = mc.lossUp // data only: the ACKs come back on the other direction
		up.SetLink(l)
		c, _ := n.Listen(netip.AddrPortFrom(host(i), 4791))
		s := &modelSender{conn: c, rp: NewRP(mc.cc, start), lastProgress: start}
		if mc.selective {
			s.sw = NewSendWindow(0, mc.window)
		}
		span := mc.window
		if s.sw != nil {
			span = s.sw.Span()
		}
		senders[i] = s
		byAddr[c.LocalAddr()] = i
		flows[i] = &modelFlow{np: NewNP(mc.cc)}
		if mc.selective {
			flows[i].tr = NewTracker(0, span)
		}
	}
	data := make([]byte, pktLen) // every data packet: the BTH is rewritten, the payload is zeros
	var ctl []netio.Message      // the receiver's ACKs, NAKs and CNPs of one step
	// An ACK or NAK carries the PSN it acknowledges in the BTH; a selective-repeat
	// NAK carries the PSN that revealed the gap where AETH has its MSN (the model's
	// encoding only: the engine will negotiate a real one).
	ctlBuf := func(op wire.Opcode, qpn uint32, psn int, syn wire.Syndrome, sacked int) netio.Message {
		size := wire.BTHLen + wire.AETHLen + wire.ICRCLen
		if op == wire.CNP {
			size = wire.BTHLen + wire.CNPPayloadLen + wire.ICRCLen
		}
		b := make([]byte, size)
		h := wire.BTH(b)
		h.Encode(&wire.BTHFields{Opcode: op, PKey: 0xffff, DestQP: qpn, PSN: wire.PSN(psn).Add(0)})
		if op != wire.CNP {
			b[wire.BTHLen] = byte(syn)
			b[wire.BTHLen+1], b[wire.BTHLen+2], b[wire.BTHLen+3] = byte(sacked>>16), byte(sacked>>8), byte(sacked)
		}
		return netio.Message{Buf: b, N: size}
	}
	rbuf := make([]netio.Message, 256)
	for i := range rbuf {
		rbuf[i].Buf = make([]byte, pktLen)
	}
	end := start.Add(mc.duration)
	warm := start.Add(mc.warmup)
	var queue []int
	nextSample := warm
	k := mc.red
	now := start
	for now.Before(end) {
		// The receiver: data in, ACK/NAK/CNP out.
		ctl = ctl[:0]
		for {
			got, _ := rx.(netio.Poller).PollBatch(rbuf)
			for _, m := range rbuf[:got] {
				i, ok := byAddr[m.Addr]
				if !ok || m.N < wire.BTHLen {
					continue
				}
				f := flows[i]
				h := wire.BTH(m.Buf[:m.N])
				psn := int(h.PSN())
				dst := senders[i].conn.LocalAddr()
				if m.ECN == netio.ECNCE && f.np.CE(now) {
					c := ctlBuf(wire.CNP, qpBase+uint32(i), 0, 0, 0)
					c.Addr = dst
					ctl = append(ctl, c)
				}
				ack := func(syn wire.Syndrome, psn int) {
					if psn < 0 {
						return // a duplicate of nothing received yet
					}
					c := ctlBuf(wire.RCAck, qpBase+uint32(i), psn, syn, int(h.PSN()))
					c.Addr = dst
					ctl = append(ctl, c)
				}
				inOrder := 0
				if f.tr != nil {
					// Selective repeat: keep what is beyond a gap, NAK the gap's first
					// PSN once per arrival past it, ACK what is complete.
					before := f.tr.Expected()
					switch f.tr.Receive(wire.PSN(psn)) {
					case RecvInOrder:
						inOrder = int(f.tr.Expected().Diff(before))
					case RecvOutOfOrder:
						ack(wire.NAKSyndrome(wire.NAKPSNSeqError), int(f.tr.Expected()))
					case RecvDuplicate:
						ack(wire.ACKSyndrome(wire.CreditsInvalid), int(f.tr.Expected())-1)
					}
				} else {
					switch {
					case psn == f.expected:
						f.expected++
						f.naked = false
						inOrder = 1
					case psn > f.expected:
						if !f.naked {
							f.naked = true
							ack(wire.NAKSyndrome(wire.NAKPSNSeqError), f.expected)
						}
					default:
						ack(wire.ACKSyndrome(wire.CreditsInvalid), f.expected-1)
					}
				}
				if inOrder > 0 {
					if !now.Before(warm) {
						f.delivered += int64(inOrder * mc.mtu)
					}
					f.sinceAck += inOrder
					if f.sinceAck >= mc.ackEvery {
						f.sinceAck = 0
						exp := f.expected
						if f.tr != nil {
							exp = int(f.tr.Expected())
						}
						ack(wire.ACKSyndrome(wire.CreditsInvalid), exp-1)
					}
				}
			}
			if got < len(rbuf) {
				break
			}
		}
		if len(ctl) > 0 {
			rx.WriteBatch(ctl)
		}
		// The senders: ACK/NAK/CNP in, data out.
		for i, s := range senders {
			touched := !now.Before(s.wakeAt)
			for {
				got, _ := s.conn.(netio.Poller).PollBatch(rbuf)
				touched = touched || got > 0
				for _, m := range rbuf[:got] {
					h := wire.BTH(m.Buf[:m.N])
					switch h.Opcode() {
					case wire.CNP:
						s.rp.CNP(now)
					case wire.RCAck:
						a := m.Buf[wire.BTHLen:]
						s.ack(now, int(h.PSN()), wire.Syndrome(a[0]), int(a[1])<<16|int(a[2])<<8|int(a[3]))
					}
				}
				if got < len(rbuf) {
					break
				}
			}
			if touched {
				s.send(now, mc, i, data, rxAddr)
				s.wakeAt = s.wake(now, mc)
			}
		}
		for !nextSample.After(now) {
			if !now.Before(warm) {
				queue = append(queue, toRx.Queue())
			}
			nextSample = nextSample.Add(10 * time.Microsecond)
		}
		// The next moment anything happens.
		next := end
		if at, ok := n.NextEvent(); ok && at.Before(next) {
			next = at
		}
		for _, s := range senders {
			if at := s.wakeAt; !at.IsZero() && at.Before(next) {
				next = at
			}
		}
		if nextSample.Before(next) {
			next = nextSample
		}
		if !next.After(now) {
			next = now.Add(time.Nanosecond)
		}
		n.Advance(next)
		now = next
	}
	var res modelResult
	secs := mc.duration.Seconds() - mc.warmup.Seconds()
	var goodputs []float64
	for i, s := range senders {
		f := s.res
		f.Goodput = float64(flows[i].delivered) * 8 / secs
		st := s.rp.Stats()
		f.CNPs, f.Cuts = st.CNPs, st.Cuts
		res.Flows = append(res.Flows, f)
		res.Aggregate += f.Goodput
		goodputs = append(goodputs, f.Goodput)
	}
	res.Jain = Jain(goodputs)
	slices.Sort(queue)
	if len(queue) > 0 {
		for j, p := range []float64{0.01, 0.10, 0.50, 0.90, 0.99} {
			res.QueueP[j] = queue[int(p*float64(len(queue)-1))]
		}
		in := 0
		for _, q := range queue {
			if q >= k.Kmin && q <= k.Kmax {
				in++
			}
		}
		res.InKRange = float64(in) / float64(len(queue))
	}
	res.Net, res.Port, res.SendBytes = n.Stats(), toRx.Stats(), pktLen
	return res
}

// ack takes an ACK or NAK for the flow.
func (s *modelSender) ack(now time.Time, psn int, syn wire.Syndrome, sacked int) {
	if s.sw != nil {
		if syn.Type() == wire.AckTypeNAK {
			s.sw.NAK(wire.PSN(psn), wire.PSN(sacked))
		} else {
			s.sw.ACK(wire.PSN(psn))
		}
		s.lastProgress = now
		return
	}
	if syn.Type() == wire.AckTypeNAK {
		if psn >= s.una {
			s.una = psn
			s.next = psn // go back to the first PSN missing
			s.lastProgress = now
		}
		return
	}
	if psn+1 > s.una {
		s.una = psn + 1
		s.next = max(s.next, s.una)
		s.lastProgress = now
	}
}

// send sends what the window and the pacer allow now, in one batch.
func (s *modelSender) send(now time.Time, mc modelConfig, i int, data []byte, rx netip.Addr) {
	inFlight := func() bool {
		if s.sw != nil {
			return s.sw.Outstanding() > 0
		}
		return s.next > s.una
	}
	if inFlight() && !now.Before(s.lastProgress.Add(mc.rto)) {
		s.res.Timeouts++
		s.lastProgress = now
		if s.sw != nil {
			s.sw.Timeout()
		} else {
			s.next = s.una
		}
	}
	s.msgs = s.msgs[:0]
	for s.rp.Budget(now) > 0 {
		var psn int
		if s.sw != nil {
			p, ok := s.sw.Next()
			if !ok {
				break
			}
			psn = int(p)
		} else {
			if s.next-s.una >= mc.window {
				break
			}
			psn = s.next
			s.next++
		}
		if psn < s.highest {
			s.res.Retrans++
		} else {
			s.highest = psn + 1
		}
		s.res.Sent++
		s.lastProgress = now // the retransmission timer restarts with every send, as in rxe
		if len(s.msgs) == len(s.bufs) {
			s.bufs = append(s.bufs, make([]byte, len(data)))
		}
		b := s.bufs[len(s.msgs)]
		wire.BTH(b).Encode(&wire.BTHFields{Opcode: dataOp, PKey: 0xffff, DestQP: qpBase + uint32(i), PSN: wire.PSN(psn).Add(0)})
		s.msgs = append(s.msgs, netio.Message{Buf: b, N: len(b), Addr: netip.AddrPortFrom(rx, 4791), ECN: netio.ECNECT0})
		s.rp.Sent(now, len(b))
	}
	if len(s.msgs) > 0 {
		s.conn.WriteBatch(s.msgs)
	}
}

// wake is the next time the sender has something to do by itself: send when the
// pacer allows (if the window is open), time out, or advance its RP.
func (s *modelSender) wake(now time.Time, mc modelConfig) time.Time {
	var at time.Time
	earliest := func(t time.Time) {
		if !t.IsZero() && (at.IsZero() || t.Before(at)) {
			at = t
		}
	}
	open := s.next-s.una < mc.window
	busy := s.next > s.una
	if s.sw != nil {
		open, busy = s.sw.CanSend(), s.sw.Outstanding() > 0
	}
	if open {
		earliest(s.rp.NextSend(now))
	}
	if busy {
		earliest(s.lastProgress.Add(mc.rto))
	}
	earliest(s.rp.Deadline())
	return at
}

package congestion

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/goverbs/goverbs/wire"
)

// TestTracker: in order, kept beyond a gap, the gap filled (Expected jumps over
// what was kept), duplicates before Expected and among the kept, too far ahead;
// across the PSN wrap.
func TestTracker(t *testing.T) {
	for _, first := range []wire.PSN{0, wire.PSNMask - 2} {
		p := func(i uint32) wire.PSN { return first.Add(i) }
		tr := NewTracker(first, 8)
		steps := []struct {
			psn      uint32
			want     RecvResult
			expected uint32
			kept     int
		}{
			{0, RecvInOrder, 1, 0},
			{2, RecvOutOfOrder, 1, 1},
			{4, RecvOutOfOrder, 1, 2},
			{2, RecvDuplicate, 1, 2},
			{0, RecvDuplicate, 1, 2},
			{10, RecvOutOfWindow, 1, 2},
			{1, RecvInOrder, 3, 1}, // 1, then the kept 2
			{3, RecvInOrder, 5, 0}, // 3, then the kept 4
			{5, RecvInOrder, 6, 0},
			{14, RecvOutOfOrder, 6, 1}, // 8 beyond Expected: the window's edge
		}
		for i, s := range steps {
			if got := tr.Receive(p(s.psn)); got != s.want || tr.Expected() != p(s.expected) || tr.Kept() != s.kept {
				t.Fatalf("first %d, step %d: Receive(+%d) = %v, Expected +%d, kept %d; want %v, +%d, %d",
					first, i, s.psn, got, tr.Expected().Diff(first), tr.Kept(), s.want, s.expected, s.kept)
			}
		}
		if !tr.Has(p(14)) || tr.Has(p(13)) || !tr.Has(p(0)) {
			t.Errorf("first %d: Has wrong", first)
		}
		if st := tr.Stats(); st.InOrder != 4 || st.OutOfOrder != 3 || st.Duplicate != 2 || st.OutOfWindow != 1 {
			t.Errorf("stats %+v", st)
		}
	}
}

// TestSendWindow: a NAK with a selective acknowledgement queues exactly the PSNs
// missing below it, each once; retransmissions go before new data; the cap counts
// what is in flight, not what the responder kept; a timeout resends what is not
// known received; nonsense acknowledgements change nothing.
func TestSendWindow(t *testing.T) {
	w := NewSendWindow(100, 4)
	send := func(want ...wire.PSN) {
		t.Helper()
		for _, p := range want {
			got, ok := w.Next()
			if !ok || got != p {
				t.Fatalf("Next = %v, %v; want %v", got, ok, p)
			}
		}
		if got, ok := w.Next(); ok {
			t.Fatalf("Next = %v beyond what may be sent", got)
		}
	}
	send(100, 101, 102, 103) // the cap: 4 in flight
	w.NAK(100, 102)          // 100 and 101 lost, 102 kept
	if w.InFlight() != 3 || w.Outstanding() != 4 {
		t.Fatalf("in flight %d, outstanding %d", w.InFlight(), w.Outstanding())
	}
	send(100, 101, 104) // the retransmissions, then one new: 102 no longer counts
	w.NAK(100, 103)     // 103 arrived too: nothing more is missing below it
	send(105)
	w.NAK(100, 104) // 104 left after the retransmissions and arrived: they were lost again
	send(100, 101, 106)
	if st := w.Stats(); st.Retransmitted != 4 || st.Sent != 11 || st.LostAgain != 2 {
		t.Fatalf("stats %+v", st)
	}
	w.ACK(104) // the retransmissions arrived: 100..104 done
	if w.Una() != 105 || w.Outstanding() != 2 || w.InFlight() != 2 {
		t.Fatalf("after ACK: una %v, outstanding %d, in flight %d", w.Una(), w.Outstanding(), w.InFlight())
	}
	w.ACK(90)  // old: nothing
	w.ACK(200) // never sent: nothing
	w.NAK(300, 301)
	if w.Una() != 105 || w.CanSend() != true {
		t.Fatalf("a stray acknowledgement moved the window: una %v", w.Una())
	}
	send(107, 108)
	w.NAK(105, 107) // 105 and 106 lost, 107 kept
	send(105, 106, 109)
	w.Timeout() // everything not known received goes again: 105, 106, 108, 109
	send(105, 106, 108, 109)
	if st := w.Stats(); st.Timeouts != 1 || st.Retransmitted != 10 {
		t.Errorf("stats %+v", st)
	}
	// The span bounds a window whose oldest packet stays missing.
	w = NewSendWindow(0, 2)
	for i := 0; i < 100; i++ {
		p, ok := w.Next()
		if !ok {
			break
		}
		if p != 0 {
			w.NAK(0, p)
		}
	}
	if w.Outstanding() != w.Span() || w.Span() != SpanFactor*2 {
		t.Errorf("outstanding %d, span %d", w.Outstanding(), w.Span())
	}
}

// TestSendWindowRuns: one NAK names a run of kept PSNs, which stop counting as in
// flight; only what lies before the run is queued; a later run of the same gap queues
// only what lies between the runs; a run that reaches back before the expected PSN, or
// is turned round, is cut to what it can mean.
func TestSendWindowRuns(t *testing.T) {
	w := NewSendWindow(100, 32)
	for range 20 {
		w.Next() // 100..119
	}
	w.NAKRun(100, 102, 110) // 100, 101 lost; 102..110 kept
	if w.InFlight() != 11 || w.Outstanding() != 20 {
		t.Fatalf("in flight %d, outstanding %d", w.InFlight(), w.Outstanding())
	}
	w.NAKRun(100, 102, 112) // the same run, grown; 111, 112 arrived
	w.NAKRun(100, 115, 117) // 113, 114 lost
	var got []wire.PSN
	for {
		p, ok := w.Retransmission()
		if !ok {
			break
		}
		got = append(got, p)
	}
	if fmt.Sprint(got) != "[100 101 113 114]" {
		t.Fatalf("resent %v, want [100 101 113 114]", got)
	}
	if w.InFlight() != 20-14 {
		t.Fatalf("in flight %d", w.InFlight())
	}
	w.NAKRun(100, 90, 118)  // back before expected: 101..118 kept
	w.NAKRun(100, 119, 105) // turned round: only 105 kept (already)
	if w.InFlight() != 20-18 || w.Stats().NAKs != 5 {
		t.Fatalf("in flight %d, stats %+v", w.InFlight(), w.Stats())
	}
}

// TestSendWindowProbe: a retransmission still missing a whole probe tick after it was
// sent goes again, once per tick; one that arrived, or that was sent since the last
// tick, does not.
func TestSendWindowProbe(t *testing.T) {
	w := NewSendWindow(0, 16)
	for range 10 {
		w.Next() // 0..9
	}
	w.NAK(0, 3) // 0, 1, 2 lost
	for range 2 {
		w.Retransmission() // 0, 1
	}
	if w.Probe() || !w.Resending() {
		t.Fatal("a tick right after the retransmissions took them as lost")
	}
	w.Retransmission() // 2, after the tick
	w.ACK(0)           // 0's retransmission arrived
	if !w.Probe() {
		t.Fatal("1's retransmission, a whole tick old, was not queued again")
	}
	if p, ok := w.Retransmission(); !ok || p != 1 {
		t.Fatalf("Retransmission = %v, %v; want 1", p, ok)
	}
	if _, ok := w.Retransmission(); ok {
		t.Fatal("2, a tick younger, went again too")
	}
	w.ACK(9)
	w.Probe() // drops what arrived
	if w.Resending() {
		t.Fatal("still resending with everything acknowledged")
	}
	if st := w.Stats(); st.LostAgain != 1 {
		t.Errorf("stats %+v", st)
	}
}

// TestSelectiveRepeatLossy runs a SendWindow and a Tracker over a seeded lossy,
// order-keeping channel until 20000 PSNs are through: every PSN arrives, and
// retransmissions are the losses plus what timeouts resend.
func TestSelectiveRepeatLossy(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	const total = 20000
	first := wire.PSN(wire.PSNMask - 1000) // across the wrap
	w := NewSendWindow(first, 32)
	tr := NewTracker(first, w.Span())
	var wireQ []wire.PSN
	type fb struct {
		nak         bool
		psn, sacked wire.PSN
	}
	var lost, steps int
	for tr.Expected().Diff(first) < total && steps < 1_000_000 {
		steps++
		for i := 0; i < 4; i++ {
			p, ok := w.Next()
			if !ok {
				break
			}
			if rng.Float64() < 0.02 {
				lost++
				continue
			}
			wireQ = append(wireQ, p)
		}
		var back []fb
		for _, p := range wireQ {
			switch tr.Receive(p) {
			case RecvOutOfOrder, RecvOutOfWindow:
				back = append(back, fb{true, tr.Expected(), p})
			default:
				back = append(back, fb{false, tr.Expected().Sub(1), 0})
			}
		}
		wireQ = wireQ[:0]
		for _, f := range back {
			if f.nak {
				w.NAK(f.psn, f.sacked)
			} else {
				w.ACK(f.psn)
			}
		}
		if len(back) == 0 && w.Outstanding() > 0 && !w.CanSend() {
			w.Timeout()
		}
	}
	st := w.Stats()
	if tr.Expected().Diff(first) < total {
		t.Fatalf("stuck at %d after %d steps: %+v", tr.Expected().Diff(first), steps, st)
	}
	t.Logf("%d lost, %+v, tracker %+v", lost, st, tr.Stats())
	if st.Retransmitted < uint64(lost)-uint64(w.Outstanding()) || st.Retransmitted > uint64(lost)+st.Timeouts*uint64(w.Span()) {
		t.Errorf("%d lost, %d retransmitted", lost, st.Retransmitted)
	}
	if tr.Stats().OutOfWindow != 0 {
		t.Errorf("the window overran the tracker: %+v", tr.Stats())
	}
}

// TestBDPCap: bandwidth × RTT in packets, rounded up; nonsense gives 1.
func TestBDPCap(t *testing.T) {
	if got := BDPCap(10e9, 100*time.Microsecond, 4096); got != 31 { // 125000 / 4096 = 30.5
		t.Errorf("BDPCap = %d", got)
	}
	if BDPCap(0, time.Second, 1) != 1 || BDPCap(1e9, -1, 4096) != 1 || BDPCap(1e300, time.Hour, 1) != 1<<22 {
		t.Error("BDPCap of nonsense")
	}
}

// TestSendWindowNumberedBySender: the engine's use of SendWindow, which numbers packets
// itself: SentNew moves NextNew, Retransmission hands out only resends, a SACK run for one
// gap queues each missing PSN once, a resend a later SACK shows lost goes again, and
// Restart forgets it all for a go-back-N rewind.
func TestSendWindowNumberedBySender(t *testing.T) {
	w := NewSendWindow(10, 8)
	for p := wire.PSN(10); p < 20; p++ {
		w.SentNew(p)
	}
	w.SentNew(5) // before NextNew: nothing
	if w.NextNew() != 20 || w.Outstanding() != 10 || w.RetransmissionQueued() {
		t.Fatalf("next %v, outstanding %d", w.NextNew(), w.Outstanding())
	}
	for s := wire.PSN(13); s < 18; s++ {
		w.NAK(12, s) // 12 lost; 13..17 kept, one SACK each
	}
	if got, ok := w.Retransmission(); !ok || got != 12 {
		t.Fatalf("Retransmission = %v, %v; want 12", got, ok)
	}
	if _, ok := w.Retransmission(); ok {
		t.Fatal("12 queued more than once")
	}
	w.SentNew(20)
	w.NAK(12, 18) // 18 left before the resend of 12: says nothing about it
	if w.RetransmissionQueued() {
		t.Fatal("a resend queued again by a SACK of an older packet")
	}
	w.NAK(12, 20) // 20 left after it, and 12 is still missing: lost again
	if got, ok := w.Retransmission(); !ok || got != 12 || w.Stats().LostAgain != 1 {
		t.Fatalf("Retransmission = %v, %v, stats %+v; want 12 again", got, ok, w.Stats())
	}
	w.Restart(12, 21)
	if w.Una() != 12 || w.NextNew() != 21 || w.InFlight() != 9 || w.RetransmissionQueued() {
		t.Fatalf("after Restart: una %v next %v in flight %d", w.Una(), w.NextNew(), w.InFlight())
	}
	w.Restart(12, 12+1000) // beyond the span: nothing outstanding
	if w.Outstanding() != 0 {
		t.Fatalf("outstanding %d after a Restart beyond the span", w.Outstanding())
	}
}

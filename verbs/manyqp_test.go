package verbs_test

import (
	"bytes"
	"runtime"
	"testing"
	"time"

	"github.com/goverbs/goverbs/verbs"
)

// manyQPs connects n RC QP pairs between two hosts; every QP gets its own 4 KiB slot of
// one source and one target region.
type manyQPs struct {
	a, b     *host
	qa, qb   []*verbs.QP
	src, dst *verbs.MR
}

func connectMany(t testing.TB, a, b *host, n int, timeout uint8) *manyQPs {
	m := &manyQPs{a: a, b: b, src: a.MR(t, n*4096, allAccess), dst: b.MR(t, n*4096, allAccess)}
	capQP := verbs.QPCap{MaxSendWR: 8, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1}
	p := defaultRC()
	p.MTU, p.Timeout = verbs.MTU4096, timeout
	for i := 0; i < n; i++ {
		qa, err := a.PD.CreateQP(verbs.QPInitAttr{Type: verbs.QPTypeRC, SendCQ: a.CQ, RecvCQ: a.RCQ, Cap: capQP})
		if err != nil {
			t.Fatalf("QP %d: %v", i, err)
		}
		qb, err := b.PD.CreateQP(verbs.QPInitAttr{Type: verbs.QPTypeRC, SendCQ: b.CQ, RecvCQ: b.RCQ, Cap: capQP})
		if err != nil {
			t.Fatalf("QP %d: %v", i, err)
		}
		connect(t, qa, p, b.GID, qb.QPN(), uint32(i), uint32(i)+7)
		connect(t, qb, p, a.GID, qa.QPN(), uint32(i)+7, uint32(i))
		m.qa, m.qb = append(m.qa, qa), append(m.qb, qb)
	}
	return m
}

// manyQPsTimeout is TestManyQPs's local ACK timeout: 4.096 µs × 2^18, about 1.07 s
// (IBTA 9.7.6.1.3).
const manyQPsTimeout = 18

func TestManyQPs(t *testing.T) {
	n := 4096
	if testing.Short() {
		n = 256
	}
	// QPs in flight at a time. Every one of them has a WRITE, a SEND and an ACK queued at
	// the receiver, which under the race detector handles only about 1,300 packets a
	// second on a loaded 2-core machine: 128 QPs queue ~0.3 s of work, past the 67 ms
	// local ACK timeout of defaultRC, so every QP in flight resends, the resends queue
	// behind the rest, and the queueing delay outgrows every retry ("transport retry
	// counter exceeded"). This test checks that thousands of QPs work side by side, not
	// retransmission (other tests do), so its timeout is long and its window smaller under
	// race: the queue stays a few times shorter than one timeout.
	inFlight := 128
	if raceEnabled {
		inFlight = 32
	}
	a, b := newHost(t), newHost(t)
	m := connectMany(t, a, b, n, manyQPsTimeout)
	fill(m.src.Buf(), 4096)
	// A 4 KiB WRITE and a SEND on every QP, inFlight QPs at a time; completions are
	// polled as they come so the CQs never overrun.
	for i := range m.qb {
		m.qb[i].PostRecv(verbs.RecvWR{ID: uint64(i), SGL: []verbs.SGE{m.dst.SGE(i*4096, 16)}})
	}
	sent := 0
	deadline := time.Now().Add(60 * time.Second)
	wcs := make([]verbs.WC, 256)
	for i := range m.qa {
		slot := i * 4096
		m.qa[i].PostSend(
			verbs.SendWR{ID: uint64(i), Opcode: verbs.WRRDMAWrite, SGL: []verbs.SGE{m.src.SGE(slot+16, 4096-16)}, RemoteAddr: m.dst.AddrOf(slot + 16), RKey: m.dst.RKey()},
			verbs.SendWR{ID: uint64(i), Opcode: verbs.WRSend, Flags: verbs.SendSignaled, SGL: []verbs.SGE{m.src.SGE(slot, 16)}})
		for i-sent >= inFlight {
			k, _ := a.CQ.Poll(wcs)
			for _, wc := range wcs[:k] {
				if wc.Status != verbs.WCSuccess {
					t.Fatalf("completion %+v", wc)
				}
			}
			sent += k
			if time.Now().After(deadline) {
				t.Fatalf("%d of %d QPs completed", sent, n)
			}
		}
	}
	for sent < n {
		k, _ := a.CQ.Poll(wcs)
		for _, wc := range wcs[:k] {
			if wc.Status != verbs.WCSuccess {
				t.Fatalf("completion %+v", wc)
			}
		}
		sent += k
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d QPs completed", sent, n)
		}
	}
	got := waitWC(t, b.RCQ, n, 30*time.Second)
	seen := make(map[uint32]bool)
	for _, wc := range got {
		if wc.Status != verbs.WCSuccess || seen[wc.QPN] {
			t.Fatalf("receive %+v", wc)
		}
		seen[wc.QPN] = true
	}
	if !bytes.Equal(m.dst.Buf(), m.src.Buf()) {
		t.Fatal("data differs on some QP")
	}
}

// BenchmarkManyQPsWrite64K spreads 64 KiB WRITEs round-robin over 4096 connected QPs and
// reports the aggregate bandwidth and the memory each QP pair costs.
func BenchmarkManyQPsWrite64K(b *testing.B) {
	const n = 4096
	a, c := newHost(b), newHost(b)
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	m := connectMany(b, a, c, n, defaultRC().Timeout)
	runtime.GC()
	runtime.ReadMemStats(&after)
	perQP := float64(after.HeapAlloc-before.HeapAlloc-uint64(2*n*4096)) / n / 2
	big := a.MR(b, 64<<10, allAccess)
	tgt := c.MR(b, 64<<10, allAccess)
	wcs := make([]verbs.WC, 64)
	wr := verbs.SendWR{Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled, SGL: []verbs.SGE{big.SGE(0, 64<<10)}, RemoteAddr: tgt.Addr(), RKey: tgt.RKey()}
	b.SetBytes(64 << 10)
	b.ReportAllocs()
	b.ResetTimer()
	inflight := 0
	for i := 0; i < b.N; i++ {
		for inflight >= 256 {
			k, _ := a.CQ.Poll(wcs)
			inflight -= k
			if k == 0 {
				runtime.Gosched()
			}
		}
		if err := m.qa[i%n].PostSend(wr); err != nil {
			b.Fatal(err)
		}
		inflight++
	}
	for inflight > 0 {
		k, _ := a.CQ.Poll(wcs)
		inflight -= k
		if k == 0 {
			runtime.Gosched()
		}
	}
	b.ReportMetric(perQP, "heap-B/QP")
}

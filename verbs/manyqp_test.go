package verbs

import (
	"bytes"
	"runtime"
	"testing"
	"time"
)

// manyQPs connects n RC QP pairs between two hosts; every QP gets its own 4 KiB slot of
// one source and one target region.
type manyQPs struct {
	a, b     *host
	qa, qb   []*QP
	src, dst *MR
}

func connectMany(t testing.TB, a, b *host, n int) *manyQPs {
	m := &manyQPs{a: a, b: b, src: a.mr(t, n*4096, allAccess), dst: b.mr(t, n*4096, allAccess)}
	capQP := QPCap{MaxSendWR: 8, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1}
	p := defaultRC()
	p.mtu = MTU4096
	for i := 0; i < n; i++ {
		qa, err := a.pd.CreateQP(QPInitAttr{Type: QPTypeRC, SendCQ: a.cq, RecvCQ: a.rcq, Cap: capQP})
		if err != nil {
			t.Fatalf("QP %d: %v", i, err)
		}
		qb, err := b.pd.CreateQP(QPInitAttr{Type: QPTypeRC, SendCQ: b.cq, RecvCQ: b.rcq, Cap: capQP})
		if err != nil {
			t.Fatalf("QP %d: %v", i, err)
		}
		connect(t, qa, p, b.gid, qb.QPN(), uint32(i), uint32(i)+7)
		connect(t, qb, p, a.gid, qa.QPN(), uint32(i)+7, uint32(i))
		m.qa, m.qb = append(m.qa, qa), append(m.qb, qb)
	}
	return m
}

func TestManyQPs(t *testing.T) {
	n := 4096
	if testing.Short() {
		n = 256
	}
	a, b := newHost(t, "127.10.0.2"), newHost(t, "127.10.0.3")
	m := connectMany(t, a, b, n)
	fill(m.src.Buf(), 4096)
	// A 4 KiB WRITE and a SEND on every QP, 128 QPs in flight at a time; completions
	// are polled as they come so the CQs never overrun.
	for i := range m.qb {
		m.qb[i].PostRecv(RecvWR{ID: uint64(i), SGL: []SGE{m.dst.SGE(i*4096, 16)}})
	}
	sent := 0
	deadline := time.Now().Add(60 * time.Second)
	wcs := make([]WC, 256)
	for i := range m.qa {
		slot := i * 4096
		m.qa[i].PostSend(
			SendWR{ID: uint64(i), Opcode: WRRDMAWrite, SGL: []SGE{m.src.SGE(slot+16, 4096-16)}, RemoteAddr: m.dst.AddrOf(slot + 16), RKey: m.dst.RKey()},
			SendWR{ID: uint64(i), Opcode: WRSend, Flags: SendSignaled, SGL: []SGE{m.src.SGE(slot, 16)}})
		for i-sent >= 128 {
			k, _ := a.cq.Poll(wcs)
			for _, wc := range wcs[:k] {
				if wc.Status != WCSuccess {
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
		k, _ := a.cq.Poll(wcs)
		for _, wc := range wcs[:k] {
			if wc.Status != WCSuccess {
				t.Fatalf("completion %+v", wc)
			}
		}
		sent += k
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d QPs completed", sent, n)
		}
	}
	got := waitWC(t, b.rcq, n, 30*time.Second)
	seen := make(map[uint32]bool)
	for _, wc := range got {
		if wc.Status != WCSuccess || seen[wc.QPN] {
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
	a, c := newHost(b, "127.10.0.2"), newHost(b, "127.10.0.3")
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	m := connectMany(b, a, c, n)
	runtime.GC()
	runtime.ReadMemStats(&after)
	perQP := float64(after.HeapAlloc-before.HeapAlloc-uint64(2*n*4096)) / n / 2
	big := a.mr(b, 64<<10, allAccess)
	tgt := c.mr(b, 64<<10, allAccess)
	wcs := make([]WC, 64)
	wr := SendWR{Opcode: WRRDMAWrite, Flags: SendSignaled, SGL: []SGE{big.SGE(0, 64<<10)}, RemoteAddr: tgt.Addr(), RKey: tgt.RKey()}
	b.SetBytes(64 << 10)
	b.ReportAllocs()
	b.ResetTimer()
	inflight := 0
	for i := 0; i < b.N; i++ {
		for inflight >= 256 {
			k, _ := a.cq.Poll(wcs)
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
		k, _ := a.cq.Poll(wcs)
		inflight -= k
		if k == 0 {
			runtime.Gosched()
		}
	}
	b.ReportMetric(perQP, "heap-B/QP")
}

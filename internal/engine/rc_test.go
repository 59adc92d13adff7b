package engine_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"testing"
	"time"

	"github.com/goverbs/goverbs/verbs"
)

func TestRCSendWriteReadOverUDP(t *testing.T) {
	a, b := newHost(t), newHost(t)
	p := newPair(t, a, b, verbs.QPTypeRC, defaultRC())
	const mtu = 1024
	sizes := []int{0, 1, mtu - 1, mtu, mtu + 1, 1 << 20}
	for _, n := range sizes {
		src := a.MR(t, max(n, 1), allAccess)
		dst := b.MR(t, max(n, 1), allAccess)
		fill(src.Buf(), uint64(n))

		// SEND
		if err := p.QB.PostRecv(verbs.RecvWR{ID: 7, SGL: []verbs.SGE{dst.SGE(0, max(n, 1))}}); err != nil {
			t.Fatal(err)
		}
		if err := p.QA.PostSend(verbs.SendWR{ID: 1, Opcode: verbs.WRSend, Flags: verbs.SendSignaled, SGL: []verbs.SGE{src.SGE(0, n)}}); err != nil {
			t.Fatal(err)
		}
		wc := waitWC(t, a.CQ, 1, 5*time.Second)[0]
		if wc.Status != verbs.WCSuccess || wc.Opcode != verbs.WCSend || wc.ID != 1 {
			t.Fatalf("size %d: send completion %+v", n, wc)
		}
		rwc := waitWC(t, b.RCQ, 1, 5*time.Second)[0]
		if rwc.Status != verbs.WCSuccess || rwc.Opcode != verbs.WCRecv || rwc.ByteLen != uint32(n) || rwc.ID != 7 || rwc.QPN != p.QB.QPN() {
			t.Fatalf("size %d: recv completion %+v", n, rwc)
		}
		if !bytes.Equal(dst.Buf()[:n], src.Buf()[:n]) {
			t.Fatalf("size %d: SEND data differs", n)
		}

		// WRITE
		clear(dst.Buf())
		fill(src.Buf(), uint64(n)+1)
		if err := p.QA.PostSend(verbs.SendWR{ID: 2, Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled, SGL: []verbs.SGE{src.SGE(0, n)},
			RemoteAddr: dst.Addr(), RKey: dst.RKey()}); err != nil {
			t.Fatal(err)
		}
		if wc := waitWC(t, a.CQ, 1, 5*time.Second)[0]; wc.Status != verbs.WCSuccess || wc.Opcode != verbs.WCRDMAWrite {
			t.Fatalf("size %d: write completion %+v", n, wc)
		}
		if !bytes.Equal(dst.Buf()[:n], src.Buf()[:n]) {
			t.Fatalf("size %d: WRITE data differs", n)
		}

		// READ back into a fresh buffer
		back := a.MR(t, max(n, 1), allAccess)
		if err := p.QA.PostSend(verbs.SendWR{ID: 3, Opcode: verbs.WRRDMARead, Flags: verbs.SendSignaled, SGL: []verbs.SGE{back.SGE(0, n)},
			RemoteAddr: dst.Addr(), RKey: dst.RKey()}); err != nil {
			t.Fatal(err)
		}
		if wc := waitWC(t, a.CQ, 1, 5*time.Second)[0]; wc.Status != verbs.WCSuccess || wc.Opcode != verbs.WCRDMARead || wc.ByteLen != uint32(n) {
			t.Fatalf("size %d: read completion %+v", n, wc)
		}
		if !bytes.Equal(back.Buf()[:n], src.Buf()[:n]) {
			t.Fatalf("size %d: READ data differs", n)
		}
	}
}

func TestRCAtomics(t *testing.T) {
	a, b := newHost(t), newHost(t)
	p := newPair(t, a, b, verbs.QPTypeRC, defaultRC())
	target := b.MR(t, 64, allAccess)
	binary.NativeEndian.PutUint64(target.Buf()[8:], 100)
	res := a.MR(t, 16, allAccess)

	if err := p.QA.PostSend(verbs.SendWR{ID: 1, Opcode: verbs.WRAtomicFetchAdd, Flags: verbs.SendSignaled, SGL: []verbs.SGE{res.SGE(0, 8)},
		RemoteAddr: target.AddrOf(8), RKey: target.RKey(), CompareAdd: 5}); err != nil {
		t.Fatal(err)
	}
	if wc := waitWC(t, a.CQ, 1, 5*time.Second)[0]; wc.Status != verbs.WCSuccess || wc.Opcode != verbs.WCFetchAdd || wc.ByteLen != 8 {
		t.Fatalf("fetch-add completion %+v", wc)
	}
	if got := binary.NativeEndian.Uint64(res.Buf()); got != 100 {
		t.Fatalf("fetch-add returned %d, want 100", got)
	}
	if got := binary.NativeEndian.Uint64(target.Buf()[8:]); got != 105 {
		t.Fatalf("target %d after fetch-add, want 105", got)
	}
	// Compare-and-swap that fails, then one that succeeds.
	for i, c := range []struct{ cmp, swap, want, after uint64 }{{1, 7, 105, 105}, {105, 7, 105, 7}} {
		if err := p.QA.PostSend(verbs.SendWR{ID: uint64(10 + i), Opcode: verbs.WRAtomicCmpAndSwp, Flags: verbs.SendSignaled,
			SGL: []verbs.SGE{res.SGE(8, 8)}, RemoteAddr: target.AddrOf(8), RKey: target.RKey(), CompareAdd: c.cmp, Swap: c.swap}); err != nil {
			t.Fatal(err)
		}
		if wc := waitWC(t, a.CQ, 1, 5*time.Second)[0]; wc.Status != verbs.WCSuccess || wc.Opcode != verbs.WCCompSwap {
			t.Fatalf("cmp-swap completion %+v", wc)
		}
		if got := binary.NativeEndian.Uint64(res.Buf()[8:]); got != c.want {
			t.Fatalf("cmp-swap %d returned %d, want %d", i, got, c.want)
		}
		if got := binary.NativeEndian.Uint64(target.Buf()[8:]); got != c.after {
			t.Fatalf("cmp-swap %d left %d, want %d", i, got, c.after)
		}
	}
}

func TestRCConcurrentFetchAddFromManyQPs(t *testing.T) {
	// Several requesters on several devices hammer one counter. The responder executes
	// each atomic exactly once, so the counter ends on the exact sum and the original
	// values handed back are 0, 3, 6, … each exactly once.
	target := newHost(t)
	counter := target.MR(t, 8, allAccess)
	const hosts, qpsPerHost, opsPerQP = 3, 2, 200
	type src struct {
		h   *host
		res []*verbs.MR
	}
	var srcs []src
	errs := make(chan error, hosts*qpsPerHost)
	for h := 0; h < hosts; h++ {
		s := src{h: newHost(t)}
		for q := 0; q < qpsPerHost; q++ {
			p := newPair(t, s.h, target, verbs.QPTypeRC, defaultRC())
			res := s.h.MR(t, 8*opsPerQP, allAccess)
			s.res = append(s.res, res)
			go func() {
				for i := 0; i < opsPerQP; i++ {
					err := p.QA.PostSend(verbs.SendWR{ID: uint64(i), Opcode: verbs.WRAtomicFetchAdd, Flags: verbs.SendSignaled,
						SGL: []verbs.SGE{res.SGE(8*i, 8)}, RemoteAddr: counter.Addr(), RKey: counter.RKey(), CompareAdd: 3})
					if err != nil {
						errs <- err
						return
					}
				}
				errs <- nil
			}()
		}
		srcs = append(srcs, s)
	}
	for i := 0; i < hosts*qpsPerHost; i++ {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	seen := make(map[uint64]bool)
	for _, s := range srcs {
		for _, wc := range waitWC(t, s.h.CQ, qpsPerHost*opsPerQP, 20*time.Second) {
			if wc.Status != verbs.WCSuccess {
				t.Fatalf("completion %+v", wc)
			}
		}
		for _, res := range s.res {
			for i := 0; i < opsPerQP; i++ {
				v := binary.NativeEndian.Uint64(res.Buf()[8*i:])
				if v%3 != 0 || seen[v] {
					t.Fatalf("original value %d returned twice or never stored", v)
				}
				seen[v] = true
			}
		}
	}
	// The last ACK left the responder after its last atomic, so the counter is final.
	if got, want := binary.NativeEndian.Uint64(counter.Buf()), uint64(3*hosts*qpsPerHost*opsPerQP); got != want {
		t.Fatalf("counter %d, want %d", got, want)
	}
}

func TestRCWriteIntoMmapMemoryAndQuery(t *testing.T) {
	a, b := newHost(t), newHost(t)
	p := newPair(t, a, b, verbs.QPTypeRC, defaultRC())
	mem, err := verbs.Mmap(1<<20, false)
	if err != nil {
		t.Fatal(err)
	}
	defer verbs.Munmap(mem)
	dst, err := b.PD.RegMR(mem, allAccess)
	if err != nil {
		t.Fatal(err)
	}
	defer dst.Close()
	src := a.MR(t, 1<<16, allAccess)
	fill(src.Buf(), 9)
	p.QA.PostSend(verbs.SendWR{ID: 1, Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled, SGL: []verbs.SGE{src.SGE(0, 1<<16)},
		RemoteAddr: dst.AddrOf(1 << 19), RKey: dst.RKey()})
	expectStatus(t, a.CQ, 1, verbs.WCSuccess)
	if !bytes.Equal(mem[1<<19:1<<19+1<<16], src.Buf()) {
		t.Fatal("WRITE into mmap'd memory differs")
	}
	if hp, err := verbs.Mmap(2<<20, true); err == nil {
		verbs.Munmap(hp)
	} else {
		t.Logf("huge pages not available here: %v", err)
	}
	// Query returns what connect set.
	at := p.QA.Query()
	if at.State != verbs.QPStateRTS || at.DestQPN != p.QB.QPN() || at.PathMTU != verbs.MTU1024 || at.Timeout != 14 ||
		at.RetryCnt != 7 || at.RNRRetry != 7 || at.SQPSN != 0xabc000 || at.RQPSN != 0x100 || at.AH.DGID != b.GID ||
		at.AccessFlags != allAccess || at.MaxRdAtomic != 16 || at.Cap.MaxSendWR != 256 {
		t.Fatalf("Query: %+v", at)
	}
}

func TestRCMultiSGEInlineFenceSolicited(t *testing.T) {
	a, b := newHost(t), newHost(t)
	ch := b.Dev.CreateCompChannel()
	rcq, _ := b.Dev.CreateCQ(64, ch)
	qa := a.QP(t, verbs.QPTypeRC)
	qb, err := b.PD.CreateQP(verbs.QPInitAttr{Type: verbs.QPTypeRC, SendCQ: b.CQ, RecvCQ: rcq,
		Cap: verbs.QPCap{MaxSendWR: 16, MaxRecvWR: 16, MaxSendSGE: 4, MaxRecvSGE: 4}})
	if err != nil {
		t.Fatal(err)
	}
	connect(t, qa, defaultRC(), b.GID, qb.QPN(), 1, 2)
	connect(t, qb, defaultRC(), a.GID, qa.QPN(), 2, 1)
	src, dst := a.MR(t, 8192, allAccess), b.MR(t, 8192, allAccess)
	fill(src.Buf(), 11)

	// Gather three pieces, scatter into three others: 1000+1500+700 = 3200 bytes.
	qb.PostRecv(verbs.RecvWR{ID: 1, SGL: []verbs.SGE{dst.SGE(0, 100), dst.SGE(4096, 3000), dst.SGE(200, 100)}})
	if err := qa.PostSend(verbs.SendWR{ID: 1, Opcode: verbs.WRSend, Flags: verbs.SendSignaled,
		SGL: []verbs.SGE{src.SGE(0, 1000), src.SGE(2000, 1500), src.SGE(5000, 700)}}); err != nil {
		t.Fatal(err)
	}
	expectStatus(t, a.CQ, 1, verbs.WCSuccess)
	wc := expectStatus(t, rcq, 1, verbs.WCSuccess)
	want := append(append(append([]byte{}, src.Buf()[:1000]...), src.Buf()[2000:3500]...), src.Buf()[5000:5700]...)
	got := append(append(append([]byte{}, dst.Buf()[:100]...), dst.Buf()[4096:7096]...), dst.Buf()[200:300]...)
	if wc.ByteLen != 3200 || !bytes.Equal(got[:3200], want) {
		t.Fatalf("multi-SGE SEND: %d bytes, equal %v", wc.ByteLen, bytes.Equal(got[:3200], want))
	}

	// Inline: the source buffer may change as soon as PostSend returns.
	copy(src.Buf(), "inline data")
	qb.PostRecv(verbs.RecvWR{ID: 2, SGL: []verbs.SGE{dst.SGE(0, 64)}})
	qa.PostSend(verbs.SendWR{ID: 2, Opcode: verbs.WRSend, Flags: verbs.SendSignaled | verbs.SendInline, SGL: []verbs.SGE{src.SGE(0, 11)}})
	copy(src.Buf(), "overwritten")
	expectStatus(t, a.CQ, 2, verbs.WCSuccess)
	wc = expectStatus(t, rcq, 2, verbs.WCSuccess)
	if string(dst.Buf()[:wc.ByteLen]) != "inline data" {
		t.Fatalf("inline SEND delivered %q", dst.Buf()[:wc.ByteLen])
	}

	// Fence: a SEND after a READ waits for the READ's data, so the peer can rely on it.
	back := a.MR(t, 64, allAccess)
	copy(dst.Buf()[1000:], "remote bytes")
	qb.PostRecv(verbs.RecvWR{ID: 3, SGL: []verbs.SGE{dst.SGE(2000, 64)}})
	qa.PostSend(
		verbs.SendWR{ID: 3, Opcode: verbs.WRRDMARead, Flags: verbs.SendSignaled, SGL: []verbs.SGE{back.SGE(0, 12)}, RemoteAddr: dst.AddrOf(1000), RKey: dst.RKey()},
		verbs.SendWR{ID: 4, Opcode: verbs.WRSend, Flags: verbs.SendSignaled | verbs.SendFence, SGL: []verbs.SGE{back.SGE(0, 12)}})
	expectStatus(t, a.CQ, 3, verbs.WCSuccess)
	expectStatus(t, a.CQ, 4, verbs.WCSuccess)
	wc = expectStatus(t, rcq, 3, verbs.WCSuccess)
	if string(dst.Buf()[2000:2012]) != "remote bytes" {
		t.Fatalf("fenced SEND carried %q: it left before the READ completed", dst.Buf()[2000:2012])
	}

	// Solicited-only notification: an unsolicited SEND does not wake, a solicited one does.
	rcq.RequestNotify(true)
	qb.PostRecv(verbs.RecvWR{ID: 4, SGL: []verbs.SGE{dst.SGE(0, 64)}}, verbs.RecvWR{ID: 5, SGL: []verbs.SGE{dst.SGE(0, 64)}})
	qa.PostSend(verbs.SendWR{ID: 5, Opcode: verbs.WRSend, SGL: []verbs.SGE{src.SGE(0, 8)}})
	expectStatus(t, rcq, 4, verbs.WCSuccess)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	if _, err := ch.Wait(ctx); err == nil {
		t.Fatal("an unsolicited completion woke a solicited-only arm")
	}
	cancel()
	qa.PostSend(verbs.SendWR{ID: 6, Opcode: verbs.WRSend, Flags: verbs.SendSolicited, SGL: []verbs.SGE{src.SGE(0, 8)}})
	ctx, cancel = context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if cq, err := ch.Wait(ctx); err != nil || cq != rcq {
		t.Fatalf("solicited completion did not wake: %v", err)
	}
	expectStatus(t, rcq, 5, verbs.WCSuccess)
}

func TestBusyPollDevices(t *testing.T) {
	// Busy-poll devices: the poller drives the receive path, and a passive target that
	// never polls is still served (one-sided WRITE and READ).
	a := newHostCfg(t, verbs.SoftConfig{BusyPoll: true})
	b := newHostCfg(t, verbs.SoftConfig{BusyPoll: true})
	p := newPair(t, a, b, verbs.QPTypeRC, defaultRC())
	src, dst := a.MR(t, 1<<16, allAccess), b.MR(t, 1<<16, allAccess)
	fill(src.Buf(), 12)
	for i := 0; i < 50; i++ {
		p.QA.PostSend(verbs.SendWR{ID: uint64(i), Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled, SGL: []verbs.SGE{src.SGE(0, 1<<16)},
			RemoteAddr: dst.Addr(), RKey: dst.RKey()})
		expectStatus(t, a.CQ, uint64(i), verbs.WCSuccess)
	}
	if !bytes.Equal(dst.Buf(), src.Buf()) {
		t.Fatal("WRITE to a passive busy-poll target differs")
	}
	p.QB.PostRecv(verbs.RecvWR{ID: 1, SGL: []verbs.SGE{dst.SGE(0, 64)}})
	p.QA.PostSend(verbs.SendWR{ID: 99, Opcode: verbs.WRSend, Flags: verbs.SendSignaled, SGL: []verbs.SGE{src.SGE(0, 64)}})
	expectStatus(t, a.CQ, 99, verbs.WCSuccess)
	expectStatus(t, b.RCQ, 1, verbs.WCSuccess)
}

// TestBusyPollAckAfterPollingStops: a busy-poll device defers the ACKs its pollers earn
// (so that a ping-pong sends them with its next request). When the application takes a
// completion and stops polling, the ACK must still leave, from the background goroutine,
// long before the peer's retransmit timer (4 s here) would force the question.
func TestBusyPollAckAfterPollingStops(t *testing.T) {
	a := newHost(t)
	b := newHostCfg(t, verbs.SoftConfig{BusyPoll: true})
	params := defaultRC()
	params.Timeout = 20 // 4.096 us * 2^20: about 4.3 s
	p := newPair(t, a, b, verbs.QPTypeRC, params)
	src, dst := a.MR(t, 64, allAccess), b.MR(t, 64, allAccess)
	for i := range 5 {
		p.QB.PostRecv(verbs.RecvWR{ID: uint64(i), SGL: []verbs.SGE{dst.SGE(0, 64)}})
		p.QA.PostSend(verbs.SendWR{ID: uint64(i), Opcode: verbs.WRSend, Flags: verbs.SendSignaled, SGL: []verbs.SGE{src.SGE(0, 64)}})
		expectStatus(t, b.RCQ, uint64(i), verbs.WCSuccess) // b polls until the SEND lands, then stops
		start := time.Now()
		wc := waitWC(t, a.CQ, 1, time.Second)[0]
		if wc.ID != uint64(i) || wc.Status != verbs.WCSuccess {
			t.Fatalf("send completion %+v", wc)
		}
		if el := time.Since(start); el > 500*time.Millisecond {
			t.Fatalf("ACK took %v after the poller stopped", el)
		}
	}
	if n := p.QA.Counters().Retransmits; n != 0 {
		t.Fatalf("%d retransmissions: the ACK came from a retry, not from the idle poller", n)
	}
}

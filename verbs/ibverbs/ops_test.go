//go:build ibverbs

package ibverbs_test

import (
	"bytes"
	"encoding/binary"
	"testing"

	"github.com/goverbs/goverbs/verbs"
)

func TestDeviceAndPort(t *testing.T) {
	e := setup(t)
	a := e.dev.Query()
	if a.PhysPortCnt < 1 || a.MaxQP < 1 || a.MaxCQE < 1 || a.MaxMR < 1 {
		t.Fatalf("device attributes %+v", a)
	}
	found := false
	list, err := verbs.Devices()
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range list {
		found = found || d.Name == e.dev.Name()
	}
	if !found {
		t.Fatalf("Devices() %+v lacks %s", list, e.dev.Name())
	}
	if e.gid.IsZero() || !e.gid.Addr().Is4() {
		t.Fatalf("GID %d is %v", e.gidIdx, e.gid)
	}
	if _, err := e.dev.QueryPort(a.PhysPortCnt + 1); err == nil {
		t.Fatal("QueryPort past the last port succeeded")
	}
}

// TestRCOperations runs each RC operation once between two QPs and checks data and
// completions: SEND, SEND with immediate, zero-length SEND, WRITE, WRITE with immediate,
// READ, fetch-and-add and compare-and-swap.
func TestRCOperations(t *testing.T) {
	e := setup(t)
	p := e.pair(t, verbs.QPTypeRC)
	src := e.mr(t, 4096, allAccess)
	dst := e.mr(t, 4096, allAccess)
	for i := range src.Buf() {
		src.Buf()[i] = byte(i * 7)
	}
	post := func(wr verbs.SendWR) {
		t.Helper()
		if err := p.a.PostSend(wr); err != nil {
			t.Fatalf("PostSend %v: %v", wr.Opcode, err)
		}
	}
	recv := func(id uint64, off, n int) {
		t.Helper()
		if err := p.b.PostRecv(verbs.RecvWR{ID: id, SGL: []verbs.SGE{dst.SGE(off, n)}}); err != nil {
			t.Fatalf("PostRecv: %v", err)
		}
	}

	recv(1, 0, 1024)
	post(verbs.SendWR{ID: 10, Opcode: verbs.WRSend, Flags: verbs.SendSignaled, SGL: []verbs.SGE{src.SGE(0, 1000)}})
	wantWC(t, waitWC(t, p.acq, 1)[0], 10, verbs.WCSend, 0)
	wantWC(t, waitWC(t, p.bcq, 1)[0], 1, verbs.WCRecv, 1000)
	if !bytes.Equal(dst.Buf()[:1000], src.Buf()[:1000]) {
		t.Fatal("SEND: data differs")
	}

	recv(2, 0, 64)
	post(verbs.SendWR{ID: 11, Opcode: verbs.WRSendWithImm, Flags: verbs.SendSignaled, Imm: 0xdeadbeef,
		SGL: []verbs.SGE{src.SGE(0, 8)}})
	waitWC(t, p.acq, 1)
	wc := waitWC(t, p.bcq, 1)[0]
	wantWC(t, wc, 2, verbs.WCRecv, 8)
	if wc.Flags&verbs.WCWithImm == 0 || wc.Imm != 0xdeadbeef {
		t.Fatalf("SEND_WITH_IMM: completion %+v, want immediate 0xdeadbeef", wc)
	}

	recv(3, 0, 64)
	post(verbs.SendWR{ID: 12, Opcode: verbs.WRSend, Flags: verbs.SendSignaled})
	waitWC(t, p.acq, 1)
	wantWC(t, waitWC(t, p.bcq, 1)[0], 3, verbs.WCRecv, 0)

	// A WRITE of two SGEs, longer than the path MTU.
	post(verbs.SendWR{ID: 13, Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled,
		SGL: []verbs.SGE{src.SGE(0, 1500), src.SGE(2000, 1500)}, RemoteAddr: dst.AddrOf(100), RKey: dst.RKey()})
	wantWC(t, waitWC(t, p.acq, 1)[0], 13, verbs.WCRDMAWrite, 0)
	if !bytes.Equal(dst.Buf()[100:1600], src.Buf()[:1500]) || !bytes.Equal(dst.Buf()[1600:3100], src.Buf()[2000:3500]) {
		t.Fatal("WRITE: data differs")
	}

	recv(4, 0, 0)
	post(verbs.SendWR{ID: 14, Opcode: verbs.WRRDMAWriteWithImm, Flags: verbs.SendSignaled, Imm: 77,
		SGL: []verbs.SGE{src.SGE(0, 16)}, RemoteAddr: dst.AddrOf(3500), RKey: dst.RKey()})
	waitWC(t, p.acq, 1)
	wc = waitWC(t, p.bcq, 1)[0]
	if wc.Status != verbs.WCSuccess || wc.Opcode != verbs.WCRecvRDMAWithImm || wc.Imm != 77 || wc.ByteLen != 16 {
		t.Fatalf("WRITE_WITH_IMM: receive completion %+v", wc)
	}

	clear(src.Buf()[3000:4096])
	post(verbs.SendWR{ID: 15, Opcode: verbs.WRRDMARead, Flags: verbs.SendSignaled,
		SGL: []verbs.SGE{src.SGE(3000, 1000)}, RemoteAddr: dst.AddrOf(100), RKey: dst.RKey()})
	wantWC(t, waitWC(t, p.acq, 1)[0], 15, verbs.WCRDMARead, 1000)
	if !bytes.Equal(src.Buf()[3000:4000], dst.Buf()[100:1100]) {
		t.Fatal("READ: data differs")
	}

	binary.NativeEndian.PutUint64(dst.Buf()[4088:], 40)
	post(verbs.SendWR{ID: 16, Opcode: verbs.WRAtomicFetchAdd, Flags: verbs.SendSignaled,
		SGL: []verbs.SGE{src.SGE(0, 8)}, RemoteAddr: dst.AddrOf(4088), RKey: dst.RKey(), CompareAdd: 2})
	wantWC(t, waitWC(t, p.acq, 1)[0], 16, verbs.WCFetchAdd, 8)
	if old, now := binary.NativeEndian.Uint64(src.Buf()), binary.NativeEndian.Uint64(dst.Buf()[4088:]); old != 40 || now != 42 {
		t.Fatalf("FETCH_ADD: returned %d, memory %d; want 40, 42", old, now)
	}
	post(verbs.SendWR{ID: 17, Opcode: verbs.WRAtomicCmpAndSwp, Flags: verbs.SendSignaled,
		SGL: []verbs.SGE{src.SGE(0, 8)}, RemoteAddr: dst.AddrOf(4088), RKey: dst.RKey(), CompareAdd: 42, Swap: 7})
	wantWC(t, waitWC(t, p.acq, 1)[0], 17, verbs.WCCompSwap, 8)
	if old, now := binary.NativeEndian.Uint64(src.Buf()), binary.NativeEndian.Uint64(dst.Buf()[4088:]); old != 42 || now != 7 {
		t.Fatalf("CMP_AND_SWP: returned %d, memory %d; want 42, 7", old, now)
	}
}

// TestPostListAndPollBatch posts more work requests in one call than the provider
// converts per cgo call, and polls them back in batches, in order.
func TestPostListAndPollBatch(t *testing.T) {
	e := setup(t)
	p := e.pair(t, verbs.QPTypeRC)
	src := e.mr(t, 100*8, allAccess)
	dst := e.mr(t, 100*8, allAccess)
	wrs := make([]verbs.SendWR, 100)
	for i := range wrs {
		src.Buf()[i*8] = byte(i + 1)
		wrs[i] = verbs.SendWR{ID: uint64(i), Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled,
			SGL: []verbs.SGE{src.SGE(i*8, 8)}, RemoteAddr: dst.AddrOf(i * 8), RKey: dst.RKey()}
	}
	if err := p.a.PostSend(wrs...); err != nil {
		t.Fatal(err)
	}
	for i, wc := range waitWC(t, p.acq, len(wrs)) {
		wantWC(t, wc, uint64(i), verbs.WCRDMAWrite, 0)
	}
	if !bytes.Equal(src.Buf(), dst.Buf()) {
		t.Fatal("data differs")
	}
}

func TestUCOperations(t *testing.T) {
	e := setup(t)
	p := e.pair(t, verbs.QPTypeUC)
	src := e.mr(t, 4096, allAccess)
	dst := e.mr(t, 4096, allAccess)
	copy(src.Buf(), "unreliable but connected")
	if err := p.b.PostRecv(verbs.RecvWR{ID: 1, SGL: []verbs.SGE{dst.SGE(0, 4096)}}, verbs.RecvWR{ID: 2}); err != nil {
		t.Fatal(err)
	}
	if err := p.a.PostSend(
		verbs.SendWR{ID: 1, Opcode: verbs.WRSend, Flags: verbs.SendSignaled, SGL: []verbs.SGE{src.SGE(0, 2000)}},
		verbs.SendWR{ID: 2, Opcode: verbs.WRRDMAWriteWithImm, Flags: verbs.SendSignaled, Imm: 5,
			SGL: []verbs.SGE{src.SGE(0, 24)}, RemoteAddr: dst.AddrOf(3000), RKey: dst.RKey()}); err != nil {
		t.Fatal(err)
	}
	waitWC(t, p.acq, 2)
	wcs := waitWC(t, p.bcq, 2)
	wantWC(t, wcs[0], 1, verbs.WCRecv, 2000)
	if wcs[1].Opcode != verbs.WCRecvRDMAWithImm || wcs[1].Imm != 5 || wcs[1].ID != 2 {
		t.Fatalf("WRITE_WITH_IMM completion %+v", wcs[1])
	}
	if !bytes.Equal(dst.Buf()[3000:3024], src.Buf()[:24]) || !bytes.Equal(dst.Buf()[:2000], src.Buf()[:2000]) {
		t.Fatal("data differs")
	}
}

// TestUDSend sends datagrams through an address handle; the receiver finds the GRH area
// filled and answers through an AH built from the completion.
func TestUDSend(t *testing.T) {
	e := setup(t)
	p := e.pair(t, verbs.QPTypeUD)
	buf := e.mr(t, 4096, verbs.AccessLocalWrite)
	copy(buf.Buf(), "datagram")
	ah, err := e.pd.CreateAH(verbs.AHAttr{DGID: e.gid, SGIDIndex: uint8(e.gidIdx), HopLimit: 64, Port: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer ah.Close()
	if err := p.b.PostRecv(verbs.RecvWR{ID: 9, SGL: []verbs.SGE{buf.SGE(1024, verbs.GRHLen+256)}}); err != nil {
		t.Fatal(err)
	}
	if err := p.a.PostSend(verbs.SendWR{ID: 1, Opcode: verbs.WRSendWithImm, Flags: verbs.SendSignaled, Imm: 3,
		SGL: []verbs.SGE{buf.SGE(0, 8)}, AH: ah, RemoteQPN: p.b.QPN(), RemoteQKey: testQKey}); err != nil {
		t.Fatal(err)
	}
	wantWC(t, waitWC(t, p.acq, 1)[0], 1, verbs.WCSend, 0)
	wc := waitWC(t, p.bcq, 1)[0]
	wantWC(t, wc, 9, verbs.WCRecv, verbs.GRHLen+8)
	if wc.SrcQP != p.a.QPN() || wc.Flags&verbs.WCWithGRH == 0 || wc.Imm != 3 {
		t.Fatalf("UD completion %+v: want source QP %d, GRH and immediate 3", wc, p.a.QPN())
	}
	if got := string(buf.Buf()[1024+verbs.GRHLen : 1024+verbs.GRHLen+8]); got != "datagram" {
		t.Fatalf("payload %q", got)
	}
	back, err := verbs.AHAttrFromWC(&wc, buf.Buf()[1024:1024+verbs.GRHLen], 1)
	if err != nil {
		t.Fatal(err)
	}
	if back.DGID != e.gid {
		t.Fatalf("AH from the completion goes to %v, want %v", back.DGID, e.gid)
	}
}

// TestSRQ feeds two QPs from one shared receive queue and sees its limit event.
func TestSRQ(t *testing.T) {
	e := setup(t)
	events := e.dev.Events()
	srq, err := e.pd.CreateSRQ(verbs.SRQAttr{MaxWR: 16, MaxSGE: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer srq.Close()
	scq, rcq := e.cq(t, 64, nil), e.cq(t, 64, nil)
	r1 := e.qp(t, verbs.QPTypeRC, rcq, rcq, srq)
	r2 := e.qp(t, verbs.QPTypeRC, rcq, rcq, srq)
	s1 := e.qp(t, verbs.QPTypeRC, scq, scq, nil)
	s2 := e.qp(t, verbs.QPTypeRC, scq, scq, nil)
	e.connect(t, r1, s1.QPN())
	e.connect(t, s1, r1.QPN())
	e.connect(t, r2, s2.QPN())
	e.connect(t, s2, r2.QPN())
	// Receives land in slots 0..7; the SENDs read slot 8, which no receive writes: a
	// region that is both a SEND's source and a receive's target at once is a data race.
	buf := e.mr(t, 9*64, allAccess)
	copy(buf.Buf()[8*64:], "srq!")
	for i := range 8 {
		if err := srq.PostRecv(verbs.RecvWR{ID: uint64(i), SGL: []verbs.SGE{buf.SGE(i*64, 64)}}); err != nil {
			t.Fatal(err)
		}
	}
	if err := srq.Arm(6); err != nil {
		t.Fatal(err)
	}
	if got := srq.Query(); got.SRQLimit != 6 || got.MaxWR < 16 {
		t.Fatalf("SRQ attributes %+v", got)
	}
	for i, s := range []*verbs.QP{s1, s2, s1} {
		if err := s.PostSend(verbs.SendWR{ID: uint64(i), Opcode: verbs.WRSend, Flags: verbs.SendSignaled,
			SGL: []verbs.SGE{buf.SGE(8*64, 4)}}); err != nil {
			t.Fatal(err)
		}
	}
	waitWC(t, scq, 3)
	seen := map[uint32]bool{}
	for _, wc := range waitWC(t, rcq, 3) {
		if wc.Status != verbs.WCSuccess || wc.Opcode != verbs.WCRecv || wc.ByteLen != 4 {
			t.Fatalf("receive %+v", wc)
		}
		if got := string(buf.Buf()[wc.ID*64 : wc.ID*64+4]); got != "srq!" {
			t.Fatalf("receive %d holds %q", wc.ID, got)
		}
		seen[wc.QPN] = true
	}
	if !seen[r1.QPN()] || !seen[r2.QPN()] {
		t.Fatalf("receives on QPs %v, want both %d and %d", seen, r1.QPN(), r2.QPN())
	}
	waitEvent(t, events, verbs.EventSRQLimitReached, func(ev verbs.AsyncEvent) bool { return ev.SRQ == srq })
}

// TestInlineSend: an inline SEND's data is copied when it is posted, so the buffer may be
// reused at once.
func TestInlineSend(t *testing.T) {
	e := setup(t)
	acq, bcq := e.cq(t, 16, nil), e.cq(t, 16, nil)
	a, err := e.pd.CreateQP(verbs.QPInitAttr{Type: verbs.QPTypeRC, SendCQ: acq, RecvCQ: acq,
		Cap: verbs.QPCap{MaxSendWR: 8, MaxRecvWR: 8, MaxSendSGE: 1, MaxRecvSGE: 1, MaxInline: 64}})
	if err != nil {
		t.Skipf("no inline data: %v", err)
	}
	defer a.Close()
	b := e.qp(t, verbs.QPTypeRC, bcq, bcq, nil)
	e.connect(t, a, b.QPN())
	e.connect(t, b, a.QPN())
	src := e.mr(t, 64, allAccess)
	dst := e.mr(t, 64, allAccess)
	copy(src.Buf(), "inline, copied at post")
	if err := b.PostRecv(verbs.RecvWR{ID: 1, SGL: []verbs.SGE{dst.SGE(0, 64)}}); err != nil {
		t.Fatal(err)
	}
	if err := a.PostSend(verbs.SendWR{ID: 2, Opcode: verbs.WRSend, Flags: verbs.SendSignaled | verbs.SendInline,
		SGL: []verbs.SGE{src.SGE(0, 22)}}); err != nil {
		t.Fatal(err)
	}
	copy(src.Buf(), "overwritten after post")
	waitWC(t, acq, 1)
	wantWC(t, waitWC(t, bcq, 1)[0], 1, verbs.WCRecv, 22)
	if got := string(dst.Buf()[:22]); got != "inline, copied at post" {
		t.Fatalf("received %q", got)
	}
}

package verbs

import (
	"bytes"
	"testing"
)

func TestMemoryWindowType1(t *testing.T) {
	a, b := newHost(t), newHost(t)
	p := newPair(t, a, b, QPTypeRC, defaultRC())
	src := a.mr(t, 4096, allAccess)
	fill(src.Buf(), 5)
	target := b.mr(t, 8192, allAccess|AccessMWBind)
	mw, err := b.pd.AllocMW(MWType1)
	if err != nil {
		t.Fatal(err)
	}
	// Grant remote write to bytes [1024, 3072) of the region.
	rkey, err := p.qb.BindMW(mw, 1, SendSignaled, MWBind{MR: target, Addr: target.AddrOf(1024), Length: 2048, Access: AccessRemoteWrite})
	if err != nil {
		t.Fatal(err)
	}
	if wc := expectStatus(t, b.cq, 1, WCSuccess); wc.Opcode != WCBindMW {
		t.Fatalf("bind completion %+v", wc)
	}
	if rkey == target.RKey() || mw.RKey() != rkey {
		t.Fatalf("window rkey %#x (MR %#x, reported %#x)", rkey, target.RKey(), mw.RKey())
	}
	p.qa.PostSend(SendWR{ID: 2, Opcode: WRRDMAWrite, Flags: SendSignaled, SGL: []SGE{src.SGE(0, 2048)},
		RemoteAddr: target.AddrOf(1024), RKey: rkey})
	expectStatus(t, a.cq, 2, WCSuccess)
	if !bytes.Equal(target.Buf()[1024:3072], src.Buf()[:2048]) {
		t.Fatal("WRITE through the window did not land")
	}
	// The MR cannot be deregistered while the window is bound to it.
	if err := target.Close(); err == nil {
		t.Fatal("deregistered an MR with a bound window")
	}
	// One byte past the window (still inside the MR) is a remote access error.
	p.qa.PostSend(SendWR{ID: 3, Opcode: WRRDMAWrite, Flags: SendSignaled, SGL: []SGE{src.SGE(0, 2048)},
		RemoteAddr: target.AddrOf(1025), RKey: rkey})
	expectStatus(t, a.cq, 3, WCRemAccessErr)
	if !bytes.Equal(target.Buf()[3072:], make([]byte, 8192-3072)) {
		t.Fatal("memory outside the window changed")
	}
}

func TestMemoryWindowType2InvalidateAndRights(t *testing.T) {
	a, b := newHost(t), newHost(t)
	target := b.mr(t, 4096, allAccess|AccessMWBind)
	copy(target.Buf()[100:], "window bytes")
	mw, err := b.pd.AllocMW(MWType2)
	if err != nil {
		t.Fatal(err)
	}
	read := func(p *pair, id uint64, rkey uint32, want WCStatus) {
		t.Helper()
		dst := a.mr(t, 64, allAccess)
		p.qa.PostSend(SendWR{ID: id, Opcode: WRRDMARead, Flags: SendSignaled, SGL: []SGE{dst.SGE(0, 12)},
			RemoteAddr: target.AddrOf(100), RKey: rkey})
		expectStatus(t, a.cq, id, want)
		if want == WCSuccess && string(dst.Buf()[:12]) != "window bytes" {
			t.Fatalf("READ through the window returned %q", dst.Buf()[:12])
		}
	}
	bind := func(p *pair, id uint64, access Access) uint32 {
		t.Helper()
		rkey := IncRKey(mw.RKey())
		if err := p.qb.PostSend(SendWR{ID: id, Opcode: WRBindMW, Flags: SendSignaled, Bind: &MWBindWR{MW: mw, RKey: rkey,
			MWBind: MWBind{MR: target, Addr: target.Addr(), Length: 4096, Access: access}}}); err != nil {
			t.Fatal(err)
		}
		if wc := expectStatus(t, b.cq, id, WCSuccess); wc.Opcode != WCBindMW {
			t.Fatalf("bind completion %+v", wc)
		}
		return rkey
	}

	// Bound for remote read: READ works; LOCAL_INV revokes it; the next READ is refused.
	p := newPair(t, a, b, QPTypeRC, defaultRC())
	rkey := bind(p, 1, AccessRemoteRead)
	read(p, 10, rkey, WCSuccess)
	if err := p.qb.PostSend(SendWR{ID: 2, Opcode: WRLocalInv, Flags: SendSignaled, Imm: rkey}); err != nil {
		t.Fatal(err)
	}
	if wc := expectStatus(t, b.cq, 2, WCSuccess); wc.Opcode != WCLocalInv {
		t.Fatalf("LOCAL_INV completion %+v", wc)
	}
	read(p, 11, rkey, WCRemAccessErr)

	// Rebound after invalidation with a new key: the old rkey stays dead, the new one
	// works; the peer's SEND_WITH_INV revokes it and the receiver learns which rkey.
	p = newPair(t, a, b, QPTypeRC, defaultRC())
	rkey2 := bind(p, 3, AccessRemoteRead)
	if rkey2 == rkey {
		t.Fatal("rebinding kept the rkey")
	}
	read(p, 12, rkey2, WCSuccess)
	rbuf := b.mr(t, 64, allAccess)
	p.qb.PostRecv(RecvWR{ID: 4, SGL: []SGE{rbuf.SGE(0, 64)}})
	src := a.mr(t, 64, allAccess)
	p.qa.PostSend(SendWR{ID: 13, Opcode: WRSendWithInv, Imm: rkey2, Flags: SendSignaled, SGL: []SGE{src.SGE(0, 8)}})
	expectStatus(t, a.cq, 13, WCSuccess)
	wc := expectStatus(t, b.rcq, 4, WCSuccess)
	if wc.Flags&WCWithInv == 0 || wc.Imm != rkey2 {
		t.Fatalf("SEND_WITH_INV receive completion %+v", wc)
	}
	read(p, 14, rkey2, WCRemAccessErr)

	// A window bound without remote write refuses a WRITE.
	p = newPair(t, a, b, QPTypeRC, defaultRC())
	rkey3 := bind(p, 5, AccessRemoteRead)
	p.qa.PostSend(SendWR{ID: 15, Opcode: WRRDMAWrite, Flags: SendSignaled, SGL: []SGE{src.SGE(0, 8)},
		RemoteAddr: target.Addr(), RKey: rkey3})
	expectStatus(t, a.cq, 15, WCRemAccessErr)
	if string(target.Buf()[100:112]) != "window bytes" {
		t.Fatal("a refused WRITE changed memory")
	}
}

func TestMemoryWindowBindErrors(t *testing.T) {
	a, b := newHost(t), newHost(t)
	p := newPair(t, a, b, QPTypeRC, defaultRC())
	noBind := b.mr(t, 4096, allAccess) // no AccessMWBind
	mw, _ := b.pd.AllocMW(MWType1)
	if _, err := p.qb.BindMW(mw, 1, SendSignaled, MWBind{MR: noBind, Addr: noBind.Addr(), Length: 64, Access: AccessRemoteRead}); err != nil {
		t.Fatal(err)
	}
	expectStatus(t, b.cq, 1, WCMWBindErr)
	waitState(t, p.qb, QPStateErr)
	// A type 2 window is not bound by the type 1 call.
	mw2, _ := b.pd.AllocMW(MWType2)
	if _, err := p.qb.BindMW(mw2, 2, 0, MWBind{}); err == nil {
		t.Fatal("BindMW accepted a type 2 window")
	}
}

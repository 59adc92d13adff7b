package engine_test

import (
	"bytes"
	"testing"

	"github.com/goverbs/goverbs/verbs"
)

func TestMemoryWindowType1(t *testing.T) {
	a, b := newHost(t), newHost(t)
	p := newPair(t, a, b, verbs.QPTypeRC, defaultRC())
	src := a.MR(t, 4096, allAccess)
	fill(src.Buf(), 5)
	target := b.MR(t, 8192, allAccess|verbs.AccessMWBind)
	mw, err := b.PD.AllocMW(verbs.MWType1)
	if err != nil {
		t.Fatal(err)
	}
	// Grant remote write to bytes [1024, 3072) of the region.
	rkey, err := p.QB.BindMW(mw, 1, verbs.SendSignaled, verbs.MWBind{MR: target, Addr: target.AddrOf(1024), Length: 2048, Access: verbs.AccessRemoteWrite})
	if err != nil {
		t.Fatal(err)
	}
	if wc := expectStatus(t, b.CQ, 1, verbs.WCSuccess); wc.Opcode != verbs.WCBindMW {
		t.Fatalf("bind completion %+v", wc)
	}
	if rkey == target.RKey() || mw.RKey() != rkey {
		t.Fatalf("window rkey %#x (MR %#x, reported %#x)", rkey, target.RKey(), mw.RKey())
	}
	p.QA.PostSend(verbs.SendWR{ID: 2, Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled, SGL: []verbs.SGE{src.SGE(0, 2048)},
		RemoteAddr: target.AddrOf(1024), RKey: rkey})
	expectStatus(t, a.CQ, 2, verbs.WCSuccess)
	if !bytes.Equal(target.Buf()[1024:3072], src.Buf()[:2048]) {
		t.Fatal("WRITE through the window did not land")
	}
	// The MR cannot be deregistered while the window is bound to it.
	if err := target.Close(); err == nil {
		t.Fatal("deregistered an MR with a bound window")
	}
	// One byte past the window (still inside the MR) is a remote access error.
	p.QA.PostSend(verbs.SendWR{ID: 3, Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled, SGL: []verbs.SGE{src.SGE(0, 2048)},
		RemoteAddr: target.AddrOf(1025), RKey: rkey})
	expectStatus(t, a.CQ, 3, verbs.WCRemAccessErr)
	if !bytes.Equal(target.Buf()[3072:], make([]byte, 8192-3072)) {
		t.Fatal("memory outside the window changed")
	}
}

func TestMemoryWindowType2InvalidateAndRights(t *testing.T) {
	a, b := newHost(t), newHost(t)
	target := b.MR(t, 4096, allAccess|verbs.AccessMWBind)
	copy(target.Buf()[100:], "window bytes")
	mw, err := b.PD.AllocMW(verbs.MWType2)
	if err != nil {
		t.Fatal(err)
	}
	read := func(p *pair, id uint64, rkey uint32, want verbs.WCStatus) {
		t.Helper()
		dst := a.MR(t, 64, allAccess)
		p.QA.PostSend(verbs.SendWR{ID: id, Opcode: verbs.WRRDMARead, Flags: verbs.SendSignaled, SGL: []verbs.SGE{dst.SGE(0, 12)},
			RemoteAddr: target.AddrOf(100), RKey: rkey})
		expectStatus(t, a.CQ, id, want)
		if want == verbs.WCSuccess && string(dst.Buf()[:12]) != "window bytes" {
			t.Fatalf("READ through the window returned %q", dst.Buf()[:12])
		}
	}
	bind := func(p *pair, id uint64, access verbs.Access) uint32 {
		t.Helper()
		rkey := verbs.IncRKey(mw.RKey())
		if err := p.QB.PostSend(verbs.SendWR{ID: id, Opcode: verbs.WRBindMW, Flags: verbs.SendSignaled, Bind: &verbs.MWBindWR{MW: mw, RKey: rkey,
			MWBind: verbs.MWBind{MR: target, Addr: target.Addr(), Length: 4096, Access: access}}}); err != nil {
			t.Fatal(err)
		}
		if wc := expectStatus(t, b.CQ, id, verbs.WCSuccess); wc.Opcode != verbs.WCBindMW {
			t.Fatalf("bind completion %+v", wc)
		}
		return rkey
	}

	// Bound for remote read: READ works; LOCAL_INV revokes it; the next READ is refused.
	p := newPair(t, a, b, verbs.QPTypeRC, defaultRC())
	rkey := bind(p, 1, verbs.AccessRemoteRead)
	read(p, 10, rkey, verbs.WCSuccess)
	if err := p.QB.PostSend(verbs.SendWR{ID: 2, Opcode: verbs.WRLocalInv, Flags: verbs.SendSignaled, Imm: rkey}); err != nil {
		t.Fatal(err)
	}
	if wc := expectStatus(t, b.CQ, 2, verbs.WCSuccess); wc.Opcode != verbs.WCLocalInv {
		t.Fatalf("LOCAL_INV completion %+v", wc)
	}
	read(p, 11, rkey, verbs.WCRemAccessErr)

	// Rebound after invalidation with a new key: the old rkey stays dead, the new one
	// works; the peer's SEND_WITH_INV revokes it and the receiver learns which rkey.
	p = newPair(t, a, b, verbs.QPTypeRC, defaultRC())
	rkey2 := bind(p, 3, verbs.AccessRemoteRead)
	if rkey2 == rkey {
		t.Fatal("rebinding kept the rkey")
	}
	read(p, 12, rkey2, verbs.WCSuccess)
	rbuf := b.MR(t, 64, allAccess)
	p.QB.PostRecv(verbs.RecvWR{ID: 4, SGL: []verbs.SGE{rbuf.SGE(0, 64)}})
	src := a.MR(t, 64, allAccess)
	p.QA.PostSend(verbs.SendWR{ID: 13, Opcode: verbs.WRSendWithInv, Imm: rkey2, Flags: verbs.SendSignaled, SGL: []verbs.SGE{src.SGE(0, 8)}})
	expectStatus(t, a.CQ, 13, verbs.WCSuccess)
	wc := expectStatus(t, b.RCQ, 4, verbs.WCSuccess)
	if wc.Flags&verbs.WCWithInv == 0 || wc.Imm != rkey2 {
		t.Fatalf("SEND_WITH_INV receive completion %+v", wc)
	}
	read(p, 14, rkey2, verbs.WCRemAccessErr)

	// A window bound without remote write refuses a WRITE.
	p = newPair(t, a, b, verbs.QPTypeRC, defaultRC())
	rkey3 := bind(p, 5, verbs.AccessRemoteRead)
	p.QA.PostSend(verbs.SendWR{ID: 15, Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled, SGL: []verbs.SGE{src.SGE(0, 8)},
		RemoteAddr: target.Addr(), RKey: rkey3})
	expectStatus(t, a.CQ, 15, verbs.WCRemAccessErr)
	if string(target.Buf()[100:112]) != "window bytes" {
		t.Fatal("a refused WRITE changed memory")
	}
}

func TestMemoryWindowBindErrors(t *testing.T) {
	a, b := newHost(t), newHost(t)
	p := newPair(t, a, b, verbs.QPTypeRC, defaultRC())
	noBind := b.MR(t, 4096, allAccess) // no AccessMWBind
	mw, _ := b.PD.AllocMW(verbs.MWType1)
	if _, err := p.QB.BindMW(mw, 1, verbs.SendSignaled, verbs.MWBind{MR: noBind, Addr: noBind.Addr(), Length: 64, Access: verbs.AccessRemoteRead}); err != nil {
		t.Fatal(err)
	}
	expectStatus(t, b.CQ, 1, verbs.WCMWBindErr)
	waitState(t, p.QB, verbs.QPStateErr)
	// A type 2 window is not bound by the type 1 call.
	mw2, _ := b.PD.AllocMW(verbs.MWType2)
	if _, err := p.QB.BindMW(mw2, 2, 0, verbs.MWBind{}); err == nil {
		t.Fatal("BindMW accepted a type 2 window")
	}
}

// TestWindowKeyIsNoLKey: a memory window's key names remote access only (IBTA 10.6.3:
// an L_Key names a memory region); given as a scatter/gather entry's lkey it is a local
// protection error, and nothing is sent from the window's memory.
func TestWindowKeyIsNoLKey(t *testing.T) {
	a, b := newHost(t), newHost(t)
	p := newPair(t, a, b, verbs.QPTypeRC, defaultRC())
	target := b.MR(t, 4096, allAccess|verbs.AccessMWBind)
	copy(target.Buf()[1024:], "behind the window")
	mw, err := b.PD.AllocMW(verbs.MWType1)
	if err != nil {
		t.Fatal(err)
	}
	rkey, err := p.QB.BindMW(mw, 1, verbs.SendSignaled, verbs.MWBind{MR: target, Addr: target.AddrOf(1024), Length: 2048, Access: verbs.AccessRemoteRead})
	if err != nil {
		t.Fatal(err)
	}
	expectStatus(t, b.CQ, 1, verbs.WCSuccess)
	dst := a.MR(t, 4096, allAccess)
	p.QB.PostSend(verbs.SendWR{ID: 2, Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled,
		SGL: []verbs.SGE{{Addr: target.AddrOf(1024), Length: 17, LKey: rkey}}, RemoteAddr: dst.Addr(), RKey: dst.RKey()})
	expectStatus(t, b.CQ, 2, verbs.WCLocProtErr)
	if !bytes.Equal(dst.Buf(), make([]byte, 4096)) {
		t.Fatal("bytes sent from a window named as an lkey")
	}
}

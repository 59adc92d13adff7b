//go:build ibverbs

package ibverbs_test

import (
	"testing"

	"github.com/goverbs/goverbs/verbs"
)

// TestMemoryWindows grants remote write through a type 1 window (ibv_bind_mw) and a type
// 2 window (a BIND_MW work request), and revokes the type 2 one with SEND_WITH_INV.
func TestMemoryWindows(t *testing.T) {
	e := setup(t)
	mw1, err := e.pd.AllocMW(verbs.MWType1)
	if err != nil {
		t.Skipf("%s has no memory windows: %v", e.dev.Name(), err)
	}
	defer mw1.Close()
	p := e.pair(t, verbs.QPTypeRC)
	src := e.mr(t, 4096, allAccess)
	dst := e.mr(t, 4096, allAccess|verbs.AccessMWBind)
	copy(src.Buf(), "through a window")

	rkey, err := p.b.BindMW(mw1, 1, verbs.SendSignaled, verbs.MWBind{MR: dst, Addr: dst.AddrOf(1024), Length: 1024,
		Access: verbs.AccessRemoteWrite})
	if err != nil {
		t.Fatal(err)
	}
	if wc := waitWC(t, p.bcq, 1)[0]; wc.Status != verbs.WCSuccess || wc.Opcode != verbs.WCBindMW {
		t.Fatalf("bind completion %+v (%v)", wc, wc.Status)
	}
	write := func(id uint64, rkey uint32, off int) verbs.WC {
		t.Helper()
		if err := p.a.PostSend(verbs.SendWR{ID: id, Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled,
			SGL: []verbs.SGE{src.SGE(0, 16)}, RemoteAddr: dst.AddrOf(off), RKey: rkey}); err != nil {
			t.Fatal(err)
		}
		return waitWC(t, p.acq, 1)[0]
	}
	if wc := write(2, rkey, 1024); wc.Status != verbs.WCSuccess || string(dst.Buf()[1024:1040]) != "through a window" {
		t.Fatalf("WRITE through the type 1 window: %+v (%v)", wc, wc.Status)
	}

	// A zero-length bind with no region unbinds the type 1 window.
	if _, err := p.b.BindMW(mw1, 8, verbs.SendSignaled, verbs.MWBind{}); err != nil {
		t.Fatal(err)
	}
	if wc := waitWC(t, p.bcq, 1)[0]; wc.Status != verbs.WCSuccess || wc.ID != 8 {
		t.Fatalf("unbind completion %+v (%v)", wc, wc.Status)
	}
	if wc := write(9, rkey, 1024); wc.Status != verbs.WCRemAccessErr {
		t.Fatalf("WRITE through the unbound type 1 window: %+v (%v), want remote access error", wc, wc.Status)
	}
	// The requester's QP is in ERR now: a new pair for the type 2 window.
	p = e.pair(t, verbs.QPTypeRC)

	mw2, err := e.pd.AllocMW(verbs.MWType2)
	if err != nil {
		t.Skipf("no type 2 windows: %v", err)
	}
	defer mw2.Close()
	rkey2 := verbs.IncRKey(mw2.RKey())
	if err := p.b.PostSend(verbs.SendWR{ID: 3, Opcode: verbs.WRBindMW, Flags: verbs.SendSignaled,
		Bind: &verbs.MWBindWR{MW: mw2, RKey: rkey2, MWBind: verbs.MWBind{MR: dst, Addr: dst.AddrOf(2048),
			Length: 1024, Access: verbs.AccessRemoteWrite}}}); err != nil {
		t.Fatal(err)
	}
	if wc := waitWC(t, p.bcq, 1)[0]; wc.Status != verbs.WCSuccess || wc.ID != 3 {
		t.Fatalf("BIND_MW completion %+v (%v)", wc, wc.Status)
	}
	if wc := write(4, rkey2, 2048); wc.Status != verbs.WCSuccess || string(dst.Buf()[2048:2064]) != "through a window" {
		t.Fatalf("WRITE through the type 2 window: %+v (%v)", wc, wc.Status)
	}
	if err := p.b.PostRecv(verbs.RecvWR{ID: 5}); err != nil {
		t.Fatal(err)
	}
	if err := p.a.PostSend(verbs.SendWR{ID: 6, Opcode: verbs.WRSendWithInv, Flags: verbs.SendSignaled, Imm: rkey2}); err != nil {
		t.Fatal(err)
	}
	waitWC(t, p.acq, 1)
	if wc := waitWC(t, p.bcq, 1)[0]; wc.Status != verbs.WCSuccess || wc.Flags&verbs.WCWithInv == 0 || wc.Imm != rkey2 {
		t.Fatalf("SEND_WITH_INV receive %+v, want the invalidated rkey %#x", wc, rkey2)
	}
	if wc := write(7, rkey2, 2048); wc.Status != verbs.WCRemAccessErr {
		t.Fatalf("WRITE through the invalidated window: %+v (%v), want remote access error", wc, wc.Status)
	}
}

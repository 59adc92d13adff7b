//go:build ibverbs

package ibverbs_test

import (
	"errors"
	"math/rand/v2"
	"testing"

	"github.com/goverbs/goverbs/verbs"
)

// TestRemoteAccessError writes through a wrong rkey: the requester completes with a
// remote access error, its QP goes to ERR, and what it posts next is flushed.
func TestRemoteAccessError(t *testing.T) {
	e := setup(t)
	p := e.pair(t, verbs.QPTypeRC)
	src := e.mr(t, 64, allAccess)
	dst := e.mr(t, 64, verbs.AccessLocalWrite) // no remote write
	if err := p.a.PostSend(verbs.SendWR{ID: 1, Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled,
		SGL: []verbs.SGE{src.SGE(0, 8)}, RemoteAddr: dst.Addr(), RKey: dst.RKey()}); err != nil {
		t.Fatal(err)
	}
	wc := waitWC(t, p.acq, 1)[0]
	if wc.ID != 1 || wc.Status != verbs.WCRemAccessErr {
		t.Fatalf("completion %+v (%v), want remote access error", wc, wc.Status)
	}
	if s := p.a.State(); s != verbs.QPStateErr {
		t.Fatalf("requester QP is %v after the error, want ERR", s)
	}
	if err := p.a.PostSend(verbs.SendWR{ID: 2, Opcode: verbs.WRSend, Flags: verbs.SendSignaled}); err != nil {
		t.Fatal(err)
	}
	if wc := waitWC(t, p.acq, 1)[0]; wc.ID != 2 || wc.Status != verbs.WCWRFlushErr {
		t.Fatalf("completion %+v (%v), want flushed", wc, wc.Status)
	}
}

// TestControlErrors checks that refusals match the verbs sentinels.
func TestControlErrors(t *testing.T) {
	e := setup(t)
	cq := e.cq(t, 16, nil)
	qp := e.qp(t, verbs.QPTypeRC, cq, cq, nil)

	_, err := e.pd.RegMR(make([]byte, 64), verbs.AccessRemoteWrite) // needs local write
	wantErr(t, err, verbs.ErrInvalidAttr)

	err = qp.Modify(&verbs.QPAttr{State: verbs.QPStateRTS}, verbs.QPAttrState) // from RESET
	wantErr(t, err, verbs.ErrInvalidState)
	e.connect(t, qp, qp.QPN()) // receives may be posted from INIT on

	too := make([]verbs.SGE, qp.Query().Cap.MaxRecvSGE+1)
	mr := e.mr(t, 64, verbs.AccessLocalWrite)
	for i := range too {
		too[i] = mr.SGE(0, 8)
	}
	err = qp.PostRecv(verbs.RecvWR{ID: 1, SGL: []verbs.SGE{mr.SGE(0, 8)}}, verbs.RecvWR{ID: 2, SGL: too})
	var pe *verbs.PostError
	if !errors.As(err, &pe) || pe.Index != 1 {
		t.Fatalf("PostRecv with too many SGEs: %v, want a PostError at index 1", err)
	}
	wantErr(t, err, verbs.ErrInvalidAttr)

	wantErr(t, cq.Close(), verbs.ErrBusy) // the QP uses it
	wantErr(t, e.pd.Close(), verbs.ErrBusy)

	if err := qp.Close(); err != nil {
		t.Fatal(err)
	}
	err = qp.PostSend(verbs.SendWR{Opcode: verbs.WRSend})
	wantErr(t, err, verbs.ErrClosed)
	if _, err := verbs.Open("no-such-device-0"); err == nil {
		t.Fatal("Open of an unknown device succeeded")
	} else {
		wantErr(t, err, verbs.ErrNoDevice)
	}
}

// TestPostRefusesWhatWouldFault: requests the provider library would act on with the CPU
// (and fault on) are refused with an error instead: a UD send without an address handle,
// and inline data outside the region its lkey names.
func TestPostRefusesWhatWouldFault(t *testing.T) {
	e := setup(t)
	cq := e.cq(t, 16, nil)
	ud := e.qp(t, verbs.QPTypeUD, cq, cq, nil)
	e.connect(t, ud, ud.QPN())
	buf := e.mr(t, 64, allAccess)
	err := ud.PostSend(verbs.SendWR{ID: 1, Opcode: verbs.WRSend, SGL: []verbs.SGE{buf.SGE(0, 8)}, RemoteQPN: ud.QPN(), RemoteQKey: testQKey})
	wantErr(t, err, verbs.ErrInvalidAttr)

	rc, err := e.pd.CreateQP(verbs.QPInitAttr{Type: verbs.QPTypeRC, SendCQ: cq, RecvCQ: cq,
		Cap: verbs.QPCap{MaxSendWR: 8, MaxRecvWR: 8, MaxSendSGE: 1, MaxRecvSGE: 1, MaxInline: 64}})
	if err != nil {
		t.Skipf("no inline data: %v", err)
	}
	defer rc.Close()
	e.connect(t, rc, rc.QPN())
	outside := buf.SGE(32, 32)
	outside.Addr += 64 // past the region's end
	err = rc.PostSend(verbs.SendWR{ID: 2, Opcode: verbs.WRSend, Flags: verbs.SendInline | verbs.SendSignaled, SGL: []verbs.SGE{outside}})
	wantErr(t, err, verbs.ErrInvalidAttr)
	wild := verbs.SGE{Addr: 8, Length: 8, LKey: buf.LKey()}
	err = rc.PostSend(verbs.SendWR{ID: 3, Opcode: verbs.WRSend, Flags: verbs.SendInline | verbs.SendSignaled, SGL: []verbs.SGE{wild}})
	wantErr(t, err, verbs.ErrInvalidAttr)
}

// TestPostGarbage posts requests with arbitrary opcodes, flags, remote addresses and keys
// (their SGEs inside a registered region): each is refused or completes with an error
// status, and nothing crashes.
func TestPostGarbage(t *testing.T) {
	e := setup(t)
	p := e.pair(t, verbs.QPTypeRC)
	buf := e.mr(t, 4096, allAccess)
	rng := rand.New(rand.NewPCG(1, 2))
	posted := 0
	for i := range 300 {
		off := rng.IntN(4096)
		n := rng.IntN(4096 - off + 1)
		wr := verbs.SendWR{ID: uint64(i), Opcode: verbs.WROpcode(rng.IntN(12)),
			Flags:      verbs.SendFlags(rng.IntN(16)) | verbs.SendSignaled,
			SGL:        []verbs.SGE{buf.SGE(off, n)}[:rng.IntN(2)],
			RemoteAddr: rng.Uint64(), RKey: rng.Uint32(), Imm: rng.Uint32(),
			CompareAdd: rng.Uint64(), Swap: rng.Uint64()}
		if rng.IntN(2) == 0 {
			wr.RemoteAddr, wr.RKey = buf.AddrOf(rng.IntN(4096)), buf.RKey()
		}
		if p.a.PostSend(wr) == nil {
			posted++
		}
		if rng.IntN(4) == 0 {
			p.b.PostRecv(verbs.RecvWR{ID: uint64(i), SGL: []verbs.SGE{buf.SGE(0, 64)}})
		}
		drain(p.acq)
		drain(p.bcq)
	}
	t.Logf("%d of 300 posted", posted)
}

// drain polls a CQ empty without waiting.
func drain(cq *verbs.CQ) {
	wcs := make([]verbs.WC, 16)
	for {
		if n, err := cq.Poll(wcs); err != nil || n == 0 {
			return
		}
	}
}

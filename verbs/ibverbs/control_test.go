//go:build ibverbs

package ibverbs_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"os"
	"testing"
	"time"

	"github.com/goverbs/goverbs/verbs"
	"github.com/goverbs/goverbs/verbs/ibverbs"
)

func waitEvent(t testing.TB, events <-chan verbs.AsyncEvent, typ verbs.EventType, match func(verbs.AsyncEvent) bool) {
	t.Helper()
	timeout := time.After(waitFor)
	for {
		select {
		case ev, ok := <-events:
			if !ok {
				t.Fatalf("event channel closed before %v", typ)
			}
			if ev.Type == typ && match(ev) {
				return
			}
			t.Logf("event %v (waiting for %v)", ev, typ)
		case <-timeout:
			t.Fatalf("no %v event after %v", typ, waitFor)
		}
	}
}

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

// TestCompletionChannel waits for a completion through a channel instead of polling.
func TestCompletionChannel(t *testing.T) {
	e := setup(t)
	ch := e.dev.CreateCompChannel()
	defer ch.Close()
	acq, bcq := e.cq(t, 16, nil), e.cq(t, 16, ch)
	a := e.qp(t, verbs.QPTypeRC, acq, acq, nil)
	b := e.qp(t, verbs.QPTypeRC, bcq, bcq, nil)
	e.connect(t, a, b.QPN())
	e.connect(t, b, a.QPN())
	buf := e.mr(t, 64, allAccess)
	for round := range 3 {
		if err := bcq.RequestNotify(false); err != nil {
			t.Fatal(err)
		}
		if err := b.PostRecv(verbs.RecvWR{ID: uint64(round), SGL: []verbs.SGE{buf.SGE(0, 64)}}); err != nil {
			t.Fatal(err)
		}
		if err := a.PostSend(verbs.SendWR{Opcode: verbs.WRSend, Flags: verbs.SendSignaled, SGL: []verbs.SGE{buf.SGE(0, 4)}}); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), waitFor)
		got, err := ch.Wait(ctx)
		cancel()
		if err != nil || got != bcq {
			t.Fatalf("round %d: Wait = %v, %v; want the receive CQ", round, got, err)
		}
		got.AckEvents(1)
		wantWC(t, waitWC(t, bcq, 1)[0], uint64(round), verbs.WCRecv, 4)
		waitWC(t, acq, 1)
	}
	// Unarmed, the channel stays quiet.
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if got, err := ch.Wait(ctx); err == nil {
		t.Fatalf("Wait on an unarmed CQ returned %v", got)
	}
}

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

// TestPostAndPollAllocateNothing: the data path converts in memory the QP and CQ own.
func TestPostAndPollAllocateNothing(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates")
	}
	e := setup(t)
	p := e.pair(t, verbs.QPTypeRC)
	src := e.mr(t, 64, allAccess)
	dst := e.mr(t, 64, allAccess)
	wcs := make([]verbs.WC, 4)
	deadline := time.Now().Add(waitFor)
	allocs := testing.AllocsPerRun(100, func() {
		if err := p.a.PostSend(verbs.SendWR{ID: 1, Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled,
			SGL: []verbs.SGE{src.SGE(0, 8)}, RemoteAddr: dst.Addr(), RKey: dst.RKey()}); err != nil {
			panic(err)
		}
		for {
			n, err := p.acq.Poll(wcs)
			if err != nil || n > 0 && wcs[0].Status != verbs.WCSuccess {
				panic("poll failed")
			}
			if n > 0 || time.Now().After(deadline) {
				return
			}
		}
	})
	if allocs != 0 {
		t.Fatalf("%v allocations per post and poll, want 0", allocs)
	}
}

// TestDeviceCloseClosesObjects: Close with objects open releases them, and using one
// afterwards is an error, not a crash.
func TestDeviceCloseClosesObjects(t *testing.T) {
	e := setup(t)
	p := e.pair(t, verbs.QPTypeRC)
	e.mr(t, 4096, allAccess)
	if _, err := e.pd.CreateSRQ(verbs.SRQAttr{MaxWR: 4, MaxSGE: 1}); err != nil {
		t.Fatal(err)
	}
	if err := e.dev.Close(); err != nil {
		t.Fatalf("Close with objects open: %v", err)
	}
	// The device's context is gone: queries must not reach it, creations fail.
	e.dev.QueryPort(1)
	e.dev.GIDTable(1)
	_, err := e.dev.AllocPD()
	wantErr(t, err, verbs.ErrClosed)
	if e.dev.Info().Provider == "soft" {
		t.Skip("the software provider still accepts registrations and posts on a closed device")
	}
	_, err = e.pd.RegMR(make([]byte, 64), verbs.AccessLocalWrite)
	wantErr(t, err, verbs.ErrClosed)
	wantErr(t, p.a.PostSend(verbs.SendWR{Opcode: verbs.WRSend}), verbs.ErrClosed)
	_, err = p.acq.Poll(make([]verbs.WC, 1))
	wantErr(t, err, verbs.ErrClosed)
	if _, ok := <-e.dev.Events(); ok {
		t.Fatal("the event channel is open after Close")
	}
}

func TestCounters(t *testing.T) {
	e := setup(t)
	sum := func() (s uint64) {
		for _, c := range e.dev.Counters() {
			s += c.Value
		}
		return s
	}
	before := sum()
	p := e.pair(t, verbs.QPTypeRC)
	buf := e.mr(t, 64, allAccess)
	for i := range 4 {
		if err := p.a.PostSend(verbs.SendWR{ID: uint64(i), Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled,
			SGL: []verbs.SGE{buf.SGE(0, 8)}, RemoteAddr: buf.AddrOf(32), RKey: buf.RKey()}); err != nil {
			t.Fatal(err)
		}
	}
	waitWC(t, p.acq, 4)
	if after := sum(); after <= before {
		t.Fatalf("counters sum %d before 4 WRITEs, %d after: %v", before, after, e.dev.Counters())
	}
}

// TestQPEvent moves a QP that receives from an SRQ to ERR: the device reports Last WQE
// Reached for it (IBTA 11.6.3), and the event names the program's own QP.
func TestQPEvent(t *testing.T) {
	e := setup(t)
	if e.dev.Query().VendorID == 0xffffff {
		// Checked in the VM (Linux 6.1): rxe raises no QP events for this, nor for a
		// remote access error; its SRQ limit event (TestSRQ) exercises the event path.
		t.Skip("rxe raises no Last WQE Reached event")
	}
	events := e.dev.Events()
	srq, err := e.pd.CreateSRQ(verbs.SRQAttr{MaxWR: 4, MaxSGE: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer srq.Close()
	cq := e.cq(t, 16, nil)
	qp := e.qp(t, verbs.QPTypeRC, cq, cq, srq)
	other := e.qp(t, verbs.QPTypeRC, cq, cq, nil)
	e.connect(t, qp, other.QPN())
	if err := qp.Modify(&verbs.QPAttr{State: verbs.QPStateErr}, verbs.QPAttrState); err != nil {
		t.Fatal(err)
	}
	waitEvent(t, events, verbs.EventQPLastWQEReached, func(ev verbs.AsyncEvent) bool { return ev.QP == qp })
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

// TestEventPumpsHoldNoThread: each open device has two event readers (completion channel
// and async events); they wait in the netpoller, so sixteen of them add no OS threads
// (readers blocked in read(2) would hold one each).
func TestEventPumpsHoldNoThread(t *testing.T) {
	e := setup(t)
	if e.dev.Info().Provider != ibverbs.ProviderName {
		t.Skip("a software device has no event descriptors")
	}
	threads := func() int {
		ents, err := os.ReadDir("/proc/self/task")
		if err != nil {
			t.Skip("no /proc/self/task")
		}
		return len(ents)
	}
	before := threads()
	for range 8 {
		d, err := verbs.Open(e.dev.Name())
		if err != nil {
			t.Fatal(err)
		}
		defer d.Close()
	}
	time.Sleep(200 * time.Millisecond)
	if after := threads(); after-before >= 8 {
		t.Fatalf("%d threads before opening 8 devices, %d after", before, after)
	}
}

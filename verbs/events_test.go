package verbs_test

import (
	"errors"
	"testing"
	"time"

	"github.com/goverbs/goverbs/verbs"
)

// nextEvent waits for the next event of type want, skipping others.
func nextEvent(t *testing.T, evs <-chan verbs.AsyncEvent, want verbs.EventType) verbs.AsyncEvent {
	t.Helper()
	timeout := time.After(5 * time.Second)
	for {
		select {
		case ev := <-evs:
			if ev.Type == want {
				return ev
			}
		case <-timeout:
			t.Fatalf("no %v event", want)
		}
	}
}

func TestAsyncEvents(t *testing.T) {
	a, b := newHost(t), newHost(t)
	evA, evB := a.Dev.Events(), b.Dev.Events()
	if ev := nextEvent(t, evA, verbs.EventPortActive); ev.Port != 1 {
		t.Fatalf("port active event %+v", ev)
	}
	// Communication established: the first packet reaching a QP in RTR.
	qa := a.QP(t, verbs.QPTypeRC)
	srq, _ := b.PD.CreateSRQ(verbs.SRQAttr{MaxWR: 8, MaxSGE: 1})
	qb, err := b.PD.CreateQP(verbs.QPInitAttr{Type: verbs.QPTypeRC, SendCQ: b.CQ, RecvCQ: b.RCQ, SRQ: srq, Cap: verbs.QPCap{MaxSendWR: 4, MaxSendSGE: 1}})
	if err != nil {
		t.Fatal(err)
	}
	connect(t, qa, defaultRC(), b.GID, qb.QPN(), 1, 2)
	p := defaultRC()
	if err := qb.Modify(&verbs.QPAttr{State: verbs.QPStateInit, Port: 1, AccessFlags: p.Access}, verbs.QPAttrState|verbs.QPAttrPKeyIndex|verbs.QPAttrPort|verbs.QPAttrAccessFlags); err != nil {
		t.Fatal(err)
	}
	if err := qb.Modify(&verbs.QPAttr{State: verbs.QPStateRTR, PathMTU: verbs.MTU1024, DestQPN: qa.QPN(), RQPSN: 2, MaxDestRdAtomic: 1, MinRNRTimer: 1,
		AH: verbs.AHAttr{DGID: a.GID, Port: 1}}, verbs.QPAttrState|verbs.QPAttrAV|verbs.QPAttrPathMTU|verbs.QPAttrDestQPN|verbs.QPAttrRQPSN|verbs.QPAttrMaxDestRdAtomic|verbs.QPAttrMinRNRTimer); err != nil {
		t.Fatal(err)
	}
	src, dst := a.MR(t, 64, allAccess), b.MR(t, 64, allAccess)
	srq.PostRecv(verbs.RecvWR{ID: 1, SGL: []verbs.SGE{dst.SGE(0, 64)}})
	qa.PostSend(verbs.SendWR{ID: 1, Opcode: verbs.WRSend, Flags: verbs.SendSignaled, SGL: []verbs.SGE{src.SGE(0, 8)}})
	if ev := nextEvent(t, evB, verbs.EventCommEst); ev.QP != qb {
		t.Fatalf("communication established for %+v", ev.QP)
	}
	expectStatus(t, a.CQ, 1, verbs.WCSuccess)
	// Last WQE reached: an SRQ-attached QP going to the error state.
	if err := qb.Modify(&verbs.QPAttr{State: verbs.QPStateErr}, verbs.QPAttrState); err != nil {
		t.Fatal(err)
	}
	if ev := nextEvent(t, evB, verbs.EventQPLastWQEReached); ev.QP != qb {
		t.Fatalf("last WQE reached for %+v", ev.QP)
	}
	// QP access error on the responder of a bad WRITE.
	pr := newPair(t, a, b, verbs.QPTypeRC, defaultRC())
	pr.QA.PostSend(verbs.SendWR{ID: 2, Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled, SGL: []verbs.SGE{src.SGE(0, 8)}, RemoteAddr: dst.Addr(), RKey: 0x1234500})
	expectStatus(t, a.CQ, 2, verbs.WCRemAccessErr)
	if ev := nextEvent(t, evB, verbs.EventQPAccessErr); ev.QP != pr.QB {
		t.Fatalf("access error event for %+v", ev.QP)
	}
	// CQ error on overrun.
	small, _ := b.Dev.CreateCQ(1, nil)
	qs, _ := b.PD.CreateQP(verbs.QPInitAttr{Type: verbs.QPTypeRC, SendCQ: small, RecvCQ: small, Cap: verbs.QPCap{MaxSendWR: 4, MaxRecvWR: 4}})
	qs.Modify(&verbs.QPAttr{State: verbs.QPStateInit, Port: 1}, verbs.QPAttrState|verbs.QPAttrPKeyIndex|verbs.QPAttrPort|verbs.QPAttrAccessFlags)
	qs.PostRecv(verbs.RecvWR{ID: 1}, verbs.RecvWR{ID: 2}, verbs.RecvWR{ID: 3})
	qs.Modify(&verbs.QPAttr{State: verbs.QPStateErr}, verbs.QPAttrState) // three flushes into a one-entry CQ
	if ev := nextEvent(t, evB, verbs.EventCQErr); ev.CQ != small {
		t.Fatalf("CQ error event for %+v", ev.CQ)
	}
}

func TestResourceLimits(t *testing.T) {
	a := newHost(t)
	attr := a.Dev.Query()
	cases := []struct {
		name string
		cap  verbs.QPCap
	}{
		{"send WRs", verbs.QPCap{MaxSendWR: uint32(attr.MaxQPWR) + 1}},
		{"recv WRs", verbs.QPCap{MaxRecvWR: uint32(attr.MaxQPWR) + 1}},
		{"SGEs", verbs.QPCap{MaxSendSGE: uint32(attr.MaxSGE) + 1}},
		{"inline", verbs.QPCap{MaxInline: uint32(attr.MaxInlineData) + 1}},
	}
	for _, c := range cases {
		if _, err := a.PD.CreateQP(verbs.QPInitAttr{Type: verbs.QPTypeRC, SendCQ: a.CQ, RecvCQ: a.CQ, Cap: c.cap}); err == nil {
			t.Errorf("QP with too many %s was created", c.name)
		}
	}
	if _, err := a.Dev.CreateCQ(attr.MaxCQE+1, nil); err == nil {
		t.Error("CQ deeper than max_cqe was created")
	}
	qp, _ := a.PD.CreateQP(verbs.QPInitAttr{Type: verbs.QPTypeRC, SendCQ: a.CQ, RecvCQ: a.CQ, Cap: verbs.QPCap{MaxSendWR: 2, MaxRecvWR: 2, MaxSendSGE: 1, MaxRecvSGE: 1, MaxInline: 16}})
	connect(t, qp, defaultRC(), a.GID, 0x999, 1, 1) // a peer that never answers: WRs stay queued
	mr := a.MR(t, 64, allAccess)
	var pe *verbs.PostError
	err := qp.PostSend(verbs.SendWR{ID: 1, Opcode: verbs.WRSend, SGL: []verbs.SGE{mr.SGE(0, 1)}}, verbs.SendWR{ID: 2, Opcode: verbs.WRSend, SGL: []verbs.SGE{mr.SGE(0, 1)}},
		verbs.SendWR{ID: 3, Opcode: verbs.WRSend, SGL: []verbs.SGE{mr.SGE(0, 1)}})
	if !errors.As(err, &pe) || pe.Index != 2 {
		t.Fatalf("posting three WRs to a two-entry send queue: %v", err)
	}
	if err := qp.PostRecv(verbs.RecvWR{ID: 1, SGL: []verbs.SGE{mr.SGE(0, 1), mr.SGE(1, 1)}}); !errors.As(err, &pe) {
		t.Fatalf("two SGEs on a one-SGE receive queue: %v", err)
	}
	qp2, _ := a.PD.CreateQP(verbs.QPInitAttr{Type: verbs.QPTypeRC, SendCQ: a.CQ, RecvCQ: a.CQ, Cap: verbs.QPCap{MaxSendWR: 2, MaxSendSGE: 1, MaxInline: 16}})
	connect(t, qp2, defaultRC(), a.GID, 0x999, 1, 1)
	if err := qp2.PostSend(verbs.SendWR{ID: 1, Opcode: verbs.WRSend, Flags: verbs.SendInline, SGL: []verbs.SGE{mr.SGE(0, 17)}}); !errors.As(err, &pe) {
		t.Fatalf("17 bytes inline on a 16-byte QP: %v", err)
	}
	// Resizing a CQ keeps its completions.
	cq, _ := a.Dev.CreateCQ(4, nil)
	q3, _ := a.PD.CreateQP(verbs.QPInitAttr{Type: verbs.QPTypeRC, SendCQ: cq, RecvCQ: cq, Cap: verbs.QPCap{MaxRecvWR: 4}})
	q3.Modify(&verbs.QPAttr{State: verbs.QPStateInit, Port: 1}, verbs.QPAttrState|verbs.QPAttrPKeyIndex|verbs.QPAttrPort|verbs.QPAttrAccessFlags)
	q3.PostRecv(verbs.RecvWR{ID: 7}, verbs.RecvWR{ID: 8})
	q3.Modify(&verbs.QPAttr{State: verbs.QPStateErr}, verbs.QPAttrState)
	if err := cq.Resize(1); err == nil {
		t.Fatal("resized a CQ below the completions it holds")
	}
	if err := cq.Resize(64); err != nil || cq.Depth() != 64 {
		t.Fatalf("resize to 64: %v, depth %d", err, cq.Depth())
	}
	wcs := waitWC(t, cq, 2, time.Second)
	if wcs[0].ID != 7 || wcs[1].ID != 8 || wcs[0].Status != verbs.WCWRFlushErr {
		t.Fatalf("completions after resize: %+v", wcs)
	}
}

// TestNoEventForClosedQP: an event the provider raised about a QP the program has closed
// meanwhile is not delivered (it would name no QP: the C library passed that on as a NULL
// element, which UCX's async thread dereferenced when it tore its QPs down), while the
// same event about an open QP names it.
func TestNoEventForClosedQP(t *testing.T) {
	h := newHost(t)
	qp := h.QP(t, verbs.QPTypeRC)
	if ev, ok := verbs.MapQPEvent(h.Dev, qp, verbs.EventQPLastWQEReached); !ok || ev.QP != qp {
		t.Fatalf("an open QP's event: %+v, delivered %v", ev, ok)
	}
	if err := qp.Close(); err != nil {
		t.Fatal(err)
	}
	if ev, ok := verbs.MapQPEvent(h.Dev, qp, verbs.EventQPLastWQEReached); ok {
		t.Fatalf("an event about a closed QP is delivered: %+v", ev)
	}
}

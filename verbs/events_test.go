package verbs

import (
	"errors"
	"testing"
	"time"
)

// nextEvent waits for the next event of type want, skipping others.
func nextEvent(t *testing.T, evs <-chan AsyncEvent, want EventType) AsyncEvent {
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
	evA, evB := a.dev.Events(), b.dev.Events()
	if ev := nextEvent(t, evA, EventPortActive); ev.Port != 1 {
		t.Fatalf("port active event %+v", ev)
	}
	// Communication established: the first packet reaching a QP in RTR.
	qa := a.qp(t, QPTypeRC)
	srq, _ := b.pd.CreateSRQ(SRQAttr{MaxWR: 8, MaxSGE: 1})
	qb, err := b.pd.CreateQP(QPInitAttr{Type: QPTypeRC, SendCQ: b.cq, RecvCQ: b.rcq, SRQ: srq, Cap: QPCap{MaxSendWR: 4, MaxSendSGE: 1}})
	if err != nil {
		t.Fatal(err)
	}
	connect(t, qa, defaultRC(), b.gid, qb.QPN(), 1, 2)
	p := defaultRC()
	if err := qb.Modify(&QPAttr{State: QPStateInit, Port: 1, AccessFlags: p.access}, QPAttrState|QPAttrPKeyIndex|QPAttrPort|QPAttrAccessFlags); err != nil {
		t.Fatal(err)
	}
	if err := qb.Modify(&QPAttr{State: QPStateRTR, PathMTU: MTU1024, DestQPN: qa.QPN(), RQPSN: 2, MaxDestRdAtomic: 1, MinRNRTimer: 1,
		AH: AHAttr{DGID: a.gid, Port: 1}}, QPAttrState|QPAttrAV|QPAttrPathMTU|QPAttrDestQPN|QPAttrRQPSN|QPAttrMaxDestRdAtomic|QPAttrMinRNRTimer); err != nil {
		t.Fatal(err)
	}
	src, dst := a.mr(t, 64, allAccess), b.mr(t, 64, allAccess)
	srq.PostRecv(RecvWR{ID: 1, SGL: []SGE{dst.SGE(0, 64)}})
	qa.PostSend(SendWR{ID: 1, Opcode: WRSend, Flags: SendSignaled, SGL: []SGE{src.SGE(0, 8)}})
	if ev := nextEvent(t, evB, EventCommEst); ev.QP != qb {
		t.Fatalf("communication established for %+v", ev.QP)
	}
	expectStatus(t, a.cq, 1, WCSuccess)
	// Last WQE reached: an SRQ-attached QP going to the error state.
	if err := qb.Modify(&QPAttr{State: QPStateErr}, QPAttrState); err != nil {
		t.Fatal(err)
	}
	if ev := nextEvent(t, evB, EventQPLastWQEReached); ev.QP != qb {
		t.Fatalf("last WQE reached for %+v", ev.QP)
	}
	// QP access error on the responder of a bad WRITE.
	pr := newPair(t, a, b, QPTypeRC, defaultRC())
	pr.qa.PostSend(SendWR{ID: 2, Opcode: WRRDMAWrite, Flags: SendSignaled, SGL: []SGE{src.SGE(0, 8)}, RemoteAddr: dst.Addr(), RKey: 0x1234500})
	expectStatus(t, a.cq, 2, WCRemAccessErr)
	if ev := nextEvent(t, evB, EventQPAccessErr); ev.QP != pr.qb {
		t.Fatalf("access error event for %+v", ev.QP)
	}
	// CQ error on overrun.
	small, _ := b.dev.CreateCQ(1, nil)
	qs, _ := b.pd.CreateQP(QPInitAttr{Type: QPTypeRC, SendCQ: small, RecvCQ: small, Cap: QPCap{MaxSendWR: 4, MaxRecvWR: 4}})
	qs.Modify(&QPAttr{State: QPStateInit, Port: 1}, QPAttrState|QPAttrPKeyIndex|QPAttrPort|QPAttrAccessFlags)
	qs.PostRecv(RecvWR{ID: 1}, RecvWR{ID: 2}, RecvWR{ID: 3})
	qs.Modify(&QPAttr{State: QPStateErr}, QPAttrState) // three flushes into a one-entry CQ
	if ev := nextEvent(t, evB, EventCQErr); ev.CQ != small {
		t.Fatalf("CQ error event for %+v", ev.CQ)
	}
}

func TestResourceLimits(t *testing.T) {
	a := newHost(t)
	attr := a.dev.Query()
	cases := []struct {
		name string
		cap  QPCap
	}{
		{"send WRs", QPCap{MaxSendWR: uint32(attr.MaxQPWR) + 1}},
		{"recv WRs", QPCap{MaxRecvWR: uint32(attr.MaxQPWR) + 1}},
		{"SGEs", QPCap{MaxSendSGE: uint32(attr.MaxSGE) + 1}},
		{"inline", QPCap{MaxInline: uint32(attr.MaxInlineData) + 1}},
	}
	for _, c := range cases {
		if _, err := a.pd.CreateQP(QPInitAttr{Type: QPTypeRC, SendCQ: a.cq, RecvCQ: a.cq, Cap: c.cap}); err == nil {
			t.Errorf("QP with too many %s was created", c.name)
		}
	}
	if _, err := a.dev.CreateCQ(attr.MaxCQE+1, nil); err == nil {
		t.Error("CQ deeper than max_cqe was created")
	}
	qp, _ := a.pd.CreateQP(QPInitAttr{Type: QPTypeRC, SendCQ: a.cq, RecvCQ: a.cq, Cap: QPCap{MaxSendWR: 2, MaxRecvWR: 2, MaxSendSGE: 1, MaxRecvSGE: 1, MaxInline: 16}})
	connect(t, qp, defaultRC(), a.gid, 0x999, 1, 1) // a peer that never answers: WRs stay queued
	mr := a.mr(t, 64, allAccess)
	var pe *PostError
	err := qp.PostSend(SendWR{ID: 1, Opcode: WRSend, SGL: []SGE{mr.SGE(0, 1)}}, SendWR{ID: 2, Opcode: WRSend, SGL: []SGE{mr.SGE(0, 1)}},
		SendWR{ID: 3, Opcode: WRSend, SGL: []SGE{mr.SGE(0, 1)}})
	if !errors.As(err, &pe) || pe.Index != 2 {
		t.Fatalf("posting three WRs to a two-entry send queue: %v", err)
	}
	if err := qp.PostRecv(RecvWR{ID: 1, SGL: []SGE{mr.SGE(0, 1), mr.SGE(1, 1)}}); !errors.As(err, &pe) {
		t.Fatalf("two SGEs on a one-SGE receive queue: %v", err)
	}
	qp2, _ := a.pd.CreateQP(QPInitAttr{Type: QPTypeRC, SendCQ: a.cq, RecvCQ: a.cq, Cap: QPCap{MaxSendWR: 2, MaxSendSGE: 1, MaxInline: 16}})
	connect(t, qp2, defaultRC(), a.gid, 0x999, 1, 1)
	if err := qp2.PostSend(SendWR{ID: 1, Opcode: WRSend, Flags: SendInline, SGL: []SGE{mr.SGE(0, 17)}}); !errors.As(err, &pe) {
		t.Fatalf("17 bytes inline on a 16-byte QP: %v", err)
	}
	// Resizing a CQ keeps its completions.
	cq, _ := a.dev.CreateCQ(4, nil)
	q3, _ := a.pd.CreateQP(QPInitAttr{Type: QPTypeRC, SendCQ: cq, RecvCQ: cq, Cap: QPCap{MaxRecvWR: 4}})
	q3.Modify(&QPAttr{State: QPStateInit, Port: 1}, QPAttrState|QPAttrPKeyIndex|QPAttrPort|QPAttrAccessFlags)
	q3.PostRecv(RecvWR{ID: 7}, RecvWR{ID: 8})
	q3.Modify(&QPAttr{State: QPStateErr}, QPAttrState)
	if err := cq.Resize(1); err == nil {
		t.Fatal("resized a CQ below the completions it holds")
	}
	if err := cq.Resize(64); err != nil || cq.Depth() != 64 {
		t.Fatalf("resize to 64: %v, depth %d", err, cq.Depth())
	}
	wcs := waitWC(t, cq, 2, time.Second)
	if wcs[0].ID != 7 || wcs[1].ID != 8 || wcs[0].Status != WCWRFlushErr {
		t.Fatalf("completions after resize: %+v", wcs)
	}
}

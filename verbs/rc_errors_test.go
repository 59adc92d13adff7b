package verbs

import (
	"errors"
	"testing"
	"time"
)

// Each RC error case of IBTA ch. 9/10 as a user sees it: the requester's completion
// status, the responder's (when a receive WQE is involved), and the QP states after.

func waitState(t *testing.T, qp *QP, want QPState) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for qp.State() != want {
		if time.Now().After(deadline) {
			t.Fatalf("QP %#x in %v, want %v", qp.QPN(), qp.State(), want)
		}
		time.Sleep(100 * time.Microsecond)
	}
}

func expectStatus(t *testing.T, cq *CQ, id uint64, want WCStatus) WC {
	t.Helper()
	wc := waitWC(t, cq, 1, 5*time.Second)[0]
	if wc.ID != id || wc.Status != want {
		t.Fatalf("completion %+v (%v), want wr %d with %v", wc, wc.Status, id, want)
	}
	return wc
}

func TestRCErrors(t *testing.T) {
	type setup struct {
		p        *pair
		src, dst *MR
	}
	cases := []struct {
		name      string
		params    func(*rcParams)
		run       func(t *testing.T, s setup)
		reqStatus WCStatus
		respState QPState
	}{
		{
			name: "write with a wrong rkey is a remote access error",
			run: func(t *testing.T, s setup) {
				s.p.qa.PostSend(SendWR{ID: 1, Opcode: WRRDMAWrite, Flags: SendSignaled, SGL: []SGE{s.src.SGE(0, 8)},
					RemoteAddr: s.dst.Addr(), RKey: s.dst.RKey() ^ 0x100})
			},
			reqStatus: WCRemAccessErr, respState: QPStateErr,
		},
		{
			name: "write past the end of the region is a remote access error",
			run: func(t *testing.T, s setup) {
				s.p.qa.PostSend(SendWR{ID: 1, Opcode: WRRDMAWrite, Flags: SendSignaled, SGL: []SGE{s.src.SGE(0, 64)},
					RemoteAddr: s.dst.AddrOf(s.dst.Len() - 32), RKey: s.dst.RKey()})
			},
			reqStatus: WCRemAccessErr, respState: QPStateErr,
		},
		{
			name: "read from a region without remote read is a remote access error",
			run: func(t *testing.T, s setup) {
				mr := s.p.b.mr(t, 64, AccessLocalWrite|AccessRemoteWrite)
				s.p.qa.PostSend(SendWR{ID: 1, Opcode: WRRDMARead, Flags: SendSignaled, SGL: []SGE{s.src.SGE(0, 8)},
					RemoteAddr: mr.Addr(), RKey: mr.RKey()})
			},
			reqStatus: WCRemAccessErr, respState: QPStateErr,
		},
		{
			name: "write to a deregistered region is a remote access error",
			run: func(t *testing.T, s setup) {
				s.dst.Close()
				s.p.qa.PostSend(SendWR{ID: 1, Opcode: WRRDMAWrite, Flags: SendSignaled, SGL: []SGE{s.src.SGE(0, 8)},
					RemoteAddr: s.dst.Addr(), RKey: s.dst.RKey()})
			},
			reqStatus: WCRemAccessErr, respState: QPStateErr,
		},
		{
			name:   "write to a QP without remote write access is an invalid request",
			params: func(p *rcParams) { p.access = AccessLocalWrite | AccessRemoteRead },
			run: func(t *testing.T, s setup) {
				s.p.qa.PostSend(SendWR{ID: 1, Opcode: WRRDMAWrite, Flags: SendSignaled, SGL: []SGE{s.src.SGE(0, 8)},
					RemoteAddr: s.dst.Addr(), RKey: s.dst.RKey()})
			},
			reqStatus: WCRemInvReqErr, respState: QPStateErr,
		},
		{
			name: "misaligned atomic is an invalid request",
			run: func(t *testing.T, s setup) {
				s.p.qa.PostSend(SendWR{ID: 1, Opcode: WRAtomicFetchAdd, Flags: SendSignaled, SGL: []SGE{s.src.SGE(0, 8)},
					RemoteAddr: s.dst.AddrOf(4), RKey: s.dst.RKey(), CompareAdd: 1})
			},
			reqStatus: WCRemInvReqErr, respState: QPStateErr,
		},
		{
			name: "send larger than the receive buffer: invalid request, receiver gets local length error",
			run: func(t *testing.T, s setup) {
				s.p.qb.PostRecv(RecvWR{ID: 9, SGL: []SGE{s.dst.SGE(0, 16)}})
				s.p.qa.PostSend(SendWR{ID: 1, Opcode: WRSend, Flags: SendSignaled, SGL: []SGE{s.src.SGE(0, 64)}})
				expectStatus(t, s.p.b.rcq, 9, WCLocLenErr)
			},
			reqStatus: WCRemInvReqErr, respState: QPStateErr,
		},
		{
			name: "receive buffer with a bad lkey: remote operational error, receiver gets local protection error",
			run: func(t *testing.T, s setup) {
				sge := s.dst.SGE(0, 64)
				sge.LKey ^= 0x100
				s.p.qb.PostRecv(RecvWR{ID: 9, SGL: []SGE{sge}})
				s.p.qa.PostSend(SendWR{ID: 1, Opcode: WRSend, Flags: SendSignaled, SGL: []SGE{s.src.SGE(0, 8)}})
				expectStatus(t, s.p.b.rcq, 9, WCLocProtErr)
			},
			reqStatus: WCRemOpErr, respState: QPStateErr,
		},
		{
			name:   "no receive posted and rnr_retry 0: RNR retry exceeded",
			params: func(p *rcParams) { p.rnr = 0 },
			run: func(t *testing.T, s setup) {
				s.p.qa.PostSend(SendWR{ID: 1, Opcode: WRSend, Flags: SendSignaled, SGL: []SGE{s.src.SGE(0, 8)}})
			},
			reqStatus: WCRNRRetryExcErr, respState: QPStateRTS,
		},
		{
			name:   "peer QP gone: transport retry exceeded",
			params: func(p *rcParams) { p.timeout, p.retry = 8, 2 },
			run: func(t *testing.T, s setup) {
				s.p.qb.Close()
				s.p.qa.PostSend(SendWR{ID: 1, Opcode: WRSend, Flags: SendSignaled, SGL: []SGE{s.src.SGE(0, 8)}})
			},
			reqStatus: WCRetryExcErr, respState: QPStateErr, // closed QPs report ERR
		},
		{
			name: "local SGE with a bad lkey: local protection error",
			run: func(t *testing.T, s setup) {
				sge := s.src.SGE(0, 8)
				sge.LKey ^= 0x100
				s.p.qa.PostSend(SendWR{ID: 1, Opcode: WRRDMAWrite, Flags: SendSignaled, SGL: []SGE{sge},
					RemoteAddr: s.dst.Addr(), RKey: s.dst.RKey()})
			},
			reqStatus: WCLocProtErr, respState: QPStateRTS,
		},
		{
			name: "atomic with a 4-byte local buffer: local length error",
			run: func(t *testing.T, s setup) {
				s.p.qa.PostSend(SendWR{ID: 1, Opcode: WRAtomicFetchAdd, Flags: SendSignaled, SGL: []SGE{s.src.SGE(0, 4)},
					RemoteAddr: s.dst.Addr(), RKey: s.dst.RKey(), CompareAdd: 1})
			},
			reqStatus: WCLocLenErr, respState: QPStateRTS,
		},
	}
	a, b := newHost(t), newHost(t)
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p := defaultRC()
			if c.params != nil {
				c.params(&p)
			}
			s := setup{p: newPair(t, a, b, QPTypeRC, p), src: a.mr(t, 4096, allAccess), dst: b.mr(t, 4096, allAccess)}
			defer s.p.qa.Close()
			defer s.p.qb.Close()
			c.run(t, s)
			// A receive queued behind the failing message must be flushed when the
			// responder errs (posted now, it is either flushed with the queue or, if the
			// QP is already in ERR, at once).
			spare := b.mr(t, 64, allAccess)
			hasSpare := c.respState == QPStateErr && c.reqStatus != WCRetryExcErr
			if hasSpare {
				s.p.qb.PostRecv(RecvWR{ID: 77, SGL: []SGE{spare.SGE(0, 64)}})
			}
			// Work posted behind the failing request must be flushed on the requester.
			s.p.qa.PostSend(SendWR{ID: 2, Opcode: WRSend, Flags: SendSignaled, SGL: []SGE{s.src.SGE(0, 8)}})
			start := time.Now()
			expectStatus(t, a.cq, 1, c.reqStatus)
			if c.reqStatus == WCRetryExcErr {
				// 4.096 µs × 2^8 ≈ 1 ms per try, 3 tries.
				if el := time.Since(start); el > 2*time.Second {
					t.Errorf("retry exceeded after %v", el)
				}
			}
			expectStatus(t, a.cq, 2, WCWRFlushErr)
			waitState(t, s.p.qa, QPStateErr)
			waitState(t, s.p.qb, c.respState)
			if hasSpare {
				expectStatus(t, b.rcq, 77, WCWRFlushErr)
			}
			// Posting to a QP in the error state completes at once with a flush error.
			if err := s.p.qa.PostSend(SendWR{ID: 3, Opcode: WRSend, Flags: SendSignaled}); err != nil {
				t.Fatal(err)
			}
			expectStatus(t, a.cq, 3, WCWRFlushErr)
		})
	}
}

func TestRNRRecoversWhenReceiveIsPostedLate(t *testing.T) {
	a, b := newHost(t), newHost(t)
	p := newPair(t, a, b, QPTypeRC, defaultRC())
	src, dst := a.mr(t, 64, allAccess), b.mr(t, 64, allAccess)
	copy(src.Buf(), "late receive")
	if err := p.qa.PostSend(SendWR{ID: 1, Opcode: WRSend, Flags: SendSignaled, SGL: []SGE{src.SGE(0, 12)}}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(30 * time.Millisecond)
	if err := p.qb.PostRecv(RecvWR{ID: 5, SGL: []SGE{dst.SGE(0, 64)}}); err != nil {
		t.Fatal(err)
	}
	expectStatus(t, a.cq, 1, WCSuccess)
	wc := expectStatus(t, b.rcq, 5, WCSuccess)
	if string(dst.Buf()[:wc.ByteLen]) != "late receive" {
		t.Fatalf("received %q", dst.Buf()[:wc.ByteLen])
	}
	if n := p.qb.Counters().RNRNakSent; n == 0 {
		t.Fatal("no RNR NAK was sent")
	}
}

func TestModifyChecksTransitions(t *testing.T) {
	a := newHost(t)
	qp := a.qp(t, QPTypeRC)
	// RESET -> RTR skips INIT.
	err := qp.Modify(&QPAttr{State: QPStateRTR}, QPAttrState)
	if !errors.Is(err, ErrInvalidState) {
		t.Fatalf("RESET->RTR: %v", err)
	}
	// RESET -> INIT without ACCESS_FLAGS.
	err = qp.Modify(&QPAttr{State: QPStateInit, Port: 1}, QPAttrState|QPAttrPort|QPAttrPKeyIndex)
	if !errors.Is(err, ErrMissingAttr) {
		t.Fatalf("INIT without access flags: %v", err)
	}
	// RESET -> INIT with a Q_Key, which RC does not take.
	err = qp.Modify(&QPAttr{State: QPStateInit, Port: 1}, QPAttrState|QPAttrPort|QPAttrPKeyIndex|QPAttrAccessFlags|QPAttrQKey)
	if !errors.Is(err, ErrExtraAttr) {
		t.Fatalf("INIT with a Q_Key: %v", err)
	}
	if err := qp.Modify(&QPAttr{State: QPStateInit, Port: 1}, QPAttrState|QPAttrPort|QPAttrPKeyIndex|QPAttrAccessFlags); err != nil {
		t.Fatal(err)
	}
	// INIT -> RTR without the RC-required MIN_RNR_TIMER.
	err = qp.Modify(&QPAttr{State: QPStateRTR, PathMTU: MTU1024, AH: AHAttr{DGID: a.gid}},
		QPAttrState|QPAttrAV|QPAttrPathMTU|QPAttrDestQPN|QPAttrRQPSN|QPAttrMaxDestRdAtomic)
	if !errors.Is(err, ErrMissingAttr) {
		t.Fatalf("RTR without MIN_RNR_TIMER: %v", err)
	}
	if qp.State() != QPStateInit {
		t.Fatalf("refused modify changed the state to %v", qp.State())
	}
	if err := qp.Modify(&QPAttr{State: QPStateErr}, QPAttrState); err != nil {
		t.Fatal(err)
	}
	if err := qp.Modify(&QPAttr{State: QPStateReset}, QPAttrState); err != nil {
		t.Fatal(err)
	}
}

package engine_test

import (
	"testing"
	"time"

	"github.com/goverbs/goverbs/verbs"
)

// Each RC error case of IBTA ch. 9/10 as a user sees it: the requester's completion
// status, the responder's (when a receive WQE is involved), and the QP states after.

func TestRCErrors(t *testing.T) {
	type setup struct {
		p        *pair
		src, dst *verbs.MR
	}
	cases := []struct {
		name      string
		params    func(*rcParams)
		run       func(t *testing.T, s setup)
		reqStatus verbs.WCStatus
		respState verbs.QPState
	}{
		{
			name: "write with a wrong rkey is a remote access error",
			run: func(t *testing.T, s setup) {
				s.p.QA.PostSend(verbs.SendWR{ID: 1, Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled, SGL: []verbs.SGE{s.src.SGE(0, 8)},
					RemoteAddr: s.dst.Addr(), RKey: s.dst.RKey() ^ 0x100})
			},
			reqStatus: verbs.WCRemAccessErr, respState: verbs.QPStateErr,
		},
		{
			name: "write past the end of the region is a remote access error",
			run: func(t *testing.T, s setup) {
				s.p.QA.PostSend(verbs.SendWR{ID: 1, Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled, SGL: []verbs.SGE{s.src.SGE(0, 64)},
					RemoteAddr: s.dst.AddrOf(s.dst.Len() - 32), RKey: s.dst.RKey()})
			},
			reqStatus: verbs.WCRemAccessErr, respState: verbs.QPStateErr,
		},
		{
			name: "read from a region without remote read is a remote access error",
			run: func(t *testing.T, s setup) {
				mr := s.p.B.MR(t, 64, verbs.AccessLocalWrite|verbs.AccessRemoteWrite)
				s.p.QA.PostSend(verbs.SendWR{ID: 1, Opcode: verbs.WRRDMARead, Flags: verbs.SendSignaled, SGL: []verbs.SGE{s.src.SGE(0, 8)},
					RemoteAddr: mr.Addr(), RKey: mr.RKey()})
			},
			reqStatus: verbs.WCRemAccessErr, respState: verbs.QPStateErr,
		},
		{
			name: "write to a deregistered region is a remote access error",
			run: func(t *testing.T, s setup) {
				s.dst.Close()
				s.p.QA.PostSend(verbs.SendWR{ID: 1, Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled, SGL: []verbs.SGE{s.src.SGE(0, 8)},
					RemoteAddr: s.dst.Addr(), RKey: s.dst.RKey()})
			},
			reqStatus: verbs.WCRemAccessErr, respState: verbs.QPStateErr,
		},
		{
			name:   "write to a QP without remote write access is an invalid request",
			params: func(p *rcParams) { p.Access = verbs.AccessLocalWrite | verbs.AccessRemoteRead },
			run: func(t *testing.T, s setup) {
				s.p.QA.PostSend(verbs.SendWR{ID: 1, Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled, SGL: []verbs.SGE{s.src.SGE(0, 8)},
					RemoteAddr: s.dst.Addr(), RKey: s.dst.RKey()})
			},
			reqStatus: verbs.WCRemInvReqErr, respState: verbs.QPStateErr,
		},
		{
			name: "misaligned atomic is an invalid request",
			run: func(t *testing.T, s setup) {
				s.p.QA.PostSend(verbs.SendWR{ID: 1, Opcode: verbs.WRAtomicFetchAdd, Flags: verbs.SendSignaled, SGL: []verbs.SGE{s.src.SGE(0, 8)},
					RemoteAddr: s.dst.AddrOf(4), RKey: s.dst.RKey(), CompareAdd: 1})
			},
			reqStatus: verbs.WCRemInvReqErr, respState: verbs.QPStateErr,
		},
		{
			name: "send larger than the receive buffer: invalid request, receiver gets local length error",
			run: func(t *testing.T, s setup) {
				s.p.QB.PostRecv(verbs.RecvWR{ID: 9, SGL: []verbs.SGE{s.dst.SGE(0, 16)}})
				s.p.QA.PostSend(verbs.SendWR{ID: 1, Opcode: verbs.WRSend, Flags: verbs.SendSignaled, SGL: []verbs.SGE{s.src.SGE(0, 64)}})
				expectStatus(t, s.p.B.RCQ, 9, verbs.WCLocLenErr)
			},
			reqStatus: verbs.WCRemInvReqErr, respState: verbs.QPStateErr,
		},
		{
			name: "receive buffer with a bad lkey: remote operational error, receiver gets local protection error",
			run: func(t *testing.T, s setup) {
				sge := s.dst.SGE(0, 64)
				sge.LKey ^= 0x100
				s.p.QB.PostRecv(verbs.RecvWR{ID: 9, SGL: []verbs.SGE{sge}})
				s.p.QA.PostSend(verbs.SendWR{ID: 1, Opcode: verbs.WRSend, Flags: verbs.SendSignaled, SGL: []verbs.SGE{s.src.SGE(0, 8)}})
				expectStatus(t, s.p.B.RCQ, 9, verbs.WCLocProtErr)
			},
			reqStatus: verbs.WCRemOpErr, respState: verbs.QPStateErr,
		},
		{
			name:   "no receive posted and rnr_retry 0: RNR retry exceeded",
			params: func(p *rcParams) { p.RNR = 0 },
			run: func(t *testing.T, s setup) {
				s.p.QA.PostSend(verbs.SendWR{ID: 1, Opcode: verbs.WRSend, Flags: verbs.SendSignaled, SGL: []verbs.SGE{s.src.SGE(0, 8)}})
			},
			reqStatus: verbs.WCRNRRetryExcErr, respState: verbs.QPStateRTS,
		},
		{
			name:   "peer QP gone: transport retry exceeded",
			params: func(p *rcParams) { p.Timeout, p.Retry = 8, 2 },
			run: func(t *testing.T, s setup) {
				s.p.QB.Close()
				s.p.QA.PostSend(verbs.SendWR{ID: 1, Opcode: verbs.WRSend, Flags: verbs.SendSignaled, SGL: []verbs.SGE{s.src.SGE(0, 8)}})
			},
			reqStatus: verbs.WCRetryExcErr, respState: verbs.QPStateErr, // closed QPs report ERR
		},
		{
			name: "local SGE with a bad lkey: local protection error",
			run: func(t *testing.T, s setup) {
				sge := s.src.SGE(0, 8)
				sge.LKey ^= 0x100
				s.p.QA.PostSend(verbs.SendWR{ID: 1, Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled, SGL: []verbs.SGE{sge},
					RemoteAddr: s.dst.Addr(), RKey: s.dst.RKey()})
			},
			reqStatus: verbs.WCLocProtErr, respState: verbs.QPStateRTS,
		},
		{
			name: "atomic with a 4-byte local buffer: local length error",
			run: func(t *testing.T, s setup) {
				s.p.QA.PostSend(verbs.SendWR{ID: 1, Opcode: verbs.WRAtomicFetchAdd, Flags: verbs.SendSignaled, SGL: []verbs.SGE{s.src.SGE(0, 4)},
					RemoteAddr: s.dst.Addr(), RKey: s.dst.RKey(), CompareAdd: 1})
			},
			reqStatus: verbs.WCLocLenErr, respState: verbs.QPStateRTS,
		},
	}
	a, b := newHost(t), newHost(t)
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p := defaultRC()
			if c.params != nil {
				c.params(&p)
			}
			s := setup{p: newPair(t, a, b, verbs.QPTypeRC, p), src: a.MR(t, 4096, allAccess), dst: b.MR(t, 4096, allAccess)}
			defer s.p.QA.Close()
			defer s.p.QB.Close()
			c.run(t, s)
			// A receive queued behind the failing message must be flushed when the
			// responder errs (posted now, it is either flushed with the queue or, if the
			// QP is already in ERR, at once).
			spare := b.MR(t, 64, allAccess)
			hasSpare := c.respState == verbs.QPStateErr && c.reqStatus != verbs.WCRetryExcErr
			if hasSpare {
				s.p.QB.PostRecv(verbs.RecvWR{ID: 77, SGL: []verbs.SGE{spare.SGE(0, 64)}})
			}
			// Work posted behind the failing request must be flushed on the requester.
			s.p.QA.PostSend(verbs.SendWR{ID: 2, Opcode: verbs.WRSend, Flags: verbs.SendSignaled, SGL: []verbs.SGE{s.src.SGE(0, 8)}})
			start := time.Now()
			expectStatus(t, a.CQ, 1, c.reqStatus)
			if c.reqStatus == verbs.WCRetryExcErr {
				// 4.096 µs × 2^8 ≈ 1 ms per try, 3 tries.
				if el := time.Since(start); el > 2*time.Second {
					t.Errorf("retry exceeded after %v", el)
				}
			}
			expectStatus(t, a.CQ, 2, verbs.WCWRFlushErr)
			waitState(t, s.p.QA, verbs.QPStateErr)
			waitState(t, s.p.QB, c.respState)
			if hasSpare {
				expectStatus(t, b.RCQ, 77, verbs.WCWRFlushErr)
			}
			// Posting to a QP in the error state completes at once with a flush error.
			if err := s.p.QA.PostSend(verbs.SendWR{ID: 3, Opcode: verbs.WRSend, Flags: verbs.SendSignaled}); err != nil {
				t.Fatal(err)
			}
			expectStatus(t, a.CQ, 3, verbs.WCWRFlushErr)
		})
	}
}

func TestRNRRecoversWhenReceiveIsPostedLate(t *testing.T) {
	a, b := newHost(t), newHost(t)
	p := newPair(t, a, b, verbs.QPTypeRC, defaultRC())
	src, dst := a.MR(t, 64, allAccess), b.MR(t, 64, allAccess)
	copy(src.Buf(), "late receive")
	if err := p.QA.PostSend(verbs.SendWR{ID: 1, Opcode: verbs.WRSend, Flags: verbs.SendSignaled, SGL: []verbs.SGE{src.SGE(0, 12)}}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(30 * time.Millisecond)
	if err := p.QB.PostRecv(verbs.RecvWR{ID: 5, SGL: []verbs.SGE{dst.SGE(0, 64)}}); err != nil {
		t.Fatal(err)
	}
	expectStatus(t, a.CQ, 1, verbs.WCSuccess)
	wc := expectStatus(t, b.RCQ, 5, verbs.WCSuccess)
	if string(dst.Buf()[:wc.ByteLen]) != "late receive" {
		t.Fatalf("received %q", dst.Buf()[:wc.ByteLen])
	}
	if n := p.QB.Counters().RNRNakSent; n == 0 {
		t.Fatal("no RNR NAK was sent")
	}
}

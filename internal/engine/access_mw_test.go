package engine_test

import (
	"testing"

	"github.com/goverbs/goverbs/verbs"
)

// The access matrix's memory-window rows: a window that no longer grants access — revoked
// by LOCAL_INV or by the peer's SEND_WITH_INV, deallocated, unbound, rebound under a new
// key, or reached beyond its bounds — refuses WRITE, READ and atomics with a remote access
// error, moves the responder's QP to the error state, and leaves the region and its guard
// zones untouched. Each case first shows the same request succeed through the window.
// (mw_test.go covers binding itself and READ after LOCAL_INV and SEND_WITH_INV.)

// mwSetup is one case's pair, region and window.
type mwSetup struct {
	a, b   *host
	p      *pair
	target *guarded
	mw     *verbs.MW
	rkey   uint32
}

func mwWrite(off, n int) func(s *mwSetup, l *verbs.MR) verbs.SendWR {
	return func(s *mwSetup, l *verbs.MR) verbs.SendWR {
		return verbs.SendWR{Opcode: verbs.WRRDMAWrite, SGL: []verbs.SGE{l.SGE(0, n)}, RemoteAddr: s.target.mr.AddrOf(off), RKey: s.rkey}
	}
}

func mwRead(off, n int) func(s *mwSetup, l *verbs.MR) verbs.SendWR {
	return func(s *mwSetup, l *verbs.MR) verbs.SendWR {
		return verbs.SendWR{Opcode: verbs.WRRDMARead, SGL: []verbs.SGE{l.SGE(0, n)}, RemoteAddr: s.target.mr.AddrOf(off), RKey: s.rkey}
	}
}

func mwAtomic(off int) func(s *mwSetup, l *verbs.MR) verbs.SendWR {
	return func(s *mwSetup, l *verbs.MR) verbs.SendWR {
		return verbs.SendWR{Opcode: verbs.WRAtomicFetchAdd, SGL: []verbs.SGE{l.SGE(0, 8)}, RemoteAddr: s.target.mr.AddrOf(off), RKey: s.rkey, CompareAdd: 3}
	}
}

func TestAccessInvalidatedWindow(t *testing.T) {
	type setup = mwSetup
	// Windows cover [1024, 3072) of a 4096-byte region.
	const winOff, winLen = 1024, 2048
	bind2 := func(t *testing.T, s *setup, id uint64) uint32 {
		t.Helper()
		rkey := verbs.IncRKey(s.mw.RKey())
		if err := s.p.QB.PostSend(verbs.SendWR{ID: id, Opcode: verbs.WRBindMW, Flags: verbs.SendSignaled, Bind: &verbs.MWBindWR{MW: s.mw, RKey: rkey,
			MWBind: verbs.MWBind{MR: s.target.mr, Addr: s.target.mr.AddrOf(winOff), Length: winLen, Access: verbs.AccessRemoteWrite | verbs.AccessRemoteRead | verbs.AccessRemoteAtomic}}}); err != nil {
			t.Fatal(err)
		}
		expectStatus(t, s.b.CQ, id, verbs.WCSuccess)
		return rkey
	}
	cases := []struct {
		name    string
		typ     verbs.MWType
		op      func(s *setup, local *verbs.MR) verbs.SendWR // the request through the window
		revoke  func(t *testing.T, s *setup)                 // what makes the window stop granting it
		control bool                                         // the request succeeds before revoke
	}{
		{name: "WRITE after LOCAL_INV", typ: verbs.MWType2, op: mwWrite(winOff, 64), control: true, revoke: func(t *testing.T, s *setup) {
			s.p.QB.PostSend(verbs.SendWR{ID: 50, Opcode: verbs.WRLocalInv, Flags: verbs.SendSignaled, Imm: s.rkey})
			expectStatus(t, s.b.CQ, 50, verbs.WCSuccess)
		}},
		{name: "atomic after LOCAL_INV", typ: verbs.MWType2, op: mwAtomic(winOff + 8), control: true, revoke: func(t *testing.T, s *setup) {
			s.p.QB.PostSend(verbs.SendWR{ID: 50, Opcode: verbs.WRLocalInv, Flags: verbs.SendSignaled, Imm: s.rkey})
			expectStatus(t, s.b.CQ, 50, verbs.WCSuccess)
		}},
		{name: "WRITE after the peer's SEND_WITH_INV", typ: verbs.MWType2, op: mwWrite(winOff+100, 500), control: true, revoke: func(t *testing.T, s *setup) {
			rbuf := s.b.MR(t, 64, allAccess)
			s.p.QB.PostRecv(verbs.RecvWR{ID: 51, SGL: []verbs.SGE{rbuf.SGE(0, 64)}})
			s.p.QA.PostSend(verbs.SendWR{ID: 52, Opcode: verbs.WRSendWithInv, Flags: verbs.SendSignaled, Imm: s.rkey})
			expectStatus(t, s.a.CQ, 52, verbs.WCSuccess)
			if wc := expectStatus(t, s.b.RCQ, 51, verbs.WCSuccess); wc.Flags&verbs.WCWithInv == 0 || wc.Imm != s.rkey {
				t.Fatalf("SEND_WITH_INV completion %+v", wc)
			}
		}},
		{name: "atomic after the peer's SEND_WITH_INV", typ: verbs.MWType2, op: mwAtomic(winOff), control: true, revoke: func(t *testing.T, s *setup) {
			rbuf := s.b.MR(t, 64, allAccess)
			s.p.QB.PostRecv(verbs.RecvWR{ID: 51, SGL: []verbs.SGE{rbuf.SGE(0, 64)}})
			s.p.QA.PostSend(verbs.SendWR{ID: 52, Opcode: verbs.WRSendWithInv, Flags: verbs.SendSignaled, Imm: s.rkey})
			expectStatus(t, s.a.CQ, 52, verbs.WCSuccess)
			expectStatus(t, s.b.RCQ, 51, verbs.WCSuccess)
		}},
		{name: "WRITE with the old key after a rebind", typ: verbs.MWType2, op: mwWrite(winOff, 64), control: true, revoke: func(t *testing.T, s *setup) {
			s.p.QB.PostSend(verbs.SendWR{ID: 50, Opcode: verbs.WRLocalInv, Flags: verbs.SendSignaled, Imm: s.rkey})
			expectStatus(t, s.b.CQ, 50, verbs.WCSuccess)
			if bind2(t, s, 53) == s.rkey {
				t.Fatal("rebinding kept the rkey")
			}
		}},
		{name: "WRITE after the window is deallocated", typ: verbs.MWType2, op: mwWrite(winOff, 64), control: true, revoke: func(t *testing.T, s *setup) {
			if err := s.mw.Close(); err != nil {
				t.Fatal(err)
			}
		}},
		{name: "READ through a type 1 window after it is unbound", typ: verbs.MWType1, op: mwRead(winOff, 64), control: true, revoke: func(t *testing.T, s *setup) {
			if _, err := s.p.QB.BindMW(s.mw, 54, verbs.SendSignaled, verbs.MWBind{MR: s.target.mr}); err != nil {
				t.Fatal(err)
			}
			expectStatus(t, s.b.CQ, 54, verbs.WCSuccess)
		}},
		{name: "WRITE through a type 1 window after it is deallocated", typ: verbs.MWType1, op: mwWrite(winOff, 64), control: true, revoke: func(t *testing.T, s *setup) {
			if err := s.mw.Close(); err != nil {
				t.Fatal(err)
			}
		}},
		{name: "atomic just past the window, inside the region", typ: verbs.MWType2, op: mwAtomic(winOff + winLen)},
		{name: "WRITE straddling the window's start", typ: verbs.MWType1, op: mwWrite(winOff-8, 64)},
		{name: "READ straddling the window's end", typ: verbs.MWType2, op: mwRead(winOff+winLen-32, 64)},
	}
	a, b := newHost(t), newHost(t)
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := &setup{a: a, b: b, p: newPair(t, a, b, verbs.QPTypeRC, defaultRC())}
			defer s.p.QA.Close()
			defer s.p.QB.Close()
			s.target = newGuarded(t, b.PD, 4096, allAccess|verbs.AccessMWBind, uint64(i)+300)
			local := newGuarded(t, a.PD, 4096, allAccess, uint64(i)+400)
			var err error
			if s.mw, err = b.PD.AllocMW(c.typ); err != nil {
				t.Fatal(err)
			}
			defer s.mw.Close()
			if c.typ == verbs.MWType1 {
				if s.rkey, err = s.p.QB.BindMW(s.mw, 1, verbs.SendSignaled, verbs.MWBind{MR: s.target.mr, Addr: s.target.mr.AddrOf(winOff),
					Length: winLen, Access: verbs.AccessRemoteWrite | verbs.AccessRemoteRead | verbs.AccessRemoteAtomic}); err != nil {
					t.Fatal(err)
				}
				expectStatus(t, b.CQ, 1, verbs.WCSuccess)
			} else {
				s.rkey = bind2(t, s, 1)
			}
			if c.control {
				wr := c.op(s, local.mr)
				wr.ID, wr.Flags = 10, verbs.SendSignaled
				s.p.QA.PostSend(wr)
				expectStatus(t, a.CQ, 10, verbs.WCSuccess)
				s.target.accept()
				local.accept()
				c.revoke(t, s)
			}
			before := b.Dev.Counters().Get("remote_access_err")
			wr := c.op(s, local.mr)
			wr.ID, wr.Flags = 11, verbs.SendSignaled
			s.p.QA.PostSend(wr)
			expectStatus(t, a.CQ, 11, verbs.WCRemAccessErr)
			waitState(t, s.p.QB, verbs.QPStateErr)
			waitCounter(t, b.Dev, "remote_access_err", before+1)
			s.target.unchanged(t, "region behind the window")
			local.unchanged(t, "requester's landing buffer")
		})
	}
}

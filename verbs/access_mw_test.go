package verbs

import (
	"testing"
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
	mw     *MW
	rkey   uint32
}

func mwWrite(off, n int) func(s *mwSetup, l *MR) SendWR {
	return func(s *mwSetup, l *MR) SendWR {
		return SendWR{Opcode: WRRDMAWrite, SGL: []SGE{l.SGE(0, n)}, RemoteAddr: s.target.mr.AddrOf(off), RKey: s.rkey}
	}
}

func mwRead(off, n int) func(s *mwSetup, l *MR) SendWR {
	return func(s *mwSetup, l *MR) SendWR {
		return SendWR{Opcode: WRRDMARead, SGL: []SGE{l.SGE(0, n)}, RemoteAddr: s.target.mr.AddrOf(off), RKey: s.rkey}
	}
}

func mwAtomic(off int) func(s *mwSetup, l *MR) SendWR {
	return func(s *mwSetup, l *MR) SendWR {
		return SendWR{Opcode: WRAtomicFetchAdd, SGL: []SGE{l.SGE(0, 8)}, RemoteAddr: s.target.mr.AddrOf(off), RKey: s.rkey, CompareAdd: 3}
	}
}

func TestAccessInvalidatedWindow(t *testing.T) {
	type setup = mwSetup
	// Windows cover [1024, 3072) of a 4096-byte region.
	const winOff, winLen = 1024, 2048
	bind2 := func(t *testing.T, s *setup, id uint64) uint32 {
		t.Helper()
		rkey := IncRKey(s.mw.RKey())
		if err := s.p.qb.PostSend(SendWR{ID: id, Opcode: WRBindMW, Flags: SendSignaled, Bind: &MWBindWR{MW: s.mw, RKey: rkey,
			MWBind: MWBind{MR: s.target.mr, Addr: s.target.mr.AddrOf(winOff), Length: winLen, Access: AccessRemoteWrite | AccessRemoteRead | AccessRemoteAtomic}}}); err != nil {
			t.Fatal(err)
		}
		expectStatus(t, s.b.cq, id, WCSuccess)
		return rkey
	}
	cases := []struct {
		name    string
		typ     MWType
		op      func(s *setup, local *MR) SendWR // the request through the window
		revoke  func(t *testing.T, s *setup)     // what makes the window stop granting it
		control bool                             // the request succeeds before revoke
	}{
		{name: "WRITE after LOCAL_INV", typ: MWType2, op: mwWrite(winOff, 64), control: true, revoke: func(t *testing.T, s *setup) {
			s.p.qb.PostSend(SendWR{ID: 50, Opcode: WRLocalInv, Flags: SendSignaled, Imm: s.rkey})
			expectStatus(t, s.b.cq, 50, WCSuccess)
		}},
		{name: "atomic after LOCAL_INV", typ: MWType2, op: mwAtomic(winOff + 8), control: true, revoke: func(t *testing.T, s *setup) {
			s.p.qb.PostSend(SendWR{ID: 50, Opcode: WRLocalInv, Flags: SendSignaled, Imm: s.rkey})
			expectStatus(t, s.b.cq, 50, WCSuccess)
		}},
		{name: "WRITE after the peer's SEND_WITH_INV", typ: MWType2, op: mwWrite(winOff+100, 500), control: true, revoke: func(t *testing.T, s *setup) {
			rbuf := s.b.mr(t, 64, allAccess)
			s.p.qb.PostRecv(RecvWR{ID: 51, SGL: []SGE{rbuf.SGE(0, 64)}})
			s.p.qa.PostSend(SendWR{ID: 52, Opcode: WRSendWithInv, Flags: SendSignaled, Imm: s.rkey})
			expectStatus(t, s.a.cq, 52, WCSuccess)
			if wc := expectStatus(t, s.b.rcq, 51, WCSuccess); wc.Flags&WCWithInv == 0 || wc.Imm != s.rkey {
				t.Fatalf("SEND_WITH_INV completion %+v", wc)
			}
		}},
		{name: "atomic after the peer's SEND_WITH_INV", typ: MWType2, op: mwAtomic(winOff), control: true, revoke: func(t *testing.T, s *setup) {
			rbuf := s.b.mr(t, 64, allAccess)
			s.p.qb.PostRecv(RecvWR{ID: 51, SGL: []SGE{rbuf.SGE(0, 64)}})
			s.p.qa.PostSend(SendWR{ID: 52, Opcode: WRSendWithInv, Flags: SendSignaled, Imm: s.rkey})
			expectStatus(t, s.a.cq, 52, WCSuccess)
			expectStatus(t, s.b.rcq, 51, WCSuccess)
		}},
		{name: "WRITE with the old key after a rebind", typ: MWType2, op: mwWrite(winOff, 64), control: true, revoke: func(t *testing.T, s *setup) {
			s.p.qb.PostSend(SendWR{ID: 50, Opcode: WRLocalInv, Flags: SendSignaled, Imm: s.rkey})
			expectStatus(t, s.b.cq, 50, WCSuccess)
			if bind2(t, s, 53) == s.rkey {
				t.Fatal("rebinding kept the rkey")
			}
		}},
		{name: "WRITE after the window is deallocated", typ: MWType2, op: mwWrite(winOff, 64), control: true, revoke: func(t *testing.T, s *setup) {
			if err := s.mw.Close(); err != nil {
				t.Fatal(err)
			}
		}},
		{name: "READ through a type 1 window after it is unbound", typ: MWType1, op: mwRead(winOff, 64), control: true, revoke: func(t *testing.T, s *setup) {
			if _, err := s.p.qb.BindMW(s.mw, 54, SendSignaled, MWBind{MR: s.target.mr}); err != nil {
				t.Fatal(err)
			}
			expectStatus(t, s.b.cq, 54, WCSuccess)
		}},
		{name: "WRITE through a type 1 window after it is deallocated", typ: MWType1, op: mwWrite(winOff, 64), control: true, revoke: func(t *testing.T, s *setup) {
			if err := s.mw.Close(); err != nil {
				t.Fatal(err)
			}
		}},
		{name: "atomic just past the window, inside the region", typ: MWType2, op: mwAtomic(winOff + winLen)},
		{name: "WRITE straddling the window's start", typ: MWType1, op: mwWrite(winOff-8, 64)},
		{name: "READ straddling the window's end", typ: MWType2, op: mwRead(winOff+winLen-32, 64)},
	}
	a, b := newHost(t), newHost(t)
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := &setup{a: a, b: b, p: newPair(t, a, b, QPTypeRC, defaultRC())}
			defer s.p.qa.Close()
			defer s.p.qb.Close()
			s.target = newGuarded(t, b.pd, 4096, allAccess|AccessMWBind, uint64(i)+300)
			local := newGuarded(t, a.pd, 4096, allAccess, uint64(i)+400)
			var err error
			if s.mw, err = b.pd.AllocMW(c.typ); err != nil {
				t.Fatal(err)
			}
			defer s.mw.Close()
			if c.typ == MWType1 {
				if s.rkey, err = s.p.qb.BindMW(s.mw, 1, SendSignaled, MWBind{MR: s.target.mr, Addr: s.target.mr.AddrOf(winOff),
					Length: winLen, Access: AccessRemoteWrite | AccessRemoteRead | AccessRemoteAtomic}); err != nil {
					t.Fatal(err)
				}
				expectStatus(t, b.cq, 1, WCSuccess)
			} else {
				s.rkey = bind2(t, s, 1)
			}
			if c.control {
				wr := c.op(s, local.mr)
				wr.ID, wr.Flags = 10, SendSignaled
				s.p.qa.PostSend(wr)
				expectStatus(t, a.cq, 10, WCSuccess)
				s.target.accept()
				local.accept()
				c.revoke(t, s)
			}
			before := b.dev.Counters().Get("remote_access_err")
			wr := c.op(s, local.mr)
			wr.ID, wr.Flags = 11, SendSignaled
			s.p.qa.PostSend(wr)
			expectStatus(t, a.cq, 11, WCRemAccessErr)
			waitState(t, s.p.qb, QPStateErr)
			waitCounter(t, b.dev, "remote_access_err", before+1)
			s.target.unchanged(t, "region behind the window")
			local.unchanged(t, "requester's landing buffer")
		})
	}
}

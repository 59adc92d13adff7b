package verbs_test

import (
	"testing"

	"github.com/goverbs/goverbs/verbs"
)

// TestPostWithSGLLiteralAllocatesNothing: a work request written in place, its SGL a
// slice literal, costs no allocation to post, for RC WRITEs, receives and UD SENDs with
// an address handle. Go moves such a literal to the heap as soon as any callee might
// keep a pointer into it, so this holds only while no layer stores the caller's SGL.
func TestPostWithSGLLiteralAllocatesNothing(t *testing.T) {
	if raceEnabled {
		t.Skip("allocation counts are meaningless under the race detector (sync.Pool drops items)")
	}
	a, b := newHost(t), newHost(t)
	p := newPair(t, a, b, verbs.QPTypeRC, defaultRC())
	src, dst := a.MR(t, 64, allAccess), b.MR(t, 64, allAccess)
	if n := testing.AllocsPerRun(50, func() {
		if err := p.QB.PostRecv(verbs.RecvWR{ID: 1, SGL: []verbs.SGE{dst.SGE(0, 64)}}); err != nil {
			t.Fatal(err)
		}
	}); n != 0 {
		t.Errorf("PostRecv: %v allocations per post", n)
	}
	if n := testing.AllocsPerRun(50, func() {
		if err := p.QA.PostSend(verbs.SendWR{ID: 2, Opcode: verbs.WRRDMAWrite, SGL: []verbs.SGE{src.SGE(0, 8)},
			RemoteAddr: dst.Addr(), RKey: dst.RKey()}); err != nil {
			t.Fatal(err)
		}
	}); n != 0 {
		t.Errorf("PostSend (RC WRITE): %v allocations per post", n)
	}
	const qkey = 0x11111111
	ua, ub := udQP(t, a, qkey), udQP(t, b, qkey)
	ah, err := a.PD.CreateAH(verbs.AHAttr{DGID: b.GID, Port: 1, HopLimit: 64})
	if err != nil {
		t.Fatal(err)
	}
	if n := testing.AllocsPerRun(50, func() {
		if err := ua.PostSend(verbs.SendWR{ID: 3, Opcode: verbs.WRSend, SGL: []verbs.SGE{src.SGE(0, 8)},
			AH: ah, RemoteQPN: ub.QPN(), RemoteQKey: qkey}); err != nil {
			t.Fatal(err)
		}
	}); n != 0 {
		t.Errorf("PostSend (UD SEND): %v allocations per post", n)
	}
}

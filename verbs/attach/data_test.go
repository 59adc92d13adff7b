//go:build linux

package attach_test

import (
	"bytes"
	"testing"

	"github.com/goverbs/goverbs/internal/softtest"
	"github.com/goverbs/goverbs/internal/testaddr"
	"github.com/goverbs/goverbs/verbs"
)

// TestUDAndSRQAttached: data through an address handle (UD) and through an SRQ, between
// two processes' worth of objects on one attached device.
func TestUDAndSRQAttached(t *testing.T) {
	_, addr := daemon(t)
	cfg := verbs.SoftConfig{Name: "sw0", Addr: addr, Attach: true}
	a, b := softtest.NewHostCfg(t, testaddr.Attach, cfg), softtest.NewHostCfg(t, testaddr.Attach, cfg)
	mrA := a.MR(t, 1<<16, verbs.AccessLocalWrite)
	mrB := b.MR(t, 1<<16, verbs.AccessLocalWrite)
	copy(mrA.Buf(), "datagram through an address handle")

	// UD.
	ua, ub := softtest.UDQP(t, a, 0x1111), softtest.UDQP(t, b, 0x1111)
	if err := ub.PostRecv(verbs.RecvWR{ID: 1, SGL: []verbs.SGE{mrB.SGE(0, verbs.GRHLen+64)}}); err != nil {
		t.Fatal(err)
	}
	ah, err := a.PD.CreateAH(verbs.AHAttr{DGID: b.GID, Port: 1, HopLimit: 64})
	if err != nil {
		t.Fatal(err)
	}
	if err := ua.PostSend(verbs.SendWR{ID: 2, Opcode: verbs.WRSend, Flags: verbs.SendSignaled, SGL: []verbs.SGE{mrA.SGE(0, 34)},
		AH: ah, RemoteQPN: ub.QPN(), RemoteQKey: 0x1111}); err != nil {
		t.Fatal(err)
	}
	softtest.ExpectStatus(t, a.CQ, 2, verbs.WCSuccess)
	wc := softtest.ExpectStatus(t, b.RCQ, 1, verbs.WCSuccess)
	if wc.SrcQP != ua.QPN() || !bytes.Equal(mrB.Buf()[verbs.GRHLen:verbs.GRHLen+34], mrA.Buf()[:34]) {
		t.Fatalf("UD receive: %+v %q", wc, mrB.Buf()[verbs.GRHLen:verbs.GRHLen+34])
	}

	// RC into an SRQ.
	srq, err := b.PD.CreateSRQ(verbs.SRQAttr{MaxWR: 16, MaxSGE: 1})
	if err != nil {
		t.Fatal(err)
	}
	qb, err := b.PD.CreateQP(verbs.QPInitAttr{Type: verbs.QPTypeRC, SendCQ: b.CQ, RecvCQ: b.RCQ, SRQ: srq,
		Cap: verbs.QPCap{MaxSendWR: 4, MaxSendSGE: 1}})
	if err != nil {
		t.Fatal(err)
	}
	qa := a.QP(t, verbs.QPTypeRC)
	p := softtest.DefaultRC()
	softtest.Connect(t, qa, p, b.GID, qb.QPN(), 1, 1)
	softtest.Connect(t, qb, p, a.GID, qa.QPN(), 1, 1)
	if err := srq.PostRecv(verbs.RecvWR{ID: 3, SGL: []verbs.SGE{mrB.SGE(4096, 64)}}); err != nil {
		t.Fatal(err)
	}
	if err := qa.PostSend(verbs.SendWR{ID: 4, Opcode: verbs.WRSend, Flags: verbs.SendSignaled, SGL: []verbs.SGE{mrA.SGE(0, 34)}}); err != nil {
		t.Fatal(err)
	}
	softtest.ExpectStatus(t, a.CQ, 4, verbs.WCSuccess)
	softtest.ExpectStatus(t, b.RCQ, 3, verbs.WCSuccess)
	if !bytes.Equal(mrB.Buf()[4096:4096+34], mrA.Buf()[:34]) {
		t.Fatalf("SRQ receive: %q", mrB.Buf()[4096:4096+34])
	}
}

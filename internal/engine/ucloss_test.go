package engine_test

import (
	"bytes"
	"testing"
	"testing/synctest"
	"time"

	"github.com/goverbs/goverbs/netio/simnet"
	"github.com/goverbs/goverbs/verbs"
	"github.com/goverbs/goverbs/wire"
)

func TestUCMessageWithALostPacketIsDropped(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := simnet.New(1, simnet.Faults{Delay: 10 * time.Microsecond})
		a, b := simHost(t, n, "127.0.100.1"), simHost(t, n, "127.0.100.2")
		p := newPair(t, a, b, verbs.QPTypeUC, defaultRC())
		src, dst := a.MR(t, 8192, allAccess), b.MR(t, 2*8192, allAccess)
		fill(src.Buf(), 8)
		p.QB.PostRecv(verbs.RecvWR{ID: 1, SGL: []verbs.SGE{dst.SGE(0, 8192)}}, verbs.RecvWR{ID: 2, SGL: []verbs.SGE{dst.SGE(8192, 8192)}})
		dropped := dropOnce(n, wire.UCSendMiddle)
		// Message 1 (3 packets) loses its middle; message 2 must arrive whole, in the
		// receive WQE message 1 would have used (the responder resynchronises on FIRST).
		p.QA.PostSend(
			verbs.SendWR{ID: 1, Opcode: verbs.WRSend, Flags: verbs.SendSignaled, SGL: []verbs.SGE{src.SGE(0, 3000)}},
			verbs.SendWR{ID: 2, Opcode: verbs.WRSend, Flags: verbs.SendSignaled, SGL: []verbs.SGE{src.SGE(4000, 2500)}})
		expectStatus(t, a.CQ, 1, verbs.WCSuccess) // UC completes when sent
		expectStatus(t, a.CQ, 2, verbs.WCSuccess)
		wc := expectStatus(t, b.RCQ, 1, verbs.WCSuccess)
		if *dropped != 1 || wc.ByteLen != 2500 || !bytes.Equal(dst.Buf()[:2500], src.Buf()[4000:6500]) {
			t.Fatalf("dropped %d; receive %+v", *dropped, wc)
		}
		time.Sleep(10 * time.Millisecond)
		if k, _ := b.RCQ.Poll(make([]verbs.WC, 2)); k != 0 {
			t.Fatal("the damaged message completed")
		}
		if p.QB.State() != verbs.QPStateRTS {
			t.Fatalf("UC responder in %v after a loss", p.QB.State())
		}
	})
}

func TestUDQKeyHighBitUsesTheQPsQKey(t *testing.T) {
	a, b := newHost(t), newHost(t)
	const qkey = 0x0badcafe
	qa, qb := udQP(t, a, qkey), udQP(t, b, qkey)
	src, dst := a.MR(t, 64, allAccess), b.MR(t, 64+verbs.GRHLen, allAccess)
	ah, _ := a.PD.CreateAH(verbs.AHAttr{DGID: b.GID, Port: 1})
	qb.PostRecv(verbs.RecvWR{ID: 1, SGL: []verbs.SGE{dst.SGE(0, dst.Len())}})
	// IBTA 10.2.5: a work request Q_Key with the high bit set means "the QP's own Q_Key".
	qa.PostSend(verbs.SendWR{ID: 1, Opcode: verbs.WRSend, Flags: verbs.SendSignaled, SGL: []verbs.SGE{src.SGE(0, 8)}, AH: ah,
		RemoteQPN: qb.QPN(), RemoteQKey: 0x80000000})
	expectStatus(t, a.CQ, 1, verbs.WCSuccess)
	expectStatus(t, b.RCQ, 1, verbs.WCSuccess)
}

func TestSRQQueryAndArm(t *testing.T) {
	a := newHost(t)
	srq, err := a.PD.CreateSRQ(verbs.SRQAttr{MaxWR: 32, MaxSGE: 2, SRQLimit: 4})
	if err != nil {
		t.Fatal(err)
	}
	if q := srq.Query(); q.MaxWR != 32 || q.MaxSGE != 2 || q.SRQLimit != 4 {
		t.Fatalf("Query %+v", q)
	}
	if err := srq.Arm(32); err == nil {
		t.Fatal("armed a limit at max_wr")
	}
	if err := srq.Arm(0); err != nil || srq.Query().SRQLimit != 0 {
		t.Fatalf("disarm: %v", err)
	}
	if err := a.PD.Close(); err == nil {
		t.Fatal("closed a PD with an SRQ on it")
	}
	if err := srq.Close(); err != nil {
		t.Fatal(err)
	}
}

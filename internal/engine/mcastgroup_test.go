package engine_test

import (
	"bytes"
	"errors"
	"testing"
	"time"

	"github.com/goverbs/goverbs/internal/engine"
	"github.com/goverbs/goverbs/internal/testaddr"
	"github.com/goverbs/goverbs/verbs"
)

// Through the public API: a UD QP attached to a group receives a SEND to it (remote QPN
// 0xFFFFFF); the device advertises the limits it keeps; what AttachMcast refuses.
func TestMcastAttachAndSend(t *testing.T) {
	const qkey = 0x01234567
	a, b := newHost(t), newHost(t)
	gid := verbs.GIDFromAddr(testaddr.Group(testaddr.Engine))
	qa, qb := udQP(t, a, qkey), udQP(t, b, qkey)
	if err := qb.AttachMcast(gid, 0); err != nil {
		t.Fatal(err)
	}
	src, dst := a.MR(t, 64, allAccess), b.MR(t, 64+verbs.GRHLen, allAccess)
	copy(src.Buf(), "to the group")
	qb.PostRecv(verbs.RecvWR{ID: 1, SGL: []verbs.SGE{dst.SGE(0, dst.Len())}})
	ah, err := a.PD.CreateAH(verbs.AHAttr{DGID: gid, Port: 1, HopLimit: 64})
	if err != nil {
		t.Fatal(err)
	}
	if err := qa.PostSend(verbs.SendWR{ID: 2, Opcode: verbs.WRSend, Flags: verbs.SendSignaled, SGL: []verbs.SGE{src.SGE(0, 12)},
		AH: ah, RemoteQPN: 0xFFFFFF, RemoteQKey: qkey}); err != nil {
		t.Fatal(err)
	}
	expectStatus(t, a.CQ, 2, verbs.WCSuccess)
	wc := expectStatus(t, b.RCQ, 1, verbs.WCSuccess)
	if wc.SrcQP != qa.QPN() || !bytes.Equal(dst.Buf()[verbs.GRHLen:verbs.GRHLen+12], src.Buf()[:12]) {
		t.Fatalf("multicast receive %+v: %q", wc, dst.Buf()[verbs.GRHLen:verbs.GRHLen+12])
	}
	if err := qb.DetachMcast(gid, 0); err != nil {
		t.Fatal(err)
	}

	if q := a.Dev.Query(); q.MaxMcastGrp <= 0 || q.MaxMcastQPAttach <= 0 || q.MaxTotalMcastQPAttach < q.MaxMcastGrp {
		t.Errorf("multicast limits %d %d %d", q.MaxMcastGrp, q.MaxMcastQPAttach, q.MaxTotalMcastQPAttach)
	}
	rc := a.QP(t, verbs.QPTypeRC)
	if err := rc.AttachMcast(gid, 0); !errors.Is(err, verbs.ErrInvalidAttr) {
		t.Errorf("RC QP attach: %v", err)
	}
	if err := qa.AttachMcast(a.GID, 0); !errors.Is(err, verbs.ErrInvalidAttr) {
		t.Errorf("attach to a unicast GID: %v", err)
	}
	if err := qa.DetachMcast(gid, 0); !errors.Is(err, verbs.ErrInvalidAttr) {
		t.Errorf("detach of a QP not attached: %v", err)
	}
	qa.Close()
	if err := qa.AttachMcast(gid, 0); !errors.Is(err, verbs.ErrClosed) {
		t.Errorf("attach after close: %v", err)
	}
}

// BlockSelfMcastLoopback reaches the provider: the QP does not hear its own send to a
// group it is attached to, while another QP of the device, attached too, does.
func TestMcastBlockSelfLoopback(t *testing.T) {
	const qkey = 0x01234567
	h := newHost(t)
	gid := verbs.GIDFromAddr(testaddr.Group(testaddr.Engine))
	quiet, err := h.PD.CreateQP(verbs.QPInitAttr{Type: verbs.QPTypeUD, SendCQ: h.CQ, RecvCQ: h.RCQ, BlockSelfMcastLoopback: true,
		Cap: verbs.QPCap{MaxSendWR: 4, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1}})
	if err != nil {
		t.Fatal(err)
	}
	if err := readyUD(quiet, qkey); err != nil {
		t.Fatal(err)
	}
	other := udQP(t, h, qkey)
	buf := h.MR(t, 2*(64+verbs.GRHLen), allAccess)
	for i, qp := range []*verbs.QP{quiet, other} {
		if err := qp.AttachMcast(gid, 0); err != nil {
			t.Fatal(err)
		}
		qp.PostRecv(verbs.RecvWR{ID: uint64(10 + i), SGL: []verbs.SGE{buf.SGE(i*(64+verbs.GRHLen), 64+verbs.GRHLen)}})
	}
	ah, _ := h.PD.CreateAH(verbs.AHAttr{DGID: gid, Port: 1})
	if err := quiet.PostSend(verbs.SendWR{ID: 1, Opcode: verbs.WRSend, Flags: verbs.SendSignaled, SGL: []verbs.SGE{buf.SGE(0, 8)},
		AH: ah, RemoteQPN: 0xFFFFFF, RemoteQKey: qkey}); err != nil {
		t.Fatal(err)
	}
	expectStatus(t, h.CQ, 1, verbs.WCSuccess)
	if wc := expectStatus(t, h.RCQ, 11, verbs.WCSuccess); wc.QPN != other.QPN() {
		t.Fatalf("completion %+v", wc)
	}
	time.Sleep(50 * time.Millisecond)
	if n, _ := h.RCQ.Poll(make([]verbs.WC, 4)); n != 0 {
		t.Fatal("the blocking QP heard its own send")
	}
}

// readyUD brings a UD QP to RTS with the Q_Key (udQP for a QP made elsewhere).
func readyUD(qp *verbs.QP, qkey uint32) error {
	if err := qp.Modify(&verbs.QPAttr{State: verbs.QPStateInit, Port: 1, QKey: qkey}, verbs.QPAttrState|verbs.QPAttrPKeyIndex|verbs.QPAttrPort|verbs.QPAttrQKey); err != nil {
		return err
	}
	if err := qp.Modify(&verbs.QPAttr{State: verbs.QPStateRTR}, verbs.QPAttrState); err != nil {
		return err
	}
	return qp.Modify(&verbs.QPAttr{State: verbs.QPStateRTS}, verbs.QPAttrState|verbs.QPAttrSQPSN)
}

// A multicast round, post to the group and poll the member's completion, allocates
// nothing: the group's receive goroutine and its delivery to each member reuse their
// buffers as the device's own receive path does.
func TestMcastAllocsNothing(t *testing.T) {
	if engine.RaceEnabled {
		t.Skip("allocation counts are meaningless under the race detector (sync.Pool drops items)")
	}
	const qkey = 0x01234567
	a, b := newHost(t), newHost(t)
	gid := verbs.GIDFromAddr(testaddr.Group(testaddr.Engine))
	qa, qb := udQP(t, a, qkey), udQP(t, b, qkey)
	if err := qb.AttachMcast(gid, 0); err != nil {
		t.Fatal(err)
	}
	src, dst := a.MR(t, 64, allAccess), b.MR(t, 64+verbs.GRHLen, allAccess)
	ah, err := a.PD.CreateAH(verbs.AHAttr{DGID: gid, Port: 1, HopLimit: 64})
	if err != nil {
		t.Fatal(err)
	}
	wcs := make([]verbs.WC, 4)
	round := func() {
		if err := qb.PostRecv(verbs.RecvWR{ID: 1, SGL: []verbs.SGE{dst.SGE(0, dst.Len())}}); err != nil {
			t.Fatal(err)
		}
		if err := qa.PostSend(verbs.SendWR{ID: 2, Opcode: verbs.WRSend, SGL: []verbs.SGE{src.SGE(0, 8)},
			AH: ah, RemoteQPN: 0xFFFFFF, RemoteQKey: qkey}); err != nil {
			t.Fatal(err)
		}
		deadline := time.Now().Add(5 * time.Second)
		for {
			n, err := b.RCQ.Poll(wcs)
			if err != nil || n > 0 && wcs[0].Status != verbs.WCSuccess {
				t.Fatalf("poll: %v %+v", err, wcs[0])
			}
			if n > 0 {
				return
			}
			if time.Now().After(deadline) {
				t.Fatal("no multicast completion")
			}
			// Sleep, not yield: AllocsPerRun runs on one P, and a goroutine that only
			// yields keeps the scheduler from polling the network for the group's reader.
			time.Sleep(time.Microsecond)
		}
	}
	round() // warm up: the first packet sizes pools
	if n := testing.AllocsPerRun(50, round); n != 0 {
		t.Errorf("multicast post, delivery and poll: %v allocations per round", n)
	}
}

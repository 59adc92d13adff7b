package verbs

import (
	"bytes"
	"errors"
	"testing"

	"github.com/goverbs/goverbs/internal/testaddr"
)

// Through the public API: a UD QP attached to a group receives a SEND to it (remote QPN
// 0xFFFFFF); the device advertises the limits it keeps; what AttachMcast refuses.
func TestMcastAttachAndSend(t *testing.T) {
	const qkey = 0x01234567
	a, b := newHost(t), newHost(t)
	gid := GIDFromAddr(testaddr.Group(testaddr.Verbs))
	qa, qb := udQP(t, a, qkey), udQP(t, b, qkey)
	if err := qb.AttachMcast(gid, 0); err != nil {
		t.Fatal(err)
	}
	src, dst := a.mr(t, 64, allAccess), b.mr(t, 64+GRHLen, allAccess)
	copy(src.Buf(), "to the group")
	qb.PostRecv(RecvWR{ID: 1, SGL: []SGE{dst.SGE(0, dst.Len())}})
	ah, err := a.pd.CreateAH(AHAttr{DGID: gid, Port: 1, HopLimit: 64})
	if err != nil {
		t.Fatal(err)
	}
	if err := qa.PostSend(SendWR{ID: 2, Opcode: WRSend, Flags: SendSignaled, SGL: []SGE{src.SGE(0, 12)},
		AH: ah, RemoteQPN: 0xFFFFFF, RemoteQKey: qkey}); err != nil {
		t.Fatal(err)
	}
	expectStatus(t, a.cq, 2, WCSuccess)
	wc := expectStatus(t, b.rcq, 1, WCSuccess)
	if wc.SrcQP != qa.QPN() || !bytes.Equal(dst.Buf()[GRHLen:GRHLen+12], src.Buf()[:12]) {
		t.Fatalf("multicast receive %+v: %q", wc, dst.Buf()[GRHLen:GRHLen+12])
	}
	if err := qb.DetachMcast(gid, 0); err != nil {
		t.Fatal(err)
	}

	if q := a.dev.Query(); q.MaxMcastGrp <= 0 || q.MaxMcastQPAttach <= 0 || q.MaxTotalMcastQPAttach < q.MaxMcastGrp {
		t.Errorf("multicast limits %d %d %d", q.MaxMcastGrp, q.MaxMcastQPAttach, q.MaxTotalMcastQPAttach)
	}
	rc := a.qp(t, QPTypeRC)
	if err := rc.AttachMcast(gid, 0); !errors.Is(err, ErrInvalidAttr) {
		t.Errorf("RC QP attach: %v", err)
	}
	if err := qa.AttachMcast(a.gid, 0); !errors.Is(err, ErrInvalidAttr) {
		t.Errorf("attach to a unicast GID: %v", err)
	}
	if err := qa.DetachMcast(gid, 0); !errors.Is(err, ErrInvalidAttr) {
		t.Errorf("detach of a QP not attached: %v", err)
	}
	qa.Close()
	if err := qa.AttachMcast(gid, 0); !errors.Is(err, ErrClosed) {
		t.Errorf("attach after close: %v", err)
	}
}

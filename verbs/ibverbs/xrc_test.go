//go:build ibverbs

package ibverbs_test

import (
	"bytes"
	"testing"

	"github.com/goverbs/goverbs/verbs"
)

// TestXRC sends through an XRC_SEND QP into an XRC SRQ by its number, through an
// XRC_RECV QP of a domain, on a device that claims XRC (IBV_DEVICE_XRC; Linux rxe does
// not, ConnectX does); it skips on others.
func TestXRC(t *testing.T) {
	e := setup(t)
	if e.dev.Query().DeviceCapFlags&verbs.DeviceXRC == 0 {
		t.Skipf("%s has no XRC (IBV_DEVICE_XRC)", e.dev.Name())
	}
	x, err := e.dev.OpenXRCD(-1, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { x.Close() })
	rcq, scq := e.cq(t, 64, nil), e.cq(t, 64, nil)
	srq, err := e.pd.CreateSRQEx(verbs.SRQInitEx{Type: verbs.SRQTypeXRC, XRCD: x, CQ: rcq,
		Attr: verbs.SRQAttr{MaxWR: 16, MaxSGE: 1}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srq.Close() })
	num, err := srq.Num()
	if err != nil {
		t.Fatal(err)
	}
	ini, err := e.pd.CreateQP(verbs.QPInitAttr{Type: verbs.QPTypeXRCSend, SendCQ: scq,
		Cap: verbs.QPCap{MaxSendWR: 16, MaxSendSGE: 1}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ini.Close() })
	tgt, err := x.CreateQP(verbs.QPInitAttr{Type: verbs.QPTypeXRCRecv})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tgt.Close() })
	e.connect(t, ini, tgt.QPN())
	e.connect(t, tgt, ini.QPN())
	src, dst := e.mr(t, 64, allAccess), e.mr(t, 64, allAccess)
	copy(src.Buf(), "eXtended Reliable Connection")
	if err := srq.PostRecv(verbs.RecvWR{ID: 7, SGL: []verbs.SGE{dst.SGE(0, 64)}}); err != nil {
		t.Fatal(err)
	}
	if err := ini.PostSend(verbs.SendWR{ID: 1, Opcode: verbs.WRSend, Flags: verbs.SendSignaled,
		SGL: []verbs.SGE{src.SGE(0, 64)}, RemoteSRQN: num}); err != nil {
		t.Fatal(err)
	}
	wantWC(t, waitWC(t, scq, 1)[0], 1, verbs.WCSend, 0)
	wc := waitWC(t, rcq, 1)[0]
	wantWC(t, wc, 7, verbs.WCRecv, 64)
	if wc.QPN != tgt.QPN() || !bytes.Equal(dst.Buf(), src.Buf()) {
		t.Errorf("completion %+v, data %q", wc, dst.Buf()[:28])
	}
}

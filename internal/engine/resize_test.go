package engine_test

import (
	"errors"
	"runtime"
	"testing"
	"time"

	"github.com/goverbs/goverbs/verbs"
)

// TestResizeCountsDeferredSends: a UD send completes as soon as it leaves, so a CQ
// resized below the completions of sends posted before counts them, even those a
// default-mode device left to its sender goroutine as part of a stream (pyverbs'
// test_resize_cq posts six and resizes to one). With one P, the sender goroutine cannot
// have run when Resize is called: the resize must send them itself, and fail.
func TestResizeCountsDeferredSends(t *testing.T) {
	const qkey = 0x22222222
	a, b := newHost(t), newHost(t)
	qa, cq := udQP(t, a, qkey), a.CQ
	qb := udQP(t, b, qkey)
	ah, err := a.PD.CreateAH(verbs.AHAttr{DGID: b.GID, Port: 1, HopLimit: 64})
	if err != nil {
		t.Fatal(err)
	}
	src := a.MR(t, 64, allAccess)

	procs := runtime.GOMAXPROCS(1)
	const sends = 6
	for i := 0; i < sends; i++ {
		if err := qa.PostSend(verbs.SendWR{ID: uint64(i), Opcode: verbs.WRSend, Flags: verbs.SendSignaled,
			SGL: []verbs.SGE{src.SGE(0, 8)}, AH: ah, RemoteQPN: qb.QPN(), RemoteQKey: qkey}); err != nil {
			t.Fatal(err)
		}
	}
	err = cq.Resize(1)
	runtime.GOMAXPROCS(procs)
	if !errors.Is(err, verbs.ErrInvalidAttr) {
		t.Fatalf("resize to 1 below %d sent sends: %v, want invalid attribute", sends, err)
	}
	wcs := waitWC(t, cq, sends, 5*time.Second)
	for _, wc := range wcs {
		if wc.Status != verbs.WCSuccess {
			t.Fatalf("send %d: %v", wc.ID, wc.Status)
		}
	}
	if err := cq.Resize(1); err != nil {
		t.Fatalf("resize of the emptied CQ to 1: %v", err)
	}
}

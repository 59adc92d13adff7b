package verbstest

import (
	"errors"
	"testing"
	"time"

	"github.com/goverbs/goverbs/verbs"
)

// TestCloseBusy checks the parents that refuse to close while children use them
// (libibverbs' EBUSY): the refusal matches verbs.ErrBusy, the parent stays usable, and
// it closes once its children are gone.
func TestCloseBusy(t *testing.T, e Env) {
	dev := e.Open(t)
	defer dev.Close()
	o := e.objects(t, dev)

	busy := func(what string, err error) {
		t.Helper()
		if !errors.Is(err, verbs.ErrBusy) {
			t.Fatalf("Close of a %s in use: %v, want an error matching verbs.ErrBusy", what, err)
		}
	}
	ok := func(what string, err error) {
		t.Helper()
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}

	busy("PD", o.pd.Close())
	// A page: a provider may share registered memory by whole pages (verbs/attach).
	mr, err := o.pd.RegMR(make([]byte, 4096), verbs.AccessLocalWrite)
	ok("RegMR on a PD whose Close was refused", err)
	ok("MR.Close", mr.Close())

	busy("CQ", o.cq.Close())
	_, err = o.cq.Poll(make([]verbs.WC, 1))
	ok("Poll of a CQ whose Close was refused", err)

	busy("SRQ", o.srq.Close())
	ok("SRQ.PostRecv after a refused Close", o.srq.PostRecv(verbs.RecvWR{ID: 1,
		SGL: []verbs.SGE{{Addr: o.mr.Addr(), Length: 8, LKey: o.mr.LKey()}}}))

	busy("completion channel", o.ch.Close())

	// A region with a window bound to it (ibv_dereg_mr: EBUSY).
	if _, err := o.qp.BindMW(o.mw1, 7, verbs.SendSignaled, verbs.MWBind{MR: o.mr, Addr: o.mr.Addr(), Length: 8,
		Access: verbs.AccessRemoteRead}); err != nil {
		t.Fatalf("BindMW: %v", err)
	}
	wcs := make([]verbs.WC, 1)
	for deadline := time.Now().Add(10 * time.Second); ; {
		n, err := o.cq.Poll(wcs)
		ok("Poll", err)
		if n == 1 {
			if wcs[0].Status != verbs.WCSuccess || wcs[0].ID != 7 {
				t.Fatalf("bind completion %+v, want ID 7 with success", wcs[0])
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no bind completion within 10s")
		}
		time.Sleep(time.Millisecond)
	}
	busy("memory region", o.mr.Close())

	// Children first, then each parent closes.
	for _, c := range []struct {
		name  string
		close func() error
	}{
		{"QP", o.qp.Close}, {"UD QP", o.ud.Close}, {"SRQ", o.srq.Close}, {"CQ", o.cq.Close},
		{"completion channel", o.ch.Close}, {"MW", o.mw1.Close}, {"MW", o.mw2.Close},
		{"AH", o.ah.Close}, {"MR", o.mr.Close}, {"PD", o.pd.Close},
	} {
		ok(c.name+".Close once its users are closed", c.close())
	}
}

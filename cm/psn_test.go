package cm

import (
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/goverbs/goverbs/cm/mad"
	"github.com/goverbs/goverbs/verbs"
	"github.com/goverbs/goverbs/wire"
)

// firstPSN records the PSN of the first request packet a device sends.
type firstPSN struct {
	mu  sync.Mutex
	psn int64
	dev netip.Addr
}

func (f *firstPSN) Record(_ time.Time, src, _ netip.AddrPort, _ uint16, p []byte) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.psn < 0 && len(p) >= wire.BTHLen && src.Addr() == f.dev && wire.BTH(p).Opcode() != wire.RCAck {
		f.psn = int64(wire.BTH(p).PSN())
	}
	return nil
}

// from sets the device whose packets count: the recorder sees the ones it
// receives too.
func (f *firstPSN) from(a netip.Addr) {
	f.mu.Lock()
	f.dev = a
	f.mu.Unlock()
}

func (f *firstPSN) get() int64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.psn
}

// TestStartingPSNs checks the starting PSNs mean what Linux's ib_cm makes
// them mean, which rxe and every hardware RNIC driven by rdma_cm follow: the
// REQ's Starting PSN is the one the passive side sends first (the active
// side's receive PSN) and the REP's the one the active side sends first.
// Two goverbs sides agree either way; a Linux peer drops every request as a
// duplicate when the two are swapped.
func TestStartingPSNs(t *testing.T) {
	hub := newHub()
	var mu sync.Mutex
	var reqPSN, repPSN int64 = -1, -1
	hub.drop = func(_, _ netip.Addr, m []byte) bool {
		if len(m) < mad.Len {
			return false
		}
		mu.Lock()
		defer mu.Unlock()
		switch mad.MAD(m).Header().AttrID() {
		case mad.AttrREQ:
			reqPSN = int64(mad.REQ(mad.MAD(m).Data()).StartingPSN())
		case mad.AttrREP:
			repPSN = int64(mad.REP(mad.MAD(m).Data()).StartingPSN())
		}
		return false
	}
	crec, srec := &firstPSN{psn: -1}, &firstPSN{psn: -1}
	cl := newSide(t, hub, verbs.SoftConfig{Recorder: crec}, nil)
	sv := newSide(t, hub, verbs.SoftConfig{Recorder: srec}, nil)
	crec.from(cl.a.Addr())
	srec.from(sv.a.Addr())
	ctx := ctxT(t)
	l, err := sv.a.Listen(7174, 1)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	ch := make(chan *Conn, 1)
	go func() {
		r, err := l.Accept(ctx)
		if err != nil {
			t.Error(err)
			ch <- nil
			return
		}
		c, err := r.Accept(ctx, sv.param(nil))
		if err != nil {
			t.Error(err)
		}
		ch <- c
	}()
	cc, err := cl.a.Dial(ctx, l.Addr(), cl.param(nil))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	sc := <-ch
	if sc == nil {
		t.FailNow()
	}
	defer sc.Close()

	// One SEND each way, each into a posted receive.
	for _, p := range []struct {
		from, to *Conn
		fs, ts   *side
	}{{cc, sc, cl, sv}, {sc, cc, sv, cl}} {
		buf := make([]byte, 8)
		mr, err := p.ts.pd.RegMR(buf, verbs.AccessLocalWrite)
		if err != nil {
			t.Fatal(err)
		}
		if err := p.to.QP().PostRecv(verbs.RecvWR{ID: 1, SGL: []verbs.SGE{mr.SGE(0, 8)}}); err != nil {
			t.Fatal(err)
		}
		sbuf := []byte("psn")
		smr, err := p.fs.pd.RegMR(sbuf, 0)
		if err != nil {
			t.Fatal(err)
		}
		if err := p.from.QP().PostSend(verbs.SendWR{ID: 2, Opcode: verbs.WRSend, Flags: verbs.SendSignaled,
			SGL: []verbs.SGE{smr.SGE(0, 3)}}); err != nil {
			t.Fatal(err)
		}
		poll(t, p.fs.cq)
		poll(t, p.ts.cq)
	}
	mu.Lock()
	defer mu.Unlock()
	if reqPSN < 0 || repPSN < 0 {
		t.Fatalf("REQ PSN %d, REP PSN %d: a message was not seen", reqPSN, repPSN)
	}
	if got := crec.get(); got != repPSN {
		t.Errorf("active side's first request has PSN %#x, want the REP's %#x (REQ's is %#x)", got, repPSN, reqPSN)
	}
	if got := srec.get(); got != reqPSN {
		t.Errorf("passive side's first request has PSN %#x, want the REQ's %#x (REP's is %#x)", got, reqPSN, repPSN)
	}
}

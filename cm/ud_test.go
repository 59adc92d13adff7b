package cm

import (
	"bytes"
	"errors"
	"testing"

	"github.com/goverbs/goverbs/cm/mad"
	"github.com/goverbs/goverbs/verbs"
)

func (s *side) udQP(t *testing.T) *verbs.QP {
	t.Helper()
	qp, err := s.pd.CreateQP(verbs.QPInitAttr{Type: verbs.QPTypeUD, SendCQ: s.cq, RecvCQ: s.cq,
		Cap: verbs.QPCap{MaxSendWR: 8, MaxRecvWR: 8, MaxSendSGE: 1, MaxRecvSGE: 1}})
	if err != nil {
		t.Fatal(err)
	}
	return qp
}

// TestResolveUD: a client resolves a UD service through SIDR over real UDP and sends
// a datagram to the QP it learnt, with the Q_Key it learnt.
func TestResolveUD(t *testing.T) {
	cl, sv := pair(t, nil)
	ctx := ctxT(t)
	l, err := sv.a.ListenUD(7174, 4)
	if err != nil {
		t.Fatal(err)
	}
	sqp := sv.udQP(t)
	go func() {
		r, err := l.Accept(ctx)
		if err != nil {
			return
		}
		if r.Transport != verbs.QPTypeUD || !bytes.HasPrefix(r.PrivateData, []byte("ud hello")) {
			t.Errorf("request %+v", r)
		}
		if _, err := r.Accept(ctx, sv.param(nil)); !errors.Is(err, ErrQP) {
			t.Errorf("Accept of a UD request: %v", err)
		}
		if err := r.AcceptUD(&Param{QP: sqp, PrivateData: []byte("served")}); err != nil {
			t.Error(err)
		}
	}()
	cqp := cl.udQP(t)
	d, err := cl.a.ResolveUD(ctx, l.Addr(), &Param{QP: cqp, PrivateData: []byte("ud hello"), TOS: 0x60})
	if err != nil {
		t.Fatal(err)
	}
	if d.QPN != sqp.QPN() || d.QKey != UDPQKey || d.AH == nil || !bytes.HasPrefix(d.PrivateData, []byte("served")) ||
		d.AH.Attr().TrafficClass != 0x60 {
		t.Fatalf("resolved %+v", d)
	}
	if cqp.State() != verbs.QPStateRTS || sqp.State() != verbs.QPStateRTS {
		t.Fatalf("QPs in %v %v", cqp.State(), sqp.State())
	}
	rbuf := make([]byte, 40+16)
	rmr, _ := sv.pd.RegMR(rbuf, verbs.AccessLocalWrite)
	if err := sqp.PostRecv(verbs.RecvWR{ID: 1, SGL: []verbs.SGE{rmr.SGE(0, len(rbuf))}}); err != nil {
		t.Fatal(err)
	}
	msg := []byte("datagram")
	smr, _ := cl.pd.RegMR(msg, 0)
	if err := cqp.PostSend(verbs.SendWR{ID: 2, Opcode: verbs.WRSend, Flags: verbs.SendSignaled,
		SGL: []verbs.SGE{smr.SGE(0, len(msg))}, AH: d.AH, RemoteQPN: d.QPN, RemoteQKey: d.QKey}); err != nil {
		t.Fatal(err)
	}
	poll(t, cl.cq)
	if wc := poll(t, sv.cq); string(rbuf[40:40+len(msg)]) != "datagram" || wc.SrcQP != cqp.QPN() {
		t.Fatalf("received %+v %q", wc, rbuf[40:])
	}
}

func TestResolveUDRefused(t *testing.T) {
	cl, sv := pair(t, nil)
	ctx := ctxT(t)
	var serr *SIDRError
	// Nobody listens.
	_, err := cl.a.ResolveUD(ctx, netipPort(sv, 9), &Param{})
	if !errors.As(err, &serr) || serr.Status != mad.SIDRServiceIDNotSupported || !errors.Is(err, ErrRejected) {
		t.Fatalf("no listener: %v", err)
	}
	// The program refuses.
	l, _ := sv.a.ListenUD(7174, 4)
	go func() {
		if r, err := l.Accept(ctx); err == nil {
			r.Reject([]byte("no"))
		}
	}()
	_, err = cl.a.ResolveUD(ctx, l.Addr(), &Param{})
	if !errors.As(err, &serr) || serr.Status != mad.SIDRRejected || !bytes.HasPrefix(serr.PrivateData, []byte("no")) {
		t.Fatalf("refused: %v", err)
	}
	// Over budget: nothing sent.
	sent := cl.a.Counters().MADsSent
	if _, err := cl.a.ResolveUD(ctx, l.Addr(), &Param{PrivateData: make([]byte, 181)}); !errors.Is(err, ErrPrivateDataTooLong) ||
		cl.a.Counters().MADsSent != sent {
		t.Fatal(err)
	}
	// A TCP listener and a UD listener on one port are two services.
	if _, err := sv.a.Listen(7174, 1); err != nil {
		t.Fatal(err)
	}
	if _, err := sv.a.ListenUD(7174, 1); !errors.Is(err, ErrPortInUse) {
		t.Fatal(err)
	}
}

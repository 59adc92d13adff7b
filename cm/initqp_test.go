package cm

import (
	"errors"
	"strings"
	"testing"

	"github.com/goverbs/goverbs/verbs"
)

func (s *side) newQP(t *testing.T, typ verbs.QPType) *verbs.QP {
	t.Helper()
	qp, err := s.pd.CreateQP(verbs.QPInitAttr{Type: typ, SendCQ: s.cq, RecvCQ: s.cq,
		Cap: verbs.QPCap{MaxSendWR: 4, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { qp.Close() })
	return qp
}

// TestInitQP checks the attributes InitQP sets on RC and UC QPs, and that it
// refuses QPs it must not touch, leaving them as they were.
func TestInitQP(t *testing.T) {
	s := newSide(t, newHub(), verbs.SoftConfig{}, nil)
	const rights = verbs.AccessLocalWrite | verbs.AccessRemoteWrite | verbs.AccessRemoteRead | verbs.AccessRemoteAtomic
	for _, typ := range []verbs.QPType{verbs.QPTypeRC, verbs.QPTypeUC} {
		qp := s.newQP(t, typ)
		if err := InitQP(qp); err != nil {
			t.Fatalf("%v: %v", typ, err)
		}
		if a := qp.Query(); a.State != verbs.QPStateInit || a.Port != 1 || a.PKeyIndex != 0 || a.AccessFlags != rights {
			t.Fatalf("%v after InitQP: state %v port %d pkey index %d access %v", typ, a.State, a.Port, a.PKeyIndex, a.AccessFlags)
		}
		// INIT takes receives: what InitQP is for.
		if err := qp.PostRecv(verbs.RecvWR{ID: 1}); err != nil {
			t.Fatalf("%v: receive in INIT: %v", typ, err)
		}
		// A second call finds the QP in INIT, not RESET.
		err := InitQP(qp)
		if !errors.Is(err, ErrQP) || !strings.Contains(err.Error(), "RESET") {
			t.Fatalf("%v: InitQP of a QP in INIT: %v", typ, err)
		}
	}

	errored := s.newQP(t, verbs.QPTypeRC)
	if err := errored.Modify(&verbs.QPAttr{State: verbs.QPStateErr}, verbs.QPAttrState); err != nil {
		t.Fatal(err)
	}
	if err := InitQP(errored); !errors.Is(err, ErrQP) || errored.State() != verbs.QPStateErr {
		t.Fatalf("InitQP of a QP in ERR: %v, now in %v", err, errored.State())
	}

	ud := s.newQP(t, verbs.QPTypeUD)
	if err := InitQP(ud); !errors.Is(err, ErrQP) || !strings.Contains(err.Error(), "UD") || ud.State() != verbs.QPStateReset {
		t.Fatalf("InitQP of a UD QP: %v, now in %v", err, ud.State())
	}
}

// TestInitQPReceiveBeforeAccept is the use InitQP exists for: the server
// posts a receive on its QP before accepting, and the client's SEND, posted as
// soon as Dial returns, lands in it. Both QPs are the program's, in INIT, and
// the CM connects them from there.
func TestInitQPReceiveBeforeAccept(t *testing.T) {
	cl, sv := pair(t, nil)
	ctx := ctxT(t)
	cqp, sqp := cl.newQP(t, verbs.QPTypeRC), sv.newQP(t, verbs.QPTypeRC)
	for _, qp := range []*verbs.QP{cqp, sqp} {
		if err := InitQP(qp); err != nil {
			t.Fatal(err)
		}
	}
	rbuf := make([]byte, 16)
	rmr, err := sv.pd.RegMR(rbuf, verbs.AccessLocalWrite)
	if err != nil {
		t.Fatal(err)
	}
	if err := sqp.PostRecv(verbs.RecvWR{ID: 1, SGL: []verbs.SGE{rmr.SGE(0, len(rbuf))}}); err != nil {
		t.Fatal(err)
	}
	l, err := sv.a.Listen(7175, 1)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	type accepted struct {
		c   *Conn
		err error
	}
	ch := make(chan accepted, 1)
	go func() {
		r, err := l.Accept(ctx)
		if err != nil {
			ch <- accepted{err: err}
			return
		}
		c, err := r.Accept(ctx, &Param{QP: sqp})
		ch <- accepted{c, err}
	}()
	cc, err := cl.a.Dial(ctx, l.Addr(), &Param{QP: cqp})
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	sbuf := []byte("first")
	smr, err := cl.pd.RegMR(sbuf, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := cqp.PostSend(verbs.SendWR{ID: 2, Opcode: verbs.WRSend, Flags: verbs.SendSignaled,
		SGL: []verbs.SGE{smr.SGE(0, len(sbuf))}}); err != nil {
		t.Fatal(err)
	}
	poll(t, cl.cq)
	if wc := poll(t, sv.cq); wc.ID != 1 || string(rbuf[:wc.ByteLen]) != "first" {
		t.Fatalf("received %+v %q", wc, rbuf[:wc.ByteLen])
	}
	acc := <-ch
	if acc.err != nil {
		t.Fatal(acc.err)
	}
	acc.c.Close()
}

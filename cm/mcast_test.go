package cm

import (
	"errors"
	"net/netip"
	"testing"

	"github.com/goverbs/goverbs/internal/testaddr"
	"github.com/goverbs/goverbs/verbs"
)

// A sender and a receiver join one group through their agents, as mckey does: the join
// gives rdma_cm's MGID, QPN and Q_Key, the receiver's QP is attached and gets the
// sender's datagram; after Leave it gets nothing and leaving again is no error; a
// send-only join attaches nothing.
func TestJoinMulticast(t *testing.T) {
	snd, rcv := pair(t, nil)
	group := testaddr.Group(testaddr.CM)
	rqp, sqp := rcv.udQP(t), snd.udQP(t)
	rm, err := rcv.a.JoinMulticast(group, &JoinParam{QP: rqp})
	if err != nil {
		t.Fatal(err)
	}
	sm, err := snd.a.JoinMulticast(netip.AddrFrom16(group.As16()), &JoinParam{QP: sqp, SendOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer sm.Leave()
	want := verbs.GIDFromAddr(group)
	for _, m := range []*Multicast{rm, sm} {
		if m.Group != group || m.MGID != want || m.QPN != 0xFFFFFF || m.QKey != 0x01234567 || m.HopLimit != 64 || m.AH == nil {
			t.Fatalf("joined %+v", m)
		}
	}
	if rqp.State() != verbs.QPStateRTS || rqp.Query().QKey != UDPQKey {
		t.Fatalf("receiver QP in %v with Q_Key %#x", rqp.State(), rqp.Query().QKey)
	}
	rbuf := make([]byte, 40+16)
	rmr, _ := rcv.pd.RegMR(rbuf, verbs.AccessLocalWrite)
	post := func() {
		if err := rqp.PostRecv(verbs.RecvWR{ID: 1, SGL: []verbs.SGE{rmr.SGE(0, len(rbuf))}}); err != nil {
			t.Fatal(err)
		}
	}
	post()
	msg := []byte("to the group")
	smr, _ := snd.pd.RegMR(msg, 0)
	send := func() {
		if err := sqp.PostSend(verbs.SendWR{ID: 2, Opcode: verbs.WRSend, Flags: verbs.SendSignaled,
			SGL: []verbs.SGE{smr.SGE(0, len(msg))}, AH: sm.AH, RemoteQPN: sm.QPN, RemoteQKey: sm.QKey}); err != nil {
			t.Fatal(err)
		}
		poll(t, snd.cq)
	}
	send()
	if wc := poll(t, rcv.cq); string(rbuf[40:40+len(msg)]) != string(msg) || wc.SrcQP != sqp.QPN() {
		t.Fatalf("received %+v %q", wc, rbuf[40:])
	}
	// The send-only sender was not attached: detaching it is refused.
	if err := sqp.DetachMcast(want, 0); !errors.Is(err, verbs.ErrInvalidAttr) {
		t.Fatalf("send-only member detach: %v", err)
	}
	if err := rm.Leave(); err != nil {
		t.Fatal(err)
	}
	if err := rm.Leave(); err != nil {
		t.Fatal(err)
	}
	if err := rqp.DetachMcast(want, 0); !errors.Is(err, verbs.ErrInvalidAttr) {
		t.Fatalf("after Leave the QP is still attached: %v", err)
	}
}

func TestJoinMulticastRefuses(t *testing.T) {
	s, _ := pair(t, nil)
	for _, g := range []string{"127.0.0.1", "0.0.0.0", "ff0e::1"} {
		if _, err := s.a.JoinMulticast(netip.MustParseAddr(g), &JoinParam{}); !errors.Is(err, ErrNotMulticast) {
			t.Errorf("join %s: %v", g, err)
		}
	}
	rc, _ := s.pd.CreateQP(verbs.QPInitAttr{Type: verbs.QPTypeRC, SendCQ: s.cq, RecvCQ: s.cq})
	if _, err := s.a.JoinMulticast(testaddr.Group(testaddr.CM), &JoinParam{QP: rc}); !errors.Is(err, ErrQP) {
		t.Errorf("join with an RC QP: %v", err)
	}
}

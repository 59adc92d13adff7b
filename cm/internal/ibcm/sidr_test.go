package ibcm

import (
	"bytes"
	"errors"
	"testing"

	"github.com/goverbs/goverbs/cm/mad"
)

const udSvc = 0x0000000001111C06 // rdma_cm UDP port 7174

func sidrReq(pd []byte) *mad.SIDRReqFields {
	return &mad.SIDRReqFields{PKey: 0xffff, ServiceID: udSvc, PrivateData: pd}
}

func TestSIDR(t *testing.T) {
	n := newNet(t)
	A, B := n.A(), n.B()
	B.a.Listen(udSvc, 4)
	ca, err := A.a.SIDRRequest(n.now, addrB, sidrReq([]byte("who serves?")))
	if err != nil {
		t.Fatal(err)
	}
	n.flush()
	e := B.takeEvent(t, EventSIDRRequest)
	cb := e.Conn
	if !bytes.HasPrefix(e.PrivateData, []byte("who serves?")) || cb.RemoteID != ca.LocalID || cb.State() != StateSIDRReqRcvd {
		t.Fatalf("request %+v", cb)
	}
	if err := B.a.SIDRReply(n.now, cb, &mad.SIDRRepFields{Status: mad.SIDRValid, QPN: 0x42, QKey: 0x01234567,
		PrivateData: make([]byte, mad.SIDRRepPrivateLen+1)}); !errors.Is(err, ErrPrivateData) {
		t.Fatal(err)
	}
	B.a.SIDRReply(n.now, cb, &mad.SIDRRepFields{Status: mad.SIDRValid, QPN: 0x42, QKey: 0x01234567, PrivateData: []byte("me")})
	n.flush()
	e = A.takeEvent(t, EventSIDRReply)
	r := e.Conn.SIDRRep
	if e.Conn != ca || r.Status != mad.SIDRValid || r.QPN != 0x42 || r.QKey != 0x01234567 || r.ServiceID != udSvc ||
		!bytes.HasPrefix(e.PrivateData, []byte("me")) {
		t.Fatalf("reply %+v", r)
	}
	if A.a.Conns()+B.a.Conns() != 0 || B.a.listeners[udSvc].pending != 0 {
		t.Fatal("exchange kept")
	}

	// Nobody listens: status "service ID not supported".
	A.a.SIDRRequest(n.now, addrB, &mad.SIDRReqFields{ServiceID: udSvc + 1})
	n.flush()
	if e := A.takeEvent(t, EventSIDRReply); e.Conn.SIDRRep.Status != mad.SIDRServiceIDNotSupported {
		t.Fatalf("%+v", e.Conn.SIDRRep)
	}
}

// Lost both ways, repeated: the request is resent and answered once per consumer
// answer; a late copy of the answer is dropped.
func TestSIDRLossAndDuplicates(t *testing.T) {
	n := newNet(t)
	A, B := n.A(), n.B()
	B.a.Listen(udSvc, 4)
	lost := map[mad.AttrID]bool{}
	n.deliver = func(p packet) int {
		a := mad.MAD(p.out.MAD[:]).Header().AttrID()
		if !lost[a] {
			lost[a] = true
			return 0
		}
		return 2
	}
	ca, _ := A.a.SIDRRequest(n.now, addrB, sidrReq(nil))
	n.flush()
	n.toNextDeadline()
	cb := B.takeEvent(t, EventSIDRRequest).Conn
	B.noEvents(t) // the duplicate made no second request
	B.a.SIDRReply(n.now, cb, &mad.SIDRRepFields{QPN: 7})
	n.flush() // lost
	n.toNextDeadline()
	cb = B.takeEvent(t, EventSIDRRequest).Conn // the resent request: the consumer answers again
	B.a.SIDRReply(n.now, cb, &mad.SIDRRepFields{QPN: 7})
	n.flush()
	if e := A.takeEvent(t, EventSIDRReply); e.Conn != ca || e.Conn.SIDRRep.QPN != 7 {
		t.Fatalf("%+v", e)
	}
	A.noEvents(t)
	if !errors.Is(n.errs[len(n.errs)-1], ErrUnknownConn) {
		t.Fatalf("the duplicate answer: %v", n.errs)
	}
}

func TestSIDRTimeout(t *testing.T) {
	n := newNet(t)
	n.deliver = func(packet) int { return 0 }
	A := n.A()
	ca, _ := A.a.SIDRRequest(n.now, addrB, sidrReq(nil))
	n.flush()
	n.runTimers()
	if e := A.takeEvent(t, EventTimeout); e.Conn != ca || n.sent[mad.AttrSIDRReq] != 4 || A.a.Conns() != 0 {
		t.Fatalf("%+v, %d sent", e, n.sent[mad.AttrSIDRReq])
	}
	// Abort refuses a pending passive exchange.
	n.deliver = nil
	n.B().a.Listen(udSvc, 4)
	A.a.SIDRRequest(n.now, addrB, sidrReq(nil))
	n.flush()
	n.B().a.Abort(n.now, n.B().takeEvent(t, EventSIDRRequest).Conn)
	n.flush()
	if e := A.takeEvent(t, EventSIDRReply); e.Conn.SIDRRep.Status != mad.SIDRRejected {
		t.Fatalf("%+v", e.Conn.SIDRRep)
	}
}

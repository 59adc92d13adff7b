package ibcm

import (
	"net/netip"
	"time"

	"github.com/goverbs/goverbs/cm/mad"
)

// Service ID Resolution (IBTA 12.11): a UD client asks which QP and Q_Key serve a
// service ID; one SIDR_REQ, one SIDR_REP, matched by the RequestID. The exchange
// lives in a Conn of its own, in StateSIDRReqSent or StateSIDRReqRcvd, for the
// timers and the consumer's answer; it is forgotten when answered.

// SIDRRequest sends a SIDR_REQ to the CM at peer. The agent fills in the
// RequestID; EventSIDRReply or EventTimeout follows.
func (a *Agent) SIDRRequest(now time.Time, peer netip.Addr, req *mad.SIDRReqFields) (*Conn, error) {
	if len(req.PrivateData) > mad.SIDRReqPrivateLen {
		return nil, ErrPrivateData
	}
	c := &Conn{Active: true, Peer: peer, LocalID: a.newLocalID(), ServiceID: req.ServiceID, SIDRReq: *req}
	f := &c.SIDRReq
	f.PrivateData = clonePD(req.PrivateData)
	f.RequestID = c.LocalID
	a.conns[c.LocalID] = c
	c.tid = a.tid(c.LocalID)
	a.send(c, peer, c.tid, mad.AttrSIDRReq, func(d []byte) { mad.SIDRReq(d).Encode(f) })
	c.state, c.maxRetries = StateSIDRReqSent, a.cfg.MaxRetries
	c.setTimer(now, a.roundTrip(a.cfg.ResponseTimeout))
	return c, nil
}

// SIDRReply answers a passive SIDR exchange with rep (the agent fills in the
// RequestID and service ID) and forgets it.
func (a *Agent) SIDRReply(now time.Time, c *Conn, rep *mad.SIDRRepFields) error {
	if c.state != StateSIDRReqRcvd {
		return ErrState
	}
	if len(rep.PrivateData) > mad.SIDRRepPrivateLen {
		return ErrPrivateData
	}
	c.SIDRRep = *rep
	f := &c.SIDRRep
	f.PrivateData = clonePD(rep.PrivateData)
	f.RequestID, f.ServiceID = c.RemoteID, c.ServiceID
	a.send(c, c.Peer, c.tid, mad.AttrSIDRRep, func(d []byte) { mad.SIDRRep(d).Encode(f) })
	a.forget(c)
	return nil
}

// sidrAnswer sends a SIDR_REP that no exchange keeps: a refusal.
func (a *Agent) sidrAnswer(to netip.Addr, tid uint64, r mad.SIDRReq, status mad.SIDRStatus) {
	a.send(nil, to, tid, mad.AttrSIDRRep, func(d []byte) {
		mad.SIDRRep(d).Encode(&mad.SIDRRepFields{RequestID: r.RequestID(), Status: status, ServiceID: r.ServiceID()})
	})
}

func (a *Agent) onSIDRReq(now time.Time, from netip.Addr, tid uint64, r mad.SIDRReq) error {
	if c, ok := a.byRemote[remoteKey{from, r.RequestID()}]; ok && c.state == StateSIDRReqRcvd {
		return nil // a repetition while the consumer decides
	}
	l, ok := a.listeners[r.ServiceID()]
	if !ok {
		a.sidrAnswer(from, tid, r, mad.SIDRServiceIDNotSupported)
		return ErrNoListener
	}
	if l.pending >= l.backlog {
		a.sidrAnswer(from, tid, r, mad.SIDRRejected)
		return ErrBacklogFull
	}
	c := &Conn{Peer: from, LocalID: a.newLocalID(), RemoteID: r.RequestID(), ServiceID: r.ServiceID(),
		SIDRReq: r.Fields(), tid: tid, listener: l, inBacklog: true, state: StateSIDRReqRcvd}
	c.SIDRReq.PrivateData = clonePD(c.SIDRReq.PrivateData)
	l.pending++
	a.conns[c.LocalID] = c
	a.byRemote[remoteKey{from, c.RemoteID}] = c
	c.deadline = now.Add(time.Duration(a.cfg.MaxRetries+1)*a.roundTrip(a.cfg.ResponseTimeout) + a.margin())
	a.event(EventSIDRRequest, c, 0, c.SIDRReq.PrivateData)
	return nil
}

func (a *Agent) onSIDRRep(now time.Time, from netip.Addr, r mad.SIDRRep) error {
	c, ok := a.conns[r.RequestID()]
	switch {
	case !ok || !c.Active || c.state != StateSIDRReqSent:
		return ErrUnknownConn // also a late copy of an answered request
	case c.Peer != from:
		return ErrPeerMismatch
	}
	c.SIDRRep = r.Fields()
	c.SIDRRep.PrivateData = clonePD(c.SIDRRep.PrivateData)
	a.forget(c)
	a.event(EventSIDRReply, c, 0, c.SIDRRep.PrivateData)
	return nil
}

package ibcm

import (
	"net/netip"
	"time"

	"github.com/goverbs/goverbs/cm/mad"
)

// onREQ: a new passive connection, or a duplicate, or a stale one (12.9.8).
func (a *Agent) onREQ(now time.Time, from netip.Addr, tid uint64, r mad.REQ) error {
	f := r.Fields()
	if c, ok := a.byRemote[remoteKey{from, f.LocalCommID}]; ok {
		switch c.state {
		case StateREQRcvd: // the consumer is slow: say so, once per repetition
			a.send(c, c.Peer, c.tid, mad.AttrMRA, func(d []byte) {
				mad.MRA(d).Encode(&mad.MRAFields{LocalCommID: c.LocalID, RemoteCommID: c.RemoteID,
					MessageMRAed: mad.RejectedREQ, ServiceTimeout: a.cfg.MRAServiceTimeout})
			})
			c.state = StateMRAREQSent
			c.deadline = now.Add(IBATime(a.cfg.MRAServiceTimeout) + IBATime(a.cfg.PacketLifetime) + a.margin())
		case StateMRAREQSent:
			a.resendLast(c)
		case StateTimeWait:
			a.reject(from, tid, c.LocalID, f.LocalCommID, mad.RejectedREQ, mad.ReasonStaleConnection, nil, nil)
		}
		return nil // other states: a late copy, which the REP or RTU already answers
	}
	if old, ok := a.byQPN[remoteKey{from, f.LocalQPN}]; ok {
		// A new REQ from a QP we think is connected: the peer lost the old
		// connection. Refuse the new one and tear the old one down (12.9.8.3.1).
		a.reject(from, tid, 0, f.LocalCommID, mad.RejectedREQ, mad.ReasonStaleConnection, nil, nil)
		if old.state == StateEstablished {
			a.Disconnect(now, old, nil)
		}
		return ErrStaleRequest
	}
	if f.TransportServiceType != mad.TransportRC && f.TransportServiceType != mad.TransportUC {
		a.reject(from, tid, 0, f.LocalCommID, mad.RejectedREQ, mad.ReasonInvalidTransportType, nil, nil)
		return ErrBadTransport
	}
	l, ok := a.listeners[f.ServiceID]
	if _, reserved := a.reserved[f.ServiceID]; !ok && reserved {
		a.park(now, from, tid, r, &f)
		return nil
	}
	if !ok {
		a.reject(from, tid, 0, f.LocalCommID, mad.RejectedREQ, mad.ReasonInvalidServiceID, nil, nil)
		return ErrNoListener
	}
	if l.pending >= l.backlog {
		a.reject(from, tid, 0, f.LocalCommID, mad.RejectedREQ, mad.ReasonNoResources, nil, nil)
		return ErrBacklogFull
	}
	c := &Conn{Peer: from, LocalID: a.newLocalID(), RemoteID: f.LocalCommID, ServiceID: f.ServiceID,
		RemoteQPN: f.LocalQPN, hasRemoteQPN: true, REQ: f, tid: tid, listener: l, inBacklog: true,
		state: StateREQRcvd}
	c.REQ.PrivateData = clonePD(f.PrivateData)
	l.pending++
	a.conns[c.LocalID] = c
	a.byRemote[remoteKey{from, c.RemoteID}] = c
	a.byQPN[remoteKey{from, c.RemoteQPN}] = c
	// The active side gives up after its retries; so do we, a little
	// later, so that its REJ (timeout) comes first when it can.
	patience := time.Duration(f.MaxCMRetries+1) * a.roundTrip(f.RemoteCMResponseTimeout)
	c.deadline = now.Add(patience + a.margin())
	a.event(EventRequest, c, 0, c.REQ.PrivateData)
	return nil
}

func (a *Agent) onREP(now time.Time, from netip.Addr, tid uint64, r mad.REP) error {
	c, err := a.lookup(from, r.RemoteCommID(), r.LocalCommID())
	if err != nil {
		return err
	}
	switch c.state {
	case StateREQSent, StateMRAREQRcvd:
		c.REP = r.Fields()
		c.REP.PrivateData = clonePD(c.REP.PrivateData)
		c.RemoteID, c.RemoteQPN, c.hasRemoteQPN = c.REP.LocalCommID, c.REP.LocalQPN, true
		a.byRemote[remoteKey{from, c.RemoteID}] = c
		if _, taken := a.byQPN[remoteKey{from, c.RemoteQPN}]; !taken {
			a.byQPN[remoteKey{from, c.RemoteQPN}] = c
		}
		c.state = StateREPRcvd
		// The passive side retransmits REP and then gives up; so do we.
		c.deadline = now.Add(time.Duration(a.cfg.MaxRetries+1)*a.roundTrip(c.REQ.LocalCMResponseTimeout) + a.margin())
		a.event(EventReply, c, 0, c.REP.PrivateData)
		return nil
	case StateREPRcvd:
		return nil // the consumer has not answered yet; the next copy will find the RTU
	case StateEstablished:
		a.resendLast(c) // our RTU was lost (12.9.6: a repeated REP is answered with RTU)
		return nil
	}
	return ErrUnexpected
}

func (a *Agent) onRTU(now time.Time, from netip.Addr, r mad.RTU) error {
	c, err := a.lookup(from, r.RemoteCommID(), r.LocalCommID())
	if err != nil {
		return err
	}
	switch c.state {
	case StateREPSent, StateMRAREPRcvd:
		c.state, c.deadline = StateEstablished, time.Time{}
		a.event(EventEstablished, c, 0, r.PrivateData())
		return nil
	case StateEstablished:
		return nil
	}
	return ErrUnexpected
}

func (a *Agent) onREJ(now time.Time, from netip.Addr, r mad.REJ) error {
	var c *Conn
	var err error
	if r.RemoteCommID() == 0 {
		// The active side rejects its own REQ (it timed out or gave up)
		// before it learnt our ID: find it by its own (Linux's cm.c looks
		// up the same way).
		var ok bool
		if c, ok = a.byRemote[remoteKey{from, r.LocalCommID()}]; !ok {
			return ErrUnknownConn
		}
	} else if c, err = a.lookup(from, r.RemoteCommID(), r.LocalCommID()); err != nil {
		return err
	}
	reason := r.Reason()
	switch c.state {
	case StateREQSent, StateMRAREQRcvd:
		if reason == mad.ReasonStaleConnection {
			// The peer still holds a connection from our QPN; wait until it
			// has drained before the QPN is used again (12.9.8.3.1).
			a.enterTimeWait(now, c)
		} else {
			a.forget(c)
		}
		a.event(EventRejected, c, reason, r.PrivateData())
		return nil
	case StateREQRcvd, StateMRAREQSent, StateREPSent, StateMRAREPRcvd, StateREPRcvd:
		a.forget(c)
		a.event(EventRejected, c, reason, r.PrivateData())
		return nil
	case StateEstablished, StateDREQSent:
		if reason == mad.ReasonStaleConnection {
			a.enterTimeWait(now, c)
			a.event(EventDisconnected, c, reason, nil)
			return nil
		}
	}
	return ErrUnexpected
}

func (a *Agent) onMRA(now time.Time, from netip.Addr, r mad.MRA) error {
	c, err := a.lookup(from, r.RemoteCommID(), r.LocalCommID())
	if err != nil {
		return err
	}
	wait := IBATime(r.ServiceTimeout()) + IBATime(a.cfg.PacketLifetime)
	switch {
	case r.MessageMRAed() == mad.RejectedREQ && (c.state == StateREQSent || c.state == StateMRAREQRcvd):
		if c.RemoteID == 0 {
			c.RemoteID = r.LocalCommID()
		}
		c.state, c.deadline = StateMRAREQRcvd, now.Add(wait)
		return nil
	case r.MessageMRAed() == mad.RejectedREP && (c.state == StateREPSent || c.state == StateMRAREPRcvd):
		c.state, c.deadline = StateMRAREPRcvd, now.Add(wait)
		return nil
	}
	return ErrUnexpected
}

func (a *Agent) onDREQ(now time.Time, from netip.Addr, tid uint64, r mad.DREQ) error {
	drep := func(c *Conn, localID, remoteID uint32) {
		a.send(c, from, tid, mad.AttrDREP, func(d []byte) {
			mad.DREP(d).Encode(&mad.DREPFields{LocalCommID: localID, RemoteCommID: remoteID})
		})
	}
	c, err := a.lookup(from, r.RemoteCommID(), r.LocalCommID())
	if err == ErrUnknownConn {
		// The connection is already gone here; answer so that the peer
		// need not retry (Linux's cm.c does the same).
		drep(nil, r.RemoteCommID(), r.LocalCommID())
		return err
	}
	if err != nil {
		return err
	}
	if r.RemoteQPN() != c.LocalQPN {
		return ErrWrongQPN
	}
	switch c.state {
	case StateREPSent, StateMRAREPRcvd:
		// The RTU was lost, but the peer only disconnects what it thinks
		// established: it was.
		a.event(EventEstablished, c, 0, nil)
		fallthrough
	case StateEstablished, StateDREQSent:
		drep(c, c.LocalID, c.RemoteID)
		a.enterTimeWait(now, c)
		a.event(EventDisconnected, c, 0, r.PrivateData())
		return nil
	case StateTimeWait:
		drep(nil, c.LocalID, c.RemoteID)
		return nil
	}
	return ErrUnexpected
}

func (a *Agent) onDREP(now time.Time, from netip.Addr, r mad.DREP) error {
	c, err := a.lookup(from, r.RemoteCommID(), r.LocalCommID())
	if err != nil {
		return err
	}
	switch c.state {
	case StateDREQSent:
		a.enterTimeWait(now, c)
		a.event(EventDisconnected, c, 0, r.PrivateData())
		return nil
	case StateTimeWait:
		return nil
	}
	return ErrUnexpected
}

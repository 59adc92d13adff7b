package ibcm

import (
	"bytes"
	"encoding/binary"
	"net/netip"
	"time"

	"github.com/goverbs/goverbs/cm/mad"
)

// Conn is one connection's CM state. Its exported fields are the agent's:
// the consumer reads them and never writes them, but for Context.
type Conn struct {
	LocalID   uint32 // our communication ID
	RemoteID  uint32 // the peer's, 0 until known
	Peer      netip.Addr
	Active    bool   // we sent the REQ
	ServiceID uint64 // the REQ's
	LocalQPN  uint32
	RemoteQPN uint32
	REQ       mad.REQFields     // the REQ sent or received; PrivateData is a copy
	REP       mad.REPFields     // the REP sent or received, once there is one
	SIDRReq   mad.SIDRReqFields // a SIDR exchange's request (PrivateData a copy)
	SIDRRep   mad.SIDRRepFields // and its reply
	Context   any               // the consumer's

	state        State
	hasRemoteQPN bool
	tid          uint64 // the handshake's TransactionID (the REQ's)
	last         [mad.Len]byte
	deadline     time.Time
	retries      uint8
	maxRetries   uint8
	retryTimeout time.Duration
	listener     *listener
	inBacklog    bool
}

// State is the connection's state.
func (c *Conn) State() State { return c.state }

// Deadline is when the connection's timer fires (zero if none runs).
func (c *Conn) Deadline() time.Time { return c.deadline }

func (c *Conn) leaveBacklog() {
	if c.inBacklog {
		c.inBacklog = false
		if c.listener != nil {
			c.listener.pending--
		}
	}
}

func (c *Conn) setTimer(now time.Time, d time.Duration) {
	c.retryTimeout, c.retries, c.deadline = d, 0, now.Add(d)
}

func clonePD(p []byte) []byte { return bytes.Clone(p) }

// roundTrip is how long a sender waits for an answer from a peer that takes
// respExp to respond: the response time and the packet's lifetime both ways
// (12.7.3; Linux's cm.c adds them the same way).
func (a *Agent) roundTrip(respExp uint8) time.Duration {
	return 2*IBATime(a.cfg.PacketLifetime) + IBATime(respExp)
}

// margin is how much longer a side waits for the other side's give-up than
// the other side takes to give up: a packet's lifetime, both ways.
func (a *Agent) margin() time.Duration { return 2 * IBATime(a.cfg.PacketLifetime) }

// Connect starts an active connection to the CM at peer with the REQ in
// req. The agent fills in the communication ID, the CA GUID, both CM
// response timeouts and the CM retry count; the rest is the caller's.
func (a *Agent) Connect(now time.Time, peer netip.Addr, req *mad.REQFields) (*Conn, error) {
	if len(req.PrivateData) > mad.REQPrivateLen {
		return nil, ErrPrivateData
	}
	c := &Conn{Active: true, Peer: peer, LocalID: a.newLocalID(), REQ: *req, ServiceID: req.ServiceID,
		LocalQPN: req.LocalQPN}
	f := &c.REQ
	f.PrivateData = clonePD(req.PrivateData)
	f.LocalCommID, f.LocalCAGUID = c.LocalID, a.cfg.CAGUID
	f.RemoteCMResponseTimeout, f.LocalCMResponseTimeout = a.cfg.ResponseTimeout, a.cfg.ResponseTimeout
	f.MaxCMRetries = min(a.cfg.MaxRetries, 15)
	a.conns[c.LocalID] = c
	c.tid = a.tid(c.LocalID)
	a.send(c, peer, c.tid, mad.AttrREQ, func(d []byte) { mad.REQ(d).Encode(f) })
	c.state, c.maxRetries = StateREQSent, a.cfg.MaxRetries
	c.setTimer(now, a.roundTrip(f.RemoteCMResponseTimeout))
	return c, nil
}

// Accept answers a passive connection's REQ with the REP in rep, which the
// caller sends with its QP ready to receive (in RTR or RTS). The agent fills
// in the communication IDs and the CA GUID.
func (a *Agent) Accept(now time.Time, c *Conn, rep *mad.REPFields) error {
	if c.state != StateREQRcvd && c.state != StateMRAREQSent {
		return ErrState
	}
	if len(rep.PrivateData) > mad.REPPrivateLen {
		return ErrPrivateData
	}
	c.REP = *rep
	f := &c.REP
	f.PrivateData = clonePD(rep.PrivateData)
	f.LocalCommID, f.RemoteCommID, f.LocalCAGUID = c.LocalID, c.RemoteID, a.cfg.CAGUID
	c.LocalQPN = f.LocalQPN
	c.leaveBacklog()
	a.send(c, c.Peer, c.tid, mad.AttrREP, func(d []byte) { mad.REP(d).Encode(f) })
	c.state, c.maxRetries = StateREPSent, a.cfg.MaxRetries
	c.setTimer(now, a.roundTrip(c.REQ.LocalCMResponseTimeout))
	return nil
}

// RTU completes an active connection after its REP: the caller's QP is in
// RTS. The connection is established.
func (a *Agent) RTU(now time.Time, c *Conn, privateData []byte) error {
	if c.state != StateREPRcvd {
		return ErrState
	}
	if len(privateData) > mad.RTUPrivateLen {
		return ErrPrivateData
	}
	a.send(c, c.Peer, c.tid, mad.AttrRTU, func(d []byte) {
		mad.RTU(d).Encode(&mad.RTUFields{LocalCommID: c.LocalID, RemoteCommID: c.RemoteID, PrivateData: privateData})
	})
	c.state, c.deadline = StateEstablished, time.Time{}
	return nil
}

// Establish is the passive side's answer to the QP's communication
// established event: data arrived before the RTU, which is as good.
func (a *Agent) Establish(now time.Time, c *Conn) error {
	if c.state != StateREPSent && c.state != StateMRAREPRcvd {
		return ErrState
	}
	c.state, c.deadline = StateEstablished, time.Time{}
	return nil
}

// Reject refuses a passive connection's REQ or an active connection's REP
// with reason and private data. The connection is forgotten.
func (a *Agent) Reject(now time.Time, c *Conn, reason mad.Reason, privateData []byte) error {
	if len(privateData) > mad.REJPrivateLen {
		return ErrPrivateData
	}
	var msg mad.Rejected
	switch c.state {
	case StateREQRcvd, StateMRAREQSent:
		msg = mad.RejectedREQ
	case StateREPRcvd:
		msg = mad.RejectedREP
	default:
		return ErrState
	}
	a.reject(c.Peer, c.tid, c.LocalID, c.RemoteID, msg, reason, nil, privateData)
	a.forget(c)
	return nil
}

// Disconnect sends a DREQ on an established connection. EventDisconnected
// follows when the DREP arrives or the retries run out.
func (a *Agent) Disconnect(now time.Time, c *Conn, privateData []byte) error {
	if c.state != StateEstablished {
		return ErrState
	}
	if len(privateData) > mad.DREQPrivateLen {
		return ErrPrivateData
	}
	a.send(c, c.Peer, a.tid(c.LocalID), mad.AttrDREQ, func(d []byte) {
		mad.DREQ(d).Encode(&mad.DREQFields{LocalCommID: c.LocalID, RemoteCommID: c.RemoteID,
			RemoteQPN: c.RemoteQPN, PrivateData: privateData})
	})
	c.state, c.maxRetries = StateDREQSent, a.cfg.MaxRetries
	c.setTimer(now, a.roundTrip(a.cfg.ResponseTimeout))
	return nil
}

// Abort ends c whatever its state, as Linux's ib_destroy_cm_id does: a
// handshake in progress is rejected (timeout for our own REQ, consumer
// reject otherwise), an established connection is disconnected. It reports
// no event; a disconnected connection still passes through TimeWait.
func (a *Agent) Abort(now time.Time, c *Conn) {
	switch c.state {
	case StateREQSent, StateMRAREQRcvd:
		a.rejectTimeout(c, mad.RejectedREQ)
		a.forget(c)
	case StateREQRcvd, StateMRAREQSent:
		a.reject(c.Peer, c.tid, c.LocalID, c.RemoteID, mad.RejectedREQ, mad.ReasonConsumerReject, nil, nil)
		a.forget(c)
	case StateREPRcvd, StateREPSent, StateMRAREPRcvd:
		a.reject(c.Peer, c.tid, c.LocalID, c.RemoteID, mad.RejectedREP, mad.ReasonConsumerReject, nil, nil)
		a.forget(c)
	case StateEstablished:
		a.Disconnect(now, c, nil)
	case StateSIDRReqSent:
		a.forget(c)
	case StateSIDRReqRcvd:
		a.SIDRReply(now, c, &mad.SIDRRepFields{Status: mad.SIDRRejected})
	}
}

// reject sends a REJ that no connection keeps.
func (a *Agent) reject(to netip.Addr, tid uint64, localID, remoteID uint32, msg mad.Rejected,
	reason mad.Reason, ari, privateData []byte) {
	a.send(nil, to, tid, mad.AttrREJ, func(d []byte) {
		mad.REJ(d).Encode(&mad.REJFields{LocalCommID: localID, RemoteCommID: remoteID, MessageRejected: msg,
			RejectInfoLen: uint8(len(ari)), Reason: reason, ARI: ari, PrivateData: privateData})
	})
}

// rejectTimeout sends the REJ that ends a handshake the peer never
// answered; its ARI is our CA GUID (12.6.7.2, reason 4).
func (a *Agent) rejectTimeout(c *Conn, msg mad.Rejected) {
	var guid [8]byte
	binary.BigEndian.PutUint64(guid[:], a.cfg.CAGUID)
	a.reject(c.Peer, c.tid, c.LocalID, c.RemoteID, msg, mad.ReasonTimeout, guid[:], nil)
}

// enterTimeWait holds c's IDs until stray MADs have drained. Its QPN no
// longer makes a REQ stale: a peer whose QPNs repeat soon (a software
// device that numbers each process's QPs from the same start; goverbs
// devices start at a random one) may reconnect from the same QPN at once.
// Linux's rdma_cm rejects that REQ as stale until the timewait ends. The
// REQ's new QP and ours cannot take each other's stray packets: ours is a
// new QP too.
func (a *Agent) enterTimeWait(now time.Time, c *Conn) {
	if k := (remoteKey{c.Peer, c.RemoteQPN}); c.hasRemoteQPN && a.byQPN[k] == c {
		delete(a.byQPN, k)
	}
	c.state, c.maxRetries = StateTimeWait, 0
	c.setTimer(now, 2*IBATime(a.cfg.PacketLifetime))
}

// expire runs c's timer.
func (a *Agent) expire(now time.Time, c *Conn) {
	switch c.state {
	case StateREQSent, StateREPSent, StateDREQSent, StateSIDRReqSent:
		if c.retries < c.maxRetries {
			c.retries++
			c.deadline = now.Add(c.retryTimeout)
			a.resendLast(c)
			return
		}
	}
	switch c.state {
	case StateREQSent, StateMRAREQRcvd, StateREQRcvd, StateMRAREQSent:
		a.rejectTimeout(c, mad.RejectedREQ)
		a.forget(c)
		a.event(EventTimeout, c, mad.ReasonTimeout, nil)
	case StateREPSent, StateMRAREPRcvd, StateREPRcvd:
		a.rejectTimeout(c, mad.RejectedREP)
		a.forget(c)
		a.event(EventTimeout, c, mad.ReasonTimeout, nil)
	case StateDREQSent:
		a.enterTimeWait(now, c)
		a.event(EventDisconnected, c, mad.ReasonTimeout, nil)
	case StateTimeWait:
		a.forget(c)
		a.event(EventTimeWaitExit, c, 0, nil)
	case StateSIDRReqSent, StateSIDRReqRcvd:
		a.forget(c)
		a.event(EventTimeout, c, mad.ReasonTimeout, nil)
	default:
		c.deadline = time.Time{}
	}
}

package cm

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"time"

	"github.com/goverbs/goverbs/cm/internal/ibcm"
	"github.com/goverbs/goverbs/cm/mad"
	"github.com/goverbs/goverbs/verbs"
)

// UD through the CM: a client resolves a service to the QP and Q_Key that serve it
// (SIDR, IBTA 12.11), as rdma_connect does on a UD id of rdma_cm's UDP port space.

// UDPQKey is the Q_Key of every UD QP in rdma_cm's UDP port space
// (RDMA_UDP_QKEY); Linux's rdma_cm refuses a SIDR_REP with another.
const UDPQKey = 0x01234567

// UDDest is a UD service resolved: where to send and with which Q_Key.
type UDDest struct {
	Addr        netip.AddrPort
	QPN         uint32
	QKey        uint32
	AH          *verbs.AH // to Addr, made in the Param's PD (nil without one)
	PrivateData []byte    // the server's, zero-padded to 136 bytes
}

// SIDRError is the server's refusal of a UD resolution: its SIDR_REP's status.
// errors.Is(err, ErrRejected) holds.
type SIDRError struct {
	Status      mad.SIDRStatus
	PrivateData []byte
}

func (e *SIDRError) Error() string {
	return fmt.Sprintf("cm: UD service resolution refused: %v (%d)", e.Status, uint8(e.Status))
}

// Is makes errors.Is(err, ErrRejected) true.
func (e *SIDRError) Is(target error) bool { return target == ErrRejected }

// ListenUD takes UD resolution requests (SIDR_REQ) for port of rdma_cm's UDP port
// space; Accept returns them as Requests with Transport QPTypeUD, answered with
// AcceptUD or Reject.
func (a *Agent) ListenUD(port uint16, backlog int) (*Listener, error) {
	return a.listen(mad.PortSpaceUDP, port, backlog)
}

// ReadyUD brings a UD QP in RESET or INIT to RTS with rdma_cm's UDP Q_Key, as
// rdma_cm does for the QP of a UD id.
func ReadyUD(qp *verbs.QP) error {
	if qp.Type() != verbs.QPTypeUD {
		return ErrQP
	}
	switch qp.State() {
	case verbs.QPStateReset:
		if err := qp.Modify(&verbs.QPAttr{State: verbs.QPStateInit, Port: 1, QKey: UDPQKey},
			verbs.QPAttrState|verbs.QPAttrPKeyIndex|verbs.QPAttrPort|verbs.QPAttrQKey); err != nil {
			return err
		}
		fallthrough
	case verbs.QPStateInit:
		if err := qp.Modify(&verbs.QPAttr{State: verbs.QPStateRTR}, verbs.QPAttrState); err != nil {
			return err
		}
		fallthrough
	case verbs.QPStateRTR:
		return qp.Modify(&verbs.QPAttr{State: verbs.QPStateRTS}, verbs.QPAttrState|verbs.QPAttrSQPSN)
	case verbs.QPStateRTS:
		return nil
	}
	return ErrQP
}

// ResolveUD asks the CM at raddr which UD QP serves raddr's port of the UDP port
// space. p.QP, when set, is a UD QP brought to RTS first (ReadyUD); the AH is made in
// its PD, or in p.PD. p.PrivateData (at most 180 bytes: rdma_cm's header takes 36 of
// the SIDR_REQ's 216) goes to the server.
func (a *Agent) ResolveUD(ctx context.Context, raddr netip.AddrPort, p *Param) (*UDDest, error) {
	if a.k != nil {
		return a.kernelResolveUD(ctx, raddr, p)
	}
	if len(p.PrivateData) > mad.UDPrivateLen {
		return nil, ErrPrivateDataTooLong
	}
	raddr = netip.AddrPortFrom(raddr.Addr().Unmap(), raddr.Port())
	pd := p.PD
	if p.QP != nil {
		if err := ReadyUD(p.QP); err != nil {
			return nil, err
		}
		pd = p.QP.PD()
	}
	c := newConn(a)
	c.local = netip.AddrPortFrom(a.addr, ephemeralPort())
	c.remote = raddr
	priv := make([]byte, mad.SIDRReqPrivateLen)
	mad.CMAHeader(priv).Encode(&mad.CMAHeaderFields{Port: c.local.Port(), Src: a.addr, Dst: raddr.Addr()})
	copy(priv[mad.CMAHeaderLen:], p.PrivateData)
	a.track(c, true)
	defer a.track(c, false)
	err := a.do(func(now time.Time) error {
		if a.closed {
			return ErrClosed
		}
		ic, err := a.cm.SIDRRequest(now, raddr.Addr(), &mad.SIDRReqFields{PKey: mad.PKeyDefault,
			ServiceID: mad.ServiceID(mad.PortSpaceUDP, raddr.Port()), PrivateData: priv})
		if err == nil {
			ic.Context, c.ic = c, ic
		}
		return err
	})
	if err != nil {
		return nil, err
	}
	e, err := c.wait(ctx, ibcm.EventSIDRReply)
	if err != nil {
		return nil, err
	}
	rep := e.Conn.SIDRRep
	if rep.Status != mad.SIDRValid {
		return nil, &SIDRError{Status: rep.Status, PrivateData: e.PrivateData}
	}
	d := &UDDest{Addr: raddr, QPN: rep.QPN, QKey: rep.QKey, PrivateData: e.PrivateData}
	if pd != nil {
		if d.AH, err = pd.CreateAH(verbs.AHAttr{DGID: verbs.GIDFromAddr(raddr.Addr()), Port: 1, HopLimit: hopLimit,
			TrafficClass: p.TOS}); err != nil {
			return nil, err
		}
	}
	return d, nil
}

// newUDRequest makes the Request for a SIDR_REQ the CM took for l.
func (a *Agent) newUDRequest(e ibcm.Event, l *Listener) (*Request, error) {
	f := &e.Conn.SIDRReq
	h, err := mad.ParseCMAHeader(f.PrivateData)
	if err != nil {
		return nil, err
	}
	c := a.passiveConn(e.Conn, h, l, f.PrivateData)
	return &Request{c: c, Remote: c.remote, Local: c.local, PrivateData: c.privateData,
		Transport: verbs.QPTypeUD}, nil
}

// AcceptUD answers a UD request with p.QP, a UD QP brought to RTS first (ReadyUD),
// and p.PrivateData (at most 136 bytes): the client learns the QP's number and Q_Key.
func (r *Request) AcceptUD(p *Param) error {
	if r.Transport != verbs.QPTypeUD || p.QP == nil {
		return ErrQP
	}
	if len(p.PrivateData) > mad.SIDRRepPrivateLen {
		return ErrPrivateDataTooLong
	}
	if !r.answered.CompareAndSwap(false, true) {
		return ErrAnswered
	}
	if r.c.kc != nil {
		return r.kernelAcceptUD(p)
	}
	c, a := r.c, r.c.a
	defer a.track(c, false)
	if err := ReadyUD(p.QP); err != nil {
		r.replyUD(mad.SIDRNoQP, nil)
		return err
	}
	rep := &mad.SIDRRepFields{Status: mad.SIDRValid, QPN: p.QP.QPN(), QKey: p.QP.Query().QKey,
		PrivateData: p.PrivateData}
	if err := a.do(func(now time.Time) error { return a.cm.SIDRReply(now, c.ic, rep) }); err != nil {
		return c.pendingErr(ErrTimeout)
	}
	return nil
}

func (r *Request) rejectUD(privateData []byte) error {
	if len(privateData) > mad.SIDRRepPrivateLen {
		return ErrPrivateDataTooLong
	}
	if !r.answered.CompareAndSwap(false, true) {
		return ErrAnswered
	}
	if r.c.kc != nil {
		return r.kernelRejectUD(privateData)
	}
	defer r.c.a.track(r.c, false)
	return r.replyUD(mad.SIDRRejected, privateData)
}

func (r *Request) replyUD(status mad.SIDRStatus, privateData []byte) error {
	a := r.c.a
	err := a.do(func(now time.Time) error {
		return a.cm.SIDRReply(now, r.c.ic, &mad.SIDRRepFields{Status: status, PrivateData: privateData})
	})
	if errors.Is(err, ibcm.ErrState) {
		return r.c.pendingErr(ErrTimeout)
	}
	return err
}

package cm

import (
	"context"
	"math/rand/v2"
	"net/netip"
	"time"

	"github.com/goverbs/goverbs/cm/internal/ibcm"
	"github.com/goverbs/goverbs/cm/mad"
	"github.com/goverbs/goverbs/verbs"
)

// Dial connects to the listener at raddr (rdma_resolve_addr,
// rdma_resolve_route and rdma_connect in one call): it sends a REQ for
// rdma_cm's TCP port space, brings the QP to RTR and RTS with the peer's
// answer, and sends RTU. On success the connection is established and its
// QP in RTS. The peer's refusal is a *RejectError; silence ends in
// ErrTimeout after the CM's retries, or earlier when ctx is done (the
// handshake is then abandoned with a REJ).
func (a *Agent) Dial(ctx context.Context, raddr netip.AddrPort, p *Param) (*Conn, error) {
	if len(p.PrivateData) > mad.ConnectPrivateLen {
		return nil, ErrPrivateDataTooLong
	}
	if err := p.check(); err != nil {
		return nil, err
	}
	raddr = netip.AddrPortFrom(raddr.Addr().Unmap(), raddr.Port())
	qp, own, err := p.qp(a)
	if err != nil {
		return nil, err
	}
	c := newConn(a)
	c.qp, c.ownQP = qp, own
	c.remote = raddr
	if a.k != nil {
		return a.kernelDial(ctx, c, p)
	}
	c.local = netip.AddrPortFrom(a.addr, ephemeralPort())
	if err := toInit(qp); err != nil {
		return nil, c.abandon(err)
	}
	pd := make([]byte, mad.REQPrivateLen)
	mad.CMAHeader(pd).Encode(&mad.CMAHeaderFields{Port: c.local.Port(), Src: a.addr, Dst: raddr.Addr()})
	copy(pd[mad.CMAHeaderLen:], p.PrivateData)
	// The REQ's Starting PSN is the one this side expects to receive first;
	// the REP's is the one it sends first. That is how Linux's ib_cm reads
	// them (cm_rep_handler takes sq_psn from the REP), so rxe and every
	// RNIC driven by rdma_cm start their send queues there.
	psn := rand.Uint32() & 0xffffff
	timeout := orDefault(p.ACKTimeout, localACKTimeout)
	req := mad.REQFields{
		ServiceID: mad.ServiceID(mad.PortSpaceTCP, raddr.Port()), LocalQPN: qp.QPN(),
		ResponderResources: p.ResponderResources, InitiatorDepth: p.InitiatorDepth,
		TransportServiceType: transportOf(qp), StartingPSN: psn, RetryCount: retryCount(p.RetryCount),
		PKey: mad.PKeyDefault, PathMTU: uint8(a.mtu), RNRRetryCount: retryCount(p.RNRRetryCount),
		SRQ: p.QPInit.SRQ != nil,
		Primary: mad.Path{LocalLID: 0xffff, RemoteLID: 0xffff, LocalGID: a.gid,
			RemoteGID: verbs.GIDFromAddr(raddr.Addr()), HopLimit: hopLimit, LocalACKTimeout: timeout, TrafficClass: p.TOS},
		PrivateData: pd,
	}
	a.track(c, true)
	err = a.do(func(now time.Time) error {
		if a.closed {
			return ErrClosed
		}
		ic, err := a.cm.Connect(now, raddr.Addr(), &req)
		if err == nil {
			ic.Context, c.ic = c, ic
		}
		return err
	})
	if err != nil {
		return nil, c.abandon(err)
	}
	e, err := c.wait(ctx, ibcm.EventReply)
	if err != nil {
		return nil, c.abandon(err)
	}
	rep := e.Conn.REP
	c.privateData = e.PrivateData
	err = toRTR(qp, rtr{peer: req.Primary.RemoteGID, tc: p.TOS, mtu: a.mtu, destQPN: rep.LocalQPN, rqPSN: psn,
		maxDestRdAtomic: rep.InitiatorDepth, minRNRTimer: orDefault(p.MinRNRTimer, 12)})
	if err == nil {
		err = toRTS(qp, rts{sqPSN: rep.StartingPSN, timeout: timeout, retry: req.RetryCount,
			rnrRetry: rep.RNRRetryCount, maxRdAtomic: rep.ResponderResources})
	}
	if err != nil {
		a.do(func(now time.Time) error { return a.cm.Reject(now, c.ic, mad.ReasonConsumerReject, nil) })
		return nil, c.abandon(err)
	}
	if err := a.do(func(now time.Time) error { return a.cm.RTU(now, c.ic, nil) }); err != nil {
		return nil, c.abandon(ErrTimeout) // the REP's sender gave up meanwhile
	}
	return c, nil
}

// ephemeralPort is a port from the range Linux gives ephemeral ports: the
// active side's port in its rdma_cm header, and a Listen's on port 0.
func ephemeralPort() uint16 { return uint16(32768 + rand.IntN(61000-32768)) }

// abandon forgets a connection that never came up and returns err.
func (c *Conn) abandon(err error) error {
	c.a.track(c, false)
	c.mu.Lock()
	qp, own := c.qp, c.ownQP
	c.qp, c.ownQP = nil, false
	c.mu.Unlock()
	if own {
		qp.Close()
	}
	return err
}

package cm

import (
	"context"
	"errors"
	"math/rand/v2"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/goverbs/goverbs/cm/internal/ibcm"
	"github.com/goverbs/goverbs/cm/mad"
	"github.com/goverbs/goverbs/verbs"
)

// ErrPortInUse: another Listener of the agent has the port.
var ErrPortInUse = errors.New("cm: port already listened on")

// DefaultBacklog is the backlog of a Listen that asks for none.
const DefaultBacklog = 64

// Listener takes connection requests for one port of rdma_cm's TCP port
// space (rdma_bind_addr and rdma_listen).
type Listener struct {
	a      *Agent
	space  mad.PortSpace
	port   uint16
	reqs   chan *Request
	closed chan struct{}
	once   sync.Once
	ktok   uint64 // a kernel agent's: the listening rdma_cm id
}

// Listen starts taking REQs for port (0 picks a free one). At most
// backlog requests wait for Accept and an answer at once; more are
// rejected with reason "no resources" before the program sees them.
func (a *Agent) Listen(port uint16, backlog int) (*Listener, error) {
	return a.listen(mad.PortSpaceTCP, port, backlog)
}

func (a *Agent) listen(space mad.PortSpace, port uint16, backlog int) (*Listener, error) {
	if a.k != nil {
		return a.kernelListen(space, port, backlog)
	}
	if backlog <= 0 {
		backlog = DefaultBacklog
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.closed {
		return nil, ErrClosed
	}
	for port == 0 {
		if p := ephemeralPort(); a.listeners[mad.ServiceID(space, p)] == nil {
			port = p
		}
	}
	sid := mad.ServiceID(space, port)
	if a.listeners[sid] != nil {
		return nil, ErrPortInUse
	}
	if err := a.cm.Listen(sid, backlog); err != nil {
		return nil, ErrPortInUse
	}
	l := &Listener{a: a, space: space, port: port, reqs: make(chan *Request, backlog), closed: make(chan struct{})}
	a.listeners[sid] = l
	return l, nil
}

// Addr is the address and port listened on.
func (l *Listener) Addr() netip.AddrPort { return netip.AddrPortFrom(l.a.addr, l.port) }

// Accept waits for the next connection request.
func (l *Listener) Accept(ctx context.Context) (*Request, error) {
	select {
	case r := <-l.reqs:
		return r, nil
	case <-l.closed:
		return nil, ErrClosed
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// Close stops listening and rejects the requests not yet taken.
// Connections already accepted stay up.
func (l *Listener) Close() error {
	l.once.Do(func() {
		a := l.a
		if a.k != nil {
			l.kernelClose()
		} else {
			a.mu.Lock()
			sid := mad.ServiceID(l.space, l.port)
			delete(a.listeners, sid)
			a.cm.Unlisten(sid)
			a.mu.Unlock()
		}
		close(l.closed)
		for {
			select {
			case r := <-l.reqs:
				r.Reject(nil)
			default:
				return
			}
		}
	})
	return nil
}

// Request is a peer's connection request, waiting for Accept or Reject
// (rdma_cm's RDMA_CM_EVENT_CONNECT_REQUEST).
type Request struct {
	c        *Conn
	answered atomic.Bool

	// Remote and Local are the addresses and ports from rdma_cm's header.
	Remote netip.AddrPort
	Local  netip.AddrPort
	// PrivateData is the peer's, after rdma_cm's header: 56 bytes,
	// zero-padded.
	PrivateData []byte
	// What the peer's QP asks for: READs and atomics it accepts and
	// issues, its retry counts, the transport, the path MTU.
	ResponderResources uint8
	InitiatorDepth     uint8
	RetryCount         uint8
	RNRRetryCount      uint8
	Transport          verbs.QPType
	PathMTU            verbs.MTU
	// QPN is the peer QP's; StartingPSN is the REQ's, the PSN the peer
	// expects this side's first request to carry.
	QPN         uint32
	StartingPSN uint32
}

// newPassive makes the Request for a REQ the CM took for l.
func (a *Agent) newPassive(e ibcm.Event, l *Listener) (*Request, error) {
	if l == nil {
		return nil, ErrClosed
	}
	ic := e.Conn
	if e.Kind == ibcm.EventSIDRRequest {
		return a.newUDRequest(e, l)
	}
	f := &ic.REQ
	h, err := mad.ParseCMAHeader(f.PrivateData)
	if err != nil {
		return nil, err
	}
	c := a.passiveConn(ic, h, l, f.PrivateData)
	t := verbs.QPTypeRC
	if f.TransportServiceType == mad.TransportUC {
		t = verbs.QPTypeUC
	}
	return &Request{c: c, Remote: c.remote, Local: c.local, PrivateData: c.privateData,
		ResponderResources: f.ResponderResources, InitiatorDepth: f.InitiatorDepth,
		RetryCount: f.RetryCount, RNRRetryCount: f.RNRRetryCount, Transport: t,
		PathMTU: mtuFromIB(f.PathMTU), QPN: f.LocalQPN, StartingPSN: f.StartingPSN}, nil
}

// passiveConn makes the Conn of a request the CM took for l.
func (a *Agent) passiveConn(ic *ibcm.Conn, h mad.CMAHeader, l *Listener, pd []byte) *Conn {
	c := newConn(a)
	c.ic = ic
	c.remote = netip.AddrPortFrom(h.Src().Unmap(), h.Port())
	c.local = netip.AddrPortFrom(a.addr, l.port)
	c.privateData = pd[mad.CMAHeaderLen:]
	a.mu.Lock()
	ic.Context = c
	a.conns[c] = struct{}{}
	a.mu.Unlock()
	return c
}

// Accept brings p's QP to RTS with the peer's parameters, sends REP with
// p.PrivateData (at most 196 bytes) and waits for the peer's RTU
// (rdma_accept). READ and atomic depths are cut to what the peer offers.
func (r *Request) Accept(ctx context.Context, p *Param) (*Conn, error) {
	if r.Transport == verbs.QPTypeUD {
		return nil, ErrQP // AcceptUD answers a UD request
	}
	if len(p.PrivateData) > mad.AcceptPrivateLen {
		return nil, ErrPrivateDataTooLong
	}
	if err := p.check(); err != nil {
		return nil, err
	}
	if !r.answered.CompareAndSwap(false, true) {
		return nil, ErrAnswered
	}
	if r.c.kc != nil {
		return r.kernelAccept(ctx, p)
	}
	c, a := r.c, r.c.a
	f := &c.ic.REQ
	qp, own, err := p.qp(a)
	if err != nil {
		r.reject(mad.ReasonNoQP)
		return nil, c.abandon(err)
	}
	c.mu.Lock()
	c.qp, c.ownQP = qp, own
	c.mu.Unlock()
	if qp.Type() != r.Transport {
		r.reject(mad.ReasonInvalidTransportType)
		return nil, c.abandon(ErrQP)
	}
	respRes, initDepth := min(p.ResponderResources, f.InitiatorDepth), min(p.InitiatorDepth, f.ResponderResources)
	timeout := orDefault(p.ACKTimeout, orDefault(f.Primary.LocalACKTimeout, localACKTimeout))
	// psn is the PSN this side expects first, which the REP carries; it
	// sends from the REQ's (see Dial).
	psn := rand.Uint32() & 0xffffff
	err = toInit(qp)
	if err == nil {
		err = toRTR(qp, rtr{peer: f.Primary.LocalGID, tc: f.Primary.TrafficClass, mtu: min(a.mtu, r.PathMTU),
			destQPN: f.LocalQPN, rqPSN: psn, maxDestRdAtomic: respRes, minRNRTimer: orDefault(p.MinRNRTimer, 12)})
	}
	if err != nil {
		r.reject(mad.ReasonConsumerReject)
		return nil, c.abandon(err)
	}
	rep := mad.REPFields{LocalQPN: qp.QPN(), StartingPSN: psn, ResponderResources: respRes,
		InitiatorDepth: initDepth, TargetACKDelay: 15, RNRRetryCount: retryCount(p.RNRRetryCount),
		SRQ: p.QPInit.SRQ != nil, PrivateData: p.PrivateData}
	rx := qp.Counters().RxPackets
	if err := a.do(func(now time.Time) error { return a.cm.Accept(now, c.ic, &rep) }); err != nil {
		return nil, c.abandon(c.pendingErr(ErrTimeout))
	}
	if err := c.established(ctx, qp, rx); err != nil {
		return nil, c.abandon(err)
	}
	// RTS once established, as the IBTA's passive side does (12.9.8): in RTR the QP
	// receives and answers, and its first packet is what establishes the connection
	// when the RTU is lost.
	err = toRTS(qp, rts{sqPSN: f.StartingPSN, timeout: timeout, retry: f.RetryCount, rnrRetry: f.RNRRetryCount,
		maxRdAtomic: initDepth})
	if err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

// established waits for the passive connection's RTU, or for the QP's first packet
// since the REP left (the QP had received rx before), which tells as well that the peer
// is up: the IBTA's communication established event (IBV_EVENT_COMM_EST, 11.6.3.1),
// on which rdma_cm's users call rdma_notify so that a lost RTU does not hold the
// connection until the REP's retry. The CM does not take the event itself, as the
// device's event queue is the program's (Device.Events has one reader, as
// ibv_get_async_event); the QP's receive counter counts the same packet. It is read
// only while the RTU is late: the RTU of a live peer arrives within a round trip.
func (c *Conn) established(ctx context.Context, qp *verbs.QP, rx uint64) error {
	poll := time.NewTicker(commEstPoll)
	defer poll.Stop()
	for {
		select {
		case e := <-c.ev:
			switch e.Kind {
			case ibcm.EventEstablished:
				return nil
			case ibcm.EventRejected:
				return &RejectError{Reason: e.Reason, PrivateData: e.PrivateData}
			case ibcm.EventTimeout:
				return ErrTimeout
			}
		case <-poll.C:
			if qp.Counters().RxPackets == rx {
				continue
			}
			// Data before the RTU. Establish fails only when the RTU (whose event is
			// then on its way) or the CM's end (likewise) came first.
			if c.a.do(func(now time.Time) error { return c.a.cm.Establish(now, c.ic) }) == nil {
				return nil
			}
		case <-ctx.Done():
			c.a.do(func(now time.Time) error { c.a.cm.Abort(now, c.ic); return nil })
			return ctx.Err()
		}
	}
}

// commEstPoll is how often Accept looks at the QP's receive counter while the RTU is
// late.
const commEstPoll = time.Millisecond

// Reject refuses the request with privateData (at most 148 bytes) in the
// REJ, reason "consumer reject" (rdma_reject); a UD request is refused with
// a SIDR_REP of status "rejected" (at most 136 bytes).
func (r *Request) Reject(privateData []byte) error {
	if r.Transport == verbs.QPTypeUD {
		return r.rejectUD(privateData)
	}
	if len(privateData) > mad.RejectPrivateLen {
		return ErrPrivateDataTooLong
	}
	if !r.answered.CompareAndSwap(false, true) {
		return ErrAnswered
	}
	if r.c.kc != nil {
		return r.kernelReject(privateData)
	}
	c, a := r.c, r.c.a
	err := a.do(func(now time.Time) error {
		return a.cm.Reject(now, c.ic, mad.ReasonConsumerReject, privateData)
	})
	c.abandon(nil)
	if err != nil {
		return c.pendingErr(ErrTimeout)
	}
	return nil
}

func (r *Request) reject(reason mad.Reason) {
	a := r.c.a
	a.do(func(now time.Time) error { return a.cm.Reject(now, r.c.ic, reason, nil) })
}

// pendingErr is why a handshake call found the connection gone: the event that took
// it, else def. The CM drops the connection under the agent's lock and delivers the
// event after it (Agent.do sends the MADs first), so the event may still be on its way
// when the call finds the connection gone: it is waited for, pendingWait at most. A
// peer's REJ that crossed an Accept was reported as ErrTimeout without the wait
// (TestDialCancelled, seen once in CI).
func (c *Conn) pendingErr(def error) error {
	t := time.NewTimer(pendingWait)
	defer t.Stop()
	select {
	case e := <-c.ev:
		switch e.Kind {
		case ibcm.EventRejected:
			return &RejectError{Reason: e.Reason, PrivateData: e.PrivateData}
		case ibcm.EventTimeout:
			return ErrTimeout
		}
	case <-t.C:
	}
	return def
}

// pendingWait bounds pendingErr's wait for the event that ended a connection.
const pendingWait = 100 * time.Millisecond

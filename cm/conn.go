package cm

import (
	"context"
	"net/netip"
	"sync"
	"time"

	"github.com/goverbs/goverbs/cm/internal/ibcm"
	"github.com/goverbs/goverbs/cm/mad"
	"github.com/goverbs/goverbs/verbs"
)

// Conn is a connection the CM set up: its QP is in RTS, connected to the
// peer's. Done is closed when the connection ends (either side
// disconnected, or the agent closed); the QP is then in the error state,
// its outstanding work requests flushed.
type Conn struct {
	a      *Agent
	ic     *ibcm.Conn
	local  netip.AddrPort
	remote netip.AddrPort

	ev chan ibcm.Event // handshake events, for the Dial or Accept waiting

	mu          sync.Mutex
	qp          *verbs.QP
	ownQP       bool // the CM created the QP and closes it
	privateData []byte
	done        chan struct{}
	err         error

	kc *kconn // a kernel agent's connection: its rdma_cm id
}

func newConn(a *Agent) *Conn {
	return &Conn{a: a, ev: make(chan ibcm.Event, 8), done: make(chan struct{})}
}

// QP is the connection's queue pair.
func (c *Conn) QP() *verbs.QP { return c.qp }

// LocalAddr is this side's address and port.
func (c *Conn) LocalAddr() netip.AddrPort { return c.local }

// RemoteAddr is the peer's address and port.
func (c *Conn) RemoteAddr() netip.AddrPort { return c.remote }

// PrivateData is what the peer sent in its REP (for Dial's connection) or
// REQ (for Accept's, without rdma_cm's header), zero-padded to the field.
func (c *Conn) PrivateData() []byte { return c.privateData }

// Done is closed when the connection has ended.
func (c *Conn) Done() <-chan struct{} { return c.done }

// Err is nil while the connection is up, then why it ended:
// ErrDisconnected (by either side) or ErrClosed (the agent closed).
func (c *Conn) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

// Disconnect ends the connection (rdma_disconnect): the QP goes to the
// error state, its outstanding work requests flushed, and a DREQ carries
// privateData (at most 220 bytes) to the peer. It returns when the peer's
// DREP arrives (or the CM has given up asking), or with ctx's error when
// ctx ends first; Done is closed either way.
func (c *Conn) Disconnect(ctx context.Context, privateData []byte) error {
	if err := c.sendDREQ(privateData); err != nil {
		return err
	}
	select {
	case <-c.done:
		return nil
	case <-ctx.Done():
		c.finish(ErrDisconnected)
		return ctx.Err()
	}
}

// sendDREQ moves the QP to the error state and sends the DREQ, unless the
// connection has ended already.
func (c *Conn) sendDREQ(privateData []byte) error {
	if len(privateData) > mad.DREQPrivateLen {
		return ErrPrivateDataTooLong
	}
	select {
	case <-c.done:
		return nil
	default:
	}
	c.mu.Lock()
	qp := c.qp
	c.mu.Unlock()
	if qp != nil {
		qp.Modify(&verbs.QPAttr{State: verbs.QPStateErr}, verbs.QPAttrState)
	}
	if c.kc != nil {
		c.kernelDisconnect()
		return nil
	}
	err := c.a.do(func(now time.Time) error { return c.a.cm.Disconnect(now, c.ic, privateData) })
	if err != nil {
		// The peer's DREQ crossed ours, or the connection is gone: it has ended.
		c.finish(ErrDisconnected)
	}
	return nil
}

// Close ends the connection without waiting for the peer's answer (the CM
// goes on asking while its agent runs) and closes the QP if the CM created
// it.
func (c *Conn) Close() error {
	err := c.sendDREQ(nil)
	c.finish(ErrDisconnected)
	<-c.done // a finish under way elsewhere may still be moving the QP to ERR
	if c.kc != nil {
		c.a.k.release(c.a, c) // done once the finish elsewhere has destroyed the id
	}
	c.mu.Lock()
	qp, own := c.qp, c.ownQP
	c.ownQP = false
	c.mu.Unlock()
	if own && qp != nil {
		if e := qp.Close(); err == nil {
			err = e
		}
	}
	return err
}

// finish ends the connection once: the QP to the error state, then Done
// closed, as rdma_cm moves the QP to ERR before it reports
// RDMA_CM_EVENT_DISCONNECTED, so that whoever sees Done finds the QP
// flushing.
func (c *Conn) finish(why error) {
	c.mu.Lock()
	if c.err != nil {
		c.mu.Unlock()
		return
	}
	c.err = why
	qp := c.qp
	c.mu.Unlock()
	if qp != nil {
		qp.Modify(&verbs.QPAttr{State: verbs.QPStateErr}, verbs.QPAttrState)
	}
	close(c.done)
	c.a.track(c, false)
	if c.kc != nil {
		c.a.k.release(c.a, c)
	}
}

// handle takes an event of the CM about this connection.
func (c *Conn) handle(e ibcm.Event) {
	switch e.Kind {
	case ibcm.EventDisconnected:
		c.finish(ErrDisconnected)
	case ibcm.EventTimeWaitExit:
	case ibcm.EventRejected, ibcm.EventTimeout:
		c.a.track(c, false) // the CM forgot it; so does the agent
		fallthrough
	default:
		select {
		case c.ev <- e:
		default:
		}
	}
}

// wait waits for the handshake event that ends a Dial or an Accept.
func (c *Conn) wait(ctx context.Context, want ibcm.EventKind) (ibcm.Event, error) {
	for {
		select {
		case e := <-c.ev:
			switch e.Kind {
			case want:
				return e, nil
			case ibcm.EventRejected:
				return e, &RejectError{Reason: e.Reason, PrivateData: e.PrivateData}
			case ibcm.EventTimeout:
				return e, ErrTimeout
			}
		case <-ctx.Done():
			c.a.do(func(now time.Time) error { c.a.cm.Abort(now, c.ic); return nil })
			return ibcm.Event{}, ctx.Err()
		}
	}
}

package cm

import (
	"fmt"
	"math/rand/v2"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/goverbs/goverbs/cm/internal/ibcm"
	"github.com/goverbs/goverbs/cm/mad"
	"github.com/goverbs/goverbs/verbs"
)

// Config tunes an Agent. The zero value has Linux rdma_cm's behaviour.
type Config struct {
	// ResponseTimeout, MaxRetries and PacketLifetime are the CM's timing, as
	// exponents of 4.096 µs where they are times (see ibcm's Config):
	// defaults 20 (4.3 s), 15 and 18 (1.07 s), rdma_cm's on RoCE.
	ResponseTimeout uint8
	MaxRetries      uint8
	PacketLifetime  uint8
}

// Counters are an Agent's statistics.
type Counters struct {
	MADsSent     uint64
	MADsReceived uint64
	// MADsDropped counts received MADs that were malformed, for no known
	// connection, or unexpected in the connection's state.
	MADsDropped uint64
	SendErrors  uint64
}

// Agent is the connection manager of one device: it listens and dials
// with that device's QPs and speaks the CM protocol on its QP1.
type Agent struct {
	dev  *verbs.Device
	gid  verbs.GID
	addr netip.Addr
	mtu  verbs.MTU
	guid uint64
	port madPort

	mu        sync.Mutex
	cm        *ibcm.Agent
	timer     *time.Timer
	listeners map[uint64]*Listener // by service ID
	conns     map[*Conn]struct{}
	closed    bool
	// sending counts the do calls whose MADs are on their way to the port;
	// Close waits for them (sent signals it) so that what the CM said before
	// the agent closed, a DREP above all, reaches the wire.
	sending int
	sent0   sync.Cond

	sent, received, dropped, sendErrs atomic.Uint64

	// k is the kernel half of an agent on a kernel RDMA device (kernel.go); the
	// MAD fields above are then unused.
	k *kernelAgent
	// gidIndex is gid's index in the device's table: 0 on a software device, the
	// RoCE v2 entry of the address on a kernel one.
	gidIndex uint8
	// svc is the rdma_cm service this agent's CM serves (service.go), which takes
	// all its events.
	svc *Service
}

func newAgent(dev *verbs.Device, port madPort, cfg *Config) (*Agent, error) {
	gid, err := dev.QueryGID(1, 0)
	if err != nil {
		return nil, err
	}
	pa, err := dev.QueryPort(1)
	if err != nil {
		return nil, err
	}
	guid := dev.Query().NodeGUID
	icfg := ibcm.Config{CAGUID: guid, TIDHigh: rand.Uint32(), Rand: rand.Uint32}
	if cfg != nil {
		icfg.ResponseTimeout, icfg.MaxRetries, icfg.PacketLifetime = cfg.ResponseTimeout, cfg.MaxRetries, cfg.PacketLifetime
	}
	a := &Agent{dev: dev, gid: gid, addr: gid.Addr(), mtu: pa.ActiveMTU, guid: guid, port: port,
		cm: ibcm.New(icfg), listeners: map[uint64]*Listener{}, conns: map[*Conn]struct{}{}}
	a.sent0.L = &a.mu
	a.timer = time.AfterFunc(time.Hour, a.tick)
	a.timer.Stop()
	port.SetMADHandler(a.input)
	return a, nil
}

// Device is the agent's device.
func (a *Agent) Device() *verbs.Device { return a.dev }

// Addr is the device's IP address, its GID 0.
func (a *Agent) Addr() netip.Addr { return a.addr }

// Counters returns the agent's statistics.
func (a *Agent) Counters() Counters {
	return Counters{MADsSent: a.sent.Load(), MADsReceived: a.received.Load(),
		MADsDropped: a.dropped.Load(), SendErrors: a.sendErrs.Load()}
}

// Close ends every connection and listener of the agent (connections are
// disconnected, handshakes in progress rejected) and stops its CM. It does
// not close the device.
func (a *Agent) Close() error {
	a.mu.Lock()
	if a.closed {
		a.mu.Unlock()
		return nil
	}
	a.closed = true
	ls := make([]*Listener, 0, len(a.listeners))
	for _, l := range a.listeners {
		ls = append(ls, l)
	}
	cs := make([]*Conn, 0, len(a.conns))
	for c := range a.conns {
		cs = append(cs, c)
	}
	a.mu.Unlock()
	if a.k != nil {
		return a.kernelClose(ls, cs)
	}
	for _, l := range ls {
		l.Close()
	}
	for _, c := range cs {
		a.do(func(now time.Time) error { a.cm.Abort(now, c.ic); return nil })
		c.finish(ErrClosed)
	}
	a.timer.Stop()
	// A DREP the CM produced just before (the peer disconnected and our user,
	// seeing it, closed the device) may still be between the lock and the
	// port: lost, the peer would retry its DREQ into the void and keep the
	// connection, making our next REQ from the same QPN stale.
	a.mu.Lock()
	for a.sending > 0 {
		a.sent0.Wait()
	}
	a.mu.Unlock()
	return a.port.Close()
}

// do runs f on the protocol state under the lock, then sends the MADs and
// delivers the events it produced, outside the lock (a MAD to our own
// address comes back through input).
func (a *Agent) do(f func(now time.Time) error) error {
	a.mu.Lock()
	err := f(time.Now())
	outs, evs := a.cm.TakeOutputs(), a.cm.TakeEvents()
	if t, ok := a.cm.NextDeadline(); ok && !a.closed {
		a.timer.Reset(time.Until(t))
	} else {
		a.timer.Stop()
	}
	if len(outs) > 0 {
		a.sending++
	}
	a.mu.Unlock()
	if len(outs) > 0 {
		for i := range outs {
			if e := a.port.SendMAD(outs[i].To, outs[i].MAD[:]); e != nil {
				a.sendErrs.Add(1)
			} else {
				a.sent.Add(1)
			}
		}
		a.mu.Lock()
		if a.sending--; a.sending == 0 {
			a.sent0.Broadcast()
		}
		a.mu.Unlock()
	}
	for _, e := range evs {
		a.dispatch(e)
	}
	return err
}

func (a *Agent) tick() { a.do(func(now time.Time) error { a.cm.Tick(now); return nil }) }

func (a *Agent) input(from netip.Addr, m []byte) {
	a.received.Add(1)
	if err := a.do(func(now time.Time) error { return a.cm.Input(now, from, m) }); err != nil {
		a.dropped.Add(1)
	}
}

// dispatch hands an event to the listener or connection it concerns.
func (a *Agent) dispatch(e ibcm.Event) {
	if a.svc != nil {
		a.svc.dispatch(e)
		return
	}
	if e.Kind == ibcm.EventRequest || e.Kind == ibcm.EventSIDRRequest {
		a.newRequest(e)
		return
	}
	a.mu.Lock()
	c, ok := e.Conn.Context.(*Conn)
	a.mu.Unlock()
	if ok {
		c.handle(e)
	}
}

// newRequest queues a passive connection for its listener's Accept.
func (a *Agent) newRequest(e ibcm.Event) {
	a.mu.Lock()
	l := a.listeners[e.Conn.ServiceID]
	a.mu.Unlock()
	r, err := a.newPassive(e, l)
	if err == nil && l != nil {
		select {
		case l.reqs <- r:
			return
		default: // the backlog bounds the queue; a full one means the listener is closing
		}
	}
	a.do(func(now time.Time) error {
		if e.Kind == ibcm.EventSIDRRequest {
			return a.cm.SIDRReply(now, e.Conn, &mad.SIDRRepFields{Status: mad.SIDRRejected})
		}
		return a.cm.Reject(now, e.Conn, mad.ReasonConsumerReject, nil)
	})
}

func (a *Agent) track(c *Conn, on bool) {
	a.mu.Lock()
	if on {
		a.conns[c] = struct{}{}
	} else {
		delete(a.conns, c)
	}
	a.mu.Unlock()
}

func (a *Agent) String() string { return fmt.Sprintf("cm agent on %v", a.addr) }

// Package ibcm is the InfiniBand Communication Manager protocol (IBTA Vol. 1
// ch. 12): the per-connection state machine, listeners, retransmission,
// duplicate and stale detection, and timewait, for every connection of one
// port. It holds no goroutine, socket or clock: the caller feeds it received
// MADs and the time, takes the MADs it wants sent and the events it reports,
// and calls Tick at NextDeadline.
package ibcm

import (
	"errors"
	"fmt"
	"net/netip"
	"time"

	"github.com/goverbs/goverbs/cm/mad"
)

// Config is what an Agent needs to know about its port and its timing.
// Times are the specification's exponents: 4.096 µs × 2^value.
type Config struct {
	CAGUID  uint64        // the device's GUID, sent in REQ, REP and timeout REJs
	TIDHigh uint32        // the high half of the TransactionIDs this agent starts
	Rand    func() uint32 // source of communication IDs (e.g. math/rand/v2's Uint32)

	// ResponseTimeout is how long this side takes to answer a CM message
	// and how long it expects the peer to take (Linux's rdma_cm: 20, 4.3 s).
	ResponseTimeout uint8
	// MaxRetries is how many times a REQ, REP or DREQ is sent again
	// before giving up (Linux's rdma_cm: 15).
	MaxRetries uint8
	// PacketLifetime is the path's packet lifetime (rdma_cm on RoCE: 18,
	// about 1 s); a retransmission waits twice it more than the response
	// timeout, and TimeWait lasts twice it.
	PacketLifetime uint8
	// MRAServiceTimeout is what an MRA promises when a REQ is repeated
	// before the consumer has answered (Linux's rdma_cm: 24, about 69 s).
	MRAServiceTimeout uint8
}

// DefaultConfig has Linux rdma_cm's timing.
func DefaultConfig() Config {
	return Config{ResponseTimeout: 20, MaxRetries: 15, PacketLifetime: 18, MRAServiceTimeout: 24}
}

// IBATime converts the specification's time exponent: 4.096 µs × 2^exp.
func IBATime(exp uint8) time.Duration {
	return 4096 * time.Nanosecond << min(exp, 31)
}

// Errors of the consumer-facing calls.
var (
	ErrState        = errors.New("ibcm: connection is not in a state that allows this")
	ErrServiceInUse = errors.New("ibcm: service ID already listened on")
	ErrPrivateData  = errors.New("ibcm: private data longer than the message allows")
	ErrNoListener   = errors.New("ibcm: no listener on that service ID")
	ErrPeerMismatch = errors.New("ibcm: MAD from an address that is not the connection's peer")
	ErrUnknownConn  = errors.New("ibcm: MAD for no known connection")
	ErrUnexpected   = errors.New("ibcm: MAD not expected in the connection's state")
	ErrBacklogFull  = errors.New("ibcm: listener backlog full")
	ErrStaleRequest = errors.New("ibcm: REQ from a QP that is still connected")
	ErrBadTransport = errors.New("ibcm: REQ for a transport other than RC or UC")
	ErrWrongQPN     = errors.New("ibcm: DREQ names another QP")
)

// Out is a MAD to send to QP1 at To.
type Out struct {
	To  netip.Addr
	MAD [mad.Len]byte
}

// Event is something the consumer must know or act on.
type Event struct {
	Kind        EventKind
	Conn        *Conn
	Reason      mad.Reason // EventRejected; EventTimeout: ReasonTimeout
	PrivateData []byte     // the REQ's, REP's, RTU's, REJ's or DREQ's, a copy
}

type listener struct {
	serviceID uint64
	backlog   int
	pending   int // connections in REQRcvd or MRAREQSent
}

// parkedREQ is a REQ for a reserved service ID, waiting for its Listen.
type parkedREQ struct {
	from     netip.Addr
	tid      uint64
	req      mad.REQ // a copy
	arrived  time.Time
	deadline time.Time
}

// maxParked bounds the REQs one reservation holds; more are refused at once.
const maxParked = 32

// maxParkWait bounds how long a parked REQ waits for its Listen.
const maxParkWait = time.Second

type remoteKey struct {
	peer netip.Addr
	id   uint32 // the peer's communication ID, or its QPN in byQPN
}

// Agent is the CM of one port: every connection whose MADs go through it.
type Agent struct {
	cfg       Config
	conns     map[uint32]*Conn // by local communication ID
	byRemote  map[remoteKey]*Conn
	byQPN     map[remoteKey]*Conn // the peer's QPN: stale-connection detection
	listeners map[uint64]*listener
	reserved  map[uint64][]parkedREQ // Reserve'd service IDs not listened on yet
	out       []Out
	events    []Event
}

// New returns an agent with cfg; zero timing fields take DefaultConfig's.
func New(cfg Config) *Agent {
	d := DefaultConfig()
	if cfg.ResponseTimeout == 0 {
		cfg.ResponseTimeout = d.ResponseTimeout
	}
	if cfg.MaxRetries == 0 {
		cfg.MaxRetries = d.MaxRetries
	}
	if cfg.PacketLifetime == 0 {
		cfg.PacketLifetime = d.PacketLifetime
	}
	if cfg.MRAServiceTimeout == 0 {
		cfg.MRAServiceTimeout = d.MRAServiceTimeout
	}
	if cfg.Rand == nil {
		panic("ibcm: Config.Rand is nil")
	}
	return &Agent{cfg: cfg, conns: map[uint32]*Conn{}, byRemote: map[remoteKey]*Conn{},
		byQPN: map[remoteKey]*Conn{}, listeners: map[uint64]*listener{},
		reserved: map[uint64][]parkedREQ{}}
}

// Config returns the agent's configuration with defaults applied.
func (a *Agent) Config() Config { return a.cfg }

// TakeOutputs returns the MADs to send, oldest first, and forgets them.
func (a *Agent) TakeOutputs() []Out {
	o := a.out
	a.out = nil
	return o
}

// TakeEvents returns the events reported since the last call.
func (a *Agent) TakeEvents() []Event {
	e := a.events
	a.events = nil
	return e
}

// Conns is the number of connections the agent holds, TimeWait included.
func (a *Agent) Conns() int { return len(a.conns) }

// Listen makes REQs for serviceID create passive connections, at most
// backlog of them waiting for the consumer's answer at once; REQs beyond
// are rejected with ReasonNoResources.
func (a *Agent) Listen(serviceID uint64, backlog int) error {
	if _, ok := a.listeners[serviceID]; ok {
		return ErrServiceInUse
	}
	a.listeners[serviceID] = &listener{serviceID: serviceID, backlog: max(backlog, 1)}
	if ps, ok := a.reserved[serviceID]; ok && len(ps) == 0 {
		delete(a.reserved, serviceID)
	} // REQs parked for it go in at the next Tick (NextDeadline says now)
	return nil
}

// Reserve makes a REQ for serviceID that finds nobody listening wait for Listen,
// up to the time the REQ gives the passive side to answer (at most a second),
// instead of being refused at once. It is for a port an rdma_cm id has bound and
// told a peer about before it listens: qperf 0.4.11 sends the client the port it
// bound, then calls rdma_listen, and where listening costs a round trip to a device
// daemon a quick client's REQ can arrive in between. A REQ that waits in vain is
// refused as it would have been (invalid service ID).
func (a *Agent) Reserve(serviceID uint64) {
	if _, ok := a.reserved[serviceID]; !ok {
		a.reserved[serviceID] = nil
	}
}

// Unreserve ends serviceID's reservation and refuses the REQs waiting on it.
func (a *Agent) Unreserve(serviceID uint64) {
	for _, p := range a.reserved[serviceID] {
		a.refuseParked(p)
	}
	delete(a.reserved, serviceID)
}

// park keeps a REQ for a reserved service ID; a retransmission of one already
// parked replaces it.
func (a *Agent) park(now time.Time, from netip.Addr, tid uint64, r mad.REQ, f *mad.REQFields) {
	ps := a.reserved[f.ServiceID]
	p := parkedREQ{from: from, tid: tid, req: append(mad.REQ(nil), r...), arrived: now,
		deadline: now.Add(min(IBATime(f.RemoteCMResponseTimeout), maxParkWait))}
	for i := range ps {
		if ps[i].from == from && ps[i].req.Fields().LocalCommID == f.LocalCommID {
			p.arrived, p.deadline = ps[i].arrived, ps[i].deadline
			ps[i] = p
			return
		}
	}
	if len(ps) >= maxParked {
		a.refuseParked(p)
		return
	}
	a.reserved[f.ServiceID] = append(ps, p)
}

func (a *Agent) refuseParked(p parkedREQ) {
	a.reject(p.from, p.tid, 0, p.req.Fields().LocalCommID, mad.RejectedREQ, mad.ReasonInvalidServiceID, nil, nil)
}

// tickParked lets the REQs whose service ID is listened on now in, and refuses
// those that waited long enough.
func (a *Agent) tickParked(now time.Time) {
	for sid, ps := range a.reserved {
		if _, ok := a.listeners[sid]; ok {
			delete(a.reserved, sid)
			for _, p := range ps {
				a.onREQ(now, p.from, p.tid, p.req) // its answer or refusal, as any REQ's
			}
			continue
		}
		kept := ps[:0]
		for _, p := range ps {
			if now.Before(p.deadline) {
				kept = append(kept, p)
			} else {
				a.refuseParked(p)
			}
		}
		a.reserved[sid] = kept
	}
}

// Unlisten stops accepting REQs for serviceID. Connections already made
// are not affected.
func (a *Agent) Unlisten(serviceID uint64) {
	if l, ok := a.listeners[serviceID]; ok {
		delete(a.listeners, serviceID)
		for _, c := range a.conns {
			if c.listener == l {
				c.listener = nil
			}
		}
	}
}

// NextDeadline is the earliest time Tick has work; ok is false when no
// timer runs.
func (a *Agent) NextDeadline() (t time.Time, ok bool) {
	for sid, ps := range a.reserved {
		_, listened := a.listeners[sid]
		for _, p := range ps {
			d := p.deadline
			if listened {
				d = p.arrived // due already
			}
			if !ok || d.Before(t) {
				t, ok = d, true
			}
		}
	}
	for _, c := range a.conns {
		if c.deadline.IsZero() {
			continue
		}
		if !ok || c.deadline.Before(t) {
			t, ok = c.deadline, true
		}
	}
	return t, ok
}

// Tick runs every timer due at now: retransmissions, give-ups, timewait,
// parked REQs.
func (a *Agent) Tick(now time.Time) {
	a.tickParked(now)
	for _, c := range a.conns {
		if !c.deadline.IsZero() && !now.Before(c.deadline) {
			a.expire(now, c)
		}
	}
}

func (a *Agent) newLocalID() uint32 {
	for {
		id := a.cfg.Rand()
		if _, used := a.conns[id]; id != 0 && !used {
			return id
		}
	}
}

func (a *Agent) tid(localID uint32) uint64 { return uint64(a.cfg.TIDHigh)<<32 | uint64(localID) }

// send queues a MAD built by fill; keep says to remember it as the
// connection's last message, for retransmission and duplicates.
func (a *Agent) send(c *Conn, to netip.Addr, tid uint64, attr mad.AttrID, fill func(d []byte)) {
	var o Out
	o.To = to
	m := mad.MAD(o.MAD[:])
	h := mad.CMHeader(tid, attr)
	m.Header().Encode(&h)
	fill(m.Data())
	a.out = append(a.out, o)
	if c != nil {
		c.last = o.MAD
	}
}

func (a *Agent) resendLast(c *Conn) {
	a.out = append(a.out, Out{To: c.Peer, MAD: c.last})
}

func (a *Agent) event(k EventKind, c *Conn, reason mad.Reason, pd []byte) {
	var cp []byte
	if pd != nil {
		cp = append([]byte(nil), pd...)
	}
	a.events = append(a.events, Event{Kind: k, Conn: c, Reason: reason, PrivateData: cp})
}

// forget removes c from every table; it is Idle from now on.
func (a *Agent) forget(c *Conn) {
	c.state, c.deadline = StateIdle, time.Time{}
	if a.conns[c.LocalID] == c {
		delete(a.conns, c.LocalID)
	}
	if k := (remoteKey{c.Peer, c.RemoteID}); c.RemoteID != 0 && a.byRemote[k] == c {
		delete(a.byRemote, k)
	}
	if k := (remoteKey{c.Peer, c.RemoteQPN}); c.hasRemoteQPN && a.byQPN[k] == c {
		delete(a.byQPN, k)
	}
	c.leaveBacklog()
}

// Input handles one received MAD from QP1 at from. It returns an error for
// a MAD it dropped (malformed, unknown or unexpected): the caller counts
// it; nothing else is to be done about it.
func (a *Agent) Input(now time.Time, from netip.Addr, b []byte) error {
	m, err := mad.ParseCM(b)
	if err != nil {
		return err
	}
	h := m.Header()
	tid, d := h.TransactionID(), m.Data()
	switch h.AttrID() {
	case mad.AttrREQ:
		return a.onREQ(now, from, tid, mad.REQ(d))
	case mad.AttrREP:
		return a.onREP(now, from, tid, mad.REP(d))
	case mad.AttrRTU:
		return a.onRTU(now, from, mad.RTU(d))
	case mad.AttrREJ:
		return a.onREJ(now, from, mad.REJ(d))
	case mad.AttrMRA:
		return a.onMRA(now, from, mad.MRA(d))
	case mad.AttrDREQ:
		return a.onDREQ(now, from, tid, mad.DREQ(d))
	case mad.AttrDREP:
		return a.onDREP(now, from, mad.DREP(d))
	case mad.AttrSIDRReq:
		return a.onSIDRReq(now, from, tid, mad.SIDRReq(d))
	case mad.AttrSIDRRep:
		return a.onSIDRRep(now, from, mad.SIDRRep(d))
	}
	return fmt.Errorf("%w: %v", mad.ErrAttribute, h.AttrID())
}

// lookup finds the connection a MAD addressed to our communication ID
// localID belongs to, and checks it comes from the connection's peer and,
// when the peer's ID is known, names it.
func (a *Agent) lookup(from netip.Addr, localID, peerID uint32) (*Conn, error) {
	c, ok := a.conns[localID]
	if !ok {
		return nil, ErrUnknownConn
	}
	if c.Peer != from {
		return nil, ErrPeerMismatch
	}
	if c.RemoteID != 0 && peerID != 0 && c.RemoteID != peerID {
		return nil, ErrUnknownConn
	}
	return c, nil
}

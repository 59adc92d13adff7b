package cm

import (
	"fmt"
	"math/rand/v2"
	"net/netip"
	"sync"
	"syscall"
	"time"

	"github.com/goverbs/goverbs/cm/internal/ibcm"
	"github.com/goverbs/goverbs/cm/mad"
	"github.com/goverbs/goverbs/verbs"
	"github.com/goverbs/goverbs/verbs/driver"
)

// Service is rdma_cm's device half on a software device, as the kernel's rdma_cm is
// on a kernel one: ids named by tokens, each with the handler its events go to, the
// CM protocol spoken in MADs on the device's QP1, and the QPs user-managed (only
// their numbers travel; InitQPAttr gives the attributes to move them with, as
// rdma_init_qp_attr does). `goverbs serve` runs one per device for every process
// attached to it (docs/attach-protocol.md, "rdma_cm"), so that listeners of several
// processes share the device's address by port, as on a kernel device.
//
// Both port spaces are served: TCP ids connect RC and UC QPs, UDP ids resolve UD
// services (SIDR) and join multicast groups (on RoCE no MAD is sent for a join).
type Service struct {
	a *Agent

	mu     sync.Mutex
	ids    map[uint64]*svcID
	listen map[uint64]*svcID   // by service ID
	ports  map[uint64][]uint64 // service ID → the ids bound to it (more than one: REUSEADDR)
	next   uint64
	closed bool
}

// ServiceEvent is an rdma_cm event of a Service's id. Kind is enum rdma_cm_event_type's
// number.
type ServiceEvent struct {
	Kind   int
	Status int    // REJECTED: the REJ's reason; UNREACHABLE: -ETIMEDOUT; else 0 or -errno
	ID     uint64 // the id's token; CONNECT_REQUEST: the new id's
	Listen uint64 // CONNECT_REQUEST: the listening id's token
	// Param is the peer's (CONNECT_REQUEST: its REQ's; CONNECT_RESPONSE: its REP's),
	// the READ depths in the receiver's view as Linux's ib_cm reports them
	// (ResponderResources is the peer's initiator depth, and the other way round),
	// with its private data (CONNECT_REQUEST: after rdma_cm's header).
	Param         ServiceParam
	Local, Remote netip.AddrPort
	// UD (ESTABLISHED of a UDP id, MULTICAST_JOIN): rdma_ud_param's Q_Key and
	// address vector; its QP number is Param.QPN.
	QKey uint32
	AH   verbs.AHAttr
}

// The event kinds a Service reports (rdma_cm_event_type's numbers).
const (
	SvcAddrResolved    = int(evAddrResolved)
	SvcAddrError       = int(evAddrError)
	SvcRouteResolved   = int(evRouteResolved)
	SvcRouteError      = int(evRouteError)
	SvcConnectRequest  = int(evConnectRequest)
	SvcConnectResponse = int(evConnectResponse)
	SvcConnectError    = int(evConnectError)
	SvcUnreachable     = int(evUnreachable)
	SvcRejected        = int(evRejected)
	SvcEstablished     = int(evEstablished)
	SvcDisconnected    = int(evDisconnected)
	SvcDeviceRemoval   = int(evDeviceRemoval)
	SvcMulticastJoin   = int(evMulticastJoin)
	SvcTimewaitExit    = int(evTimewaitExit)
)

// EventName is rdma_event_str's text for an event kind.
func EventName(kind int) string { return cmEvent(kind).String() }

// ServiceParam is struct rdma_conn_param.
type ServiceParam struct {
	ResponderResources, InitiatorDepth uint8
	RetryCount, RNRRetryCount          uint8
	SRQ                                bool
	QPN                                uint32
	PrivateData                        []byte
}

// An id's states.
type svcState uint8

const (
	stIdle svcState = iota
	stBound
	stAddrResolved
	stRouteResolved
	stListening
	stConnecting // REQ sent
	stReplied    // REP received, waiting for establish or reject
	stRequested  // passive: REQ received, waiting for accept or reject
	stAccepted   // passive: REP sent, waiting for the RTU
	stEstablished
	stDisconnected
	stDead // rejected, timed out: only destroy is left
)

type svcID struct {
	tok    uint64
	ps     mad.PortSpace // TCP, UDP or IPoIB
	udp    bool          // a UD id (UDP or IPoIB): SIDR, multicast
	h      func(ServiceEvent)
	state  svcState
	local  netip.AddrPort
	remote netip.AddrPort
	sid    uint64 // the service ID bound (0: none)
	ic     *ibcm.Conn
	psn    uint32 // the PSN this side expects first
	mtu    verbs.MTU
	retry  uint8                   // our REQ's retry count (active)
	groups map[netip.Addr]struct{} // multicast groups joined
	opt    idOptions               // rdma_set_option's (option.go)
}

// Errors of a Service's calls, as errnos (what the kernel's rdma_ucm returns).
var (
	errNoID      = fmt.Errorf("cm: no such rdma_cm id: %w", syscall.EINVAL)
	errIDState   = fmt.Errorf("cm: the rdma_cm id is not in a state for that: %w", syscall.EINVAL)
	errAddrInUse = fmt.Errorf("cm: address in use: %w", syscall.EADDRINUSE)
	errNotLocal  = fmt.Errorf("cm: not this device's address: %w", syscall.EADDRNOTAVAIL)
	errPrivLen   = fmt.Errorf("%w: %w", ErrPrivateDataTooLong, syscall.EINVAL)
	errPortSpace = fmt.Errorf("not served (TCP, UDP and IPoIB are): %w", syscall.EPROTONOSUPPORT)
)

// gsiMADPort is a driver's QP1 as a madPort, for the CM class only.
type gsiMADPort struct{ g driver.GSI }

func (p gsiMADPort) SendMAD(to netip.Addr, m []byte) error { return p.g.SendMAD(to, m) }
func (p gsiMADPort) SetMADHandler(h func(from netip.Addr, m []byte)) {
	p.g.SetMADHandler(func(from netip.Addr, m []byte) {
		if len(m) == mad.Len && m[1] == mad.ClassCM && m[2] == mad.ClassVersionCM {
			h(from, m)
		}
	})
}
func (p gsiMADPort) Close() error { p.g.SetMADHandler(nil); return nil }

// NewService starts the rdma_cm service of the software device g is QP1 of: its
// address (GID 0), node GUID and active MTU. The service takes the device's QP1 for
// itself. cfg may be nil.
func NewService(g driver.GSI, addr netip.Addr, guid uint64, mtu verbs.MTU, cfg *Config) *Service {
	addr = addr.Unmap()
	port := gsiMADPort{g}
	s := &Service{ids: map[uint64]*svcID{}, listen: map[uint64]*svcID{}, ports: map[uint64][]uint64{}}
	icfg := ibcm.Config{CAGUID: guid, TIDHigh: rand.Uint32(), Rand: rand.Uint32}
	if cfg != nil {
		icfg.ResponseTimeout, icfg.MaxRetries, icfg.PacketLifetime = cfg.ResponseTimeout, cfg.MaxRetries, cfg.PacketLifetime
	}
	a := &Agent{gid: verbs.GIDFromAddr(addr), addr: addr, mtu: mtu, guid: guid, port: port,
		cm: ibcm.New(icfg), listeners: map[uint64]*Listener{}, conns: map[*Conn]struct{}{}, svc: s}
	a.sent0.L = &a.mu
	a.timer = time.AfterFunc(time.Hour, a.tick)
	a.timer.Stop()
	s.a = a
	port.SetMADHandler(a.input)
	return s
}

// Addr is the service's address.
func (s *Service) Addr() netip.Addr { return s.a.addr }

// Counters are the service's MAD statistics.
func (s *Service) Counters() Counters { return s.a.Counters() }

// Close destroys every id (connections are disconnected, handshakes rejected) and
// stops the CM.
func (s *Service) Close() error {
	s.mu.Lock()
	s.closed = true
	toks := make([]uint64, 0, len(s.ids))
	for t := range s.ids {
		toks = append(toks, t)
	}
	s.mu.Unlock()
	for _, t := range toks {
		s.Destroy(t)
	}
	return s.a.Close()
}

// NewID makes an id of port space ps, whose events go to h. h is called from the CM's
// goroutines and must not block. TCP ids connect RC or UC QPs; UDP and IPoIB ids are UD
// (SIDR, multicast), each in its own space of service IDs. On RoCE an IPoIB id works
// as a UDP one does, with the UDP Q_Key: a kernel's rdma_cm would look the Q_Key up in
// the IPoIB broadcast group through the SA, which RoCE has not, and fail there.
func (s *Service) NewID(ps mad.PortSpace, h func(ServiceEvent)) (uint64, error) {
	switch ps {
	case mad.PortSpaceTCP, mad.PortSpaceUDP, mad.PortSpaceIPoIB:
	default:
		return 0, fmt.Errorf("cm: port space %v: %w", ps, errPortSpace)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return 0, ErrClosed
	}
	return s.addID(&svcID{ps: ps, udp: ps != mad.PortSpaceTCP, h: h}), nil
}

func (s *Service) addID(id *svcID) uint64 {
	s.next++
	id.tok = s.next
	s.ids[id.tok] = id
	return id.tok
}

func (s *Service) space(id *svcID) mad.PortSpace { return id.ps }

// bindLocked reserves port (0: an ephemeral one) of the id's port space for it.
// A port held already is the id's too when it and every holder set REUSEADDR and
// none of them listens, as the kernel's rdma_cm checks a bind.
func (s *Service) bindLocked(id *svcID, port uint16) error {
	sp := s.space(id)
	if port == 0 {
		for {
			if p := ephemeralPort(); len(s.ports[mad.ServiceID(sp, p)]) == 0 {
				port = p
				break
			}
		}
	}
	sid := mad.ServiceID(sp, port)
	if !s.shareable(sid, id, id.opt.reuseAddr) {
		return errAddrInUse
	}
	s.ports[sid] = append(s.ports[sid], id.tok)
	id.sid, id.local = sid, netip.AddrPortFrom(s.a.addr, port)
	return nil
}

// shareable reports whether id may hold sid beside its other holders: with reuse, and
// each of them set REUSEADDR and does not listen.
func (s *Service) shareable(sid uint64, id *svcID, reuse bool) bool {
	for _, t := range s.ports[sid] {
		o := s.ids[t]
		if t == id.tok || o == nil {
			continue
		}
		if !reuse || !o.opt.reuseAddr || o.state == stListening {
			return false
		}
	}
	return true
}

// unbindLocked releases id's port; it reports whether no id holds it any more.
func (s *Service) unbindLocked(id *svcID) bool {
	hs := s.ports[id.sid]
	for i, t := range hs {
		if t == id.tok {
			hs = append(hs[:i], hs[i+1:]...)
			break
		}
	}
	if len(hs) == 0 {
		delete(s.ports, id.sid)
		return true
	}
	s.ports[id.sid] = hs
	return false
}

func (s *Service) localAddr(a netip.Addr) bool {
	a = a.Unmap()
	return !a.IsValid() || a.IsUnspecified() || a == s.a.addr
}

// Bind is rdma_bind_addr: addr must be the device's (or unspecified); port 0 picks a
// free one. It returns the address bound.
func (s *Service) Bind(tok uint64, addr netip.AddrPort) (netip.AddrPort, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	id := s.ids[tok]
	if id == nil {
		return netip.AddrPort{}, errNoID
	}
	if id.state != stIdle {
		return netip.AddrPort{}, errIDState
	}
	if !s.localAddr(addr.Addr()) {
		return netip.AddrPort{}, errNotLocal
	}
	if err := s.bindLocked(id, addr.Port()); err != nil {
		return netip.AddrPort{}, err
	}
	id.state = stBound
	// A REQ for the port before the id listens waits a little for the listen
	// (ibcm's Reserve says why).
	s.a.mu.Lock()
	s.a.cm.Reserve(id.sid)
	s.a.mu.Unlock()
	return id.local, nil
}

// ResolveAddr is rdma_resolve_addr: on RoCE the peer's GID is its address, so
// ADDR_RESOLVED follows at once. src, when valid, must be the device's address.
func (s *Service) ResolveAddr(tok uint64, src netip.Addr, dst netip.AddrPort) error {
	dst = netip.AddrPortFrom(dst.Addr().Unmap(), dst.Port())
	s.mu.Lock()
	id := s.ids[tok]
	var err error
	switch {
	case id == nil:
		err = errNoID
	case id.state != stIdle && id.state != stBound:
		err = errIDState
	case !s.localAddr(src):
		err = errNotLocal
	case !dst.Addr().IsValid() || dst.Addr().Is4() != s.a.addr.Is4():
		err = fmt.Errorf("cm: %v is not of the device's address family: %w", dst.Addr(), syscall.EAFNOSUPPORT)
	}
	if err != nil {
		s.mu.Unlock()
		return err
	}
	if id.state == stIdle {
		id.local = netip.AddrPortFrom(s.a.addr, ephemeralPort())
	}
	id.remote, id.state = dst, stAddrResolved
	ev := ServiceEvent{Kind: SvcAddrResolved, ID: tok, Local: id.local, Remote: id.remote}
	h := id.h
	s.mu.Unlock()
	go h(ev)
	return nil
}

// ResolveRoute is rdma_resolve_route: on RoCE there is no subnet manager to ask, so
// ROUTE_RESOLVED follows at once.
func (s *Service) ResolveRoute(tok uint64) error {
	id, err := s.lockedIn(tok, stAddrResolved)
	if err != nil {
		return err
	}
	id.state = stRouteResolved
	ev := ServiceEvent{Kind: SvcRouteResolved, ID: tok, Local: id.local, Remote: id.remote}
	h := id.h
	s.mu.Unlock()
	go h(ev)
	return nil
}

// IsUDP reports whether tok is an id of the UDP port space.
func (s *Service) IsUDP(tok uint64) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	id := s.ids[tok]
	return id != nil && id.udp
}

// Query is the id's local and remote addresses (rdma_get_local_addr, _peer_addr).
func (s *Service) Query(tok uint64) (local, remote netip.AddrPort, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	id := s.ids[tok]
	if id == nil {
		return local, remote, errNoID
	}
	return id.local, id.remote, nil
}

// lockedIn returns tok's id with s.mu held when the id is in state want; otherwise it
// returns errNoID or errIDState with s.mu released.
func (s *Service) lockedIn(tok uint64, want svcState) (*svcID, error) {
	s.mu.Lock()
	id := s.ids[tok]
	if id == nil || id.state != want {
		s.mu.Unlock()
		if id == nil {
			return nil, errNoID
		}
		return nil, errIDState
	}
	return id, nil
}

// Listen is rdma_listen on an id bound (or not: it binds to a free port then).
func (s *Service) Listen(tok uint64, backlog int) error {
	if err := s.listenLocked(tok, backlog); err != nil {
		return err
	}
	// REQs that came for the bound port before the listen go in now, with s.mu let
	// go (their CONNECT_REQUESTs are dispatched under it).
	s.a.tick()
	return nil
}

func (s *Service) listenLocked(tok uint64, backlog int) error {
	if backlog <= 0 {
		backlog = DefaultBacklog
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	id := s.ids[tok]
	if id == nil {
		return errNoID
	}
	switch id.state {
	case stIdle:
		if err := s.bindLocked(id, 0); err != nil {
			return err
		}
	case stBound:
		if !s.shareable(id.sid, id, false) {
			return errAddrInUse // a listener holds its port alone
		}
	default:
		return errIDState
	}
	a := s.a
	a.mu.Lock()
	err := a.cm.Listen(id.sid, backlog)
	a.mu.Unlock()
	if err != nil {
		return errAddrInUse
	}
	id.state = stListening
	s.listen[id.sid] = id
	return nil
}

// Connect is rdma_connect with a user-managed QP: a REQ for the remote address's
// port carrying p.QPN; CONNECT_RESPONSE (or REJECTED, UNREACHABLE) follows.
func (s *Service) Connect(tok uint64, p *ServiceParam) error {
	id, err := s.lockedIn(tok, stRouteResolved)
	if err != nil {
		return err
	}
	if id.udp {
		return s.connectUD(id, p) // unlocks
	}
	if len(p.PrivateData) > mad.ConnectPrivateLen {
		s.mu.Unlock()
		return errPrivLen
	}
	a := s.a
	pd := make([]byte, mad.REQPrivateLen)
	mad.CMAHeader(pd).Encode(&mad.CMAHeaderFields{Port: id.local.Port(), Src: a.addr, Dst: id.remote.Addr()})
	copy(pd[mad.CMAHeaderLen:], p.PrivateData)
	id.psn = rand.Uint32() & 0xffffff
	id.mtu, id.retry = a.mtu, retryCount(p.RetryCount)
	timeout := uint8(localACKTimeout)
	if id.opt.timeoutSet && id.opt.timeout != 0 {
		timeout = id.opt.timeout // the kernel's rdma_cm derives the path's packet lifetime from it
	}
	req := mad.REQFields{
		ServiceID: mad.ServiceID(s.space(id), id.remote.Port()), LocalQPN: p.QPN & 0xffffff,
		ResponderResources: p.ResponderResources, InitiatorDepth: p.InitiatorDepth,
		TransportServiceType: mad.TransportRC, StartingPSN: id.psn, RetryCount: id.retry,
		PKey: mad.PKeyDefault, PathMTU: uint8(a.mtu), RNRRetryCount: retryCount(p.RNRRetryCount), SRQ: p.SRQ,
		Primary: mad.Path{LocalLID: 0xffff, RemoteLID: 0xffff, LocalGID: a.gid,
			RemoteGID: verbs.GIDFromAddr(id.remote.Addr()), HopLimit: hopLimit, LocalACKTimeout: timeout,
			TrafficClass: id.opt.tos},
		PrivateData: pd,
	}
	return s.start(id, func(now time.Time) (*ibcm.Conn, error) { return a.cm.Connect(now, id.remote.Addr(), &req) })
}

// start sends an id's first MAD (REQ or SIDR_REQ, made by send under the CM's lock):
// the id is connecting from then on, or dead if the CM refused. It is called with s.mu
// held and returns with it let go.
func (s *Service) start(id *svcID, send func(now time.Time) (*ibcm.Conn, error)) error {
	id.state = stConnecting
	s.mu.Unlock()
	a := s.a
	var ic *ibcm.Conn
	err := a.do(func(now time.Time) error {
		if a.closed {
			return ErrClosed
		}
		var err error
		if ic, err = send(now); err == nil {
			ic.Context = id // id.ic is set under s.mu: here after, or by the answer's dispatch
		}
		return err
	})
	s.mu.Lock()
	if err != nil {
		id.state = stDead
	} else if id.ic == nil {
		id.ic = ic
	}
	s.mu.Unlock()
	return err
}

// Accept is rdma_accept with a user-managed QP: the REP carries p.QPN (the caller
// has brought the QP to RTS with InitQPAttr's attributes); ESTABLISHED follows the
// peer's RTU.
func (s *Service) Accept(tok uint64, p *ServiceParam) error {
	id, err := s.lockedIn(tok, stRequested)
	if err != nil {
		return err
	}
	if id.udp {
		return s.replyUD(id, &mad.SIDRRepFields{Status: mad.SIDRValid, QPN: p.QPN & 0xffffff, QKey: UDPQKey,
			PrivateData: p.PrivateData}) // unlocks
	}
	if len(p.PrivateData) > mad.AcceptPrivateLen {
		s.mu.Unlock()
		return errPrivLen
	}
	f := &id.ic.REQ
	rep := mad.REPFields{LocalQPN: p.QPN & 0xffffff, StartingPSN: id.psn,
		ResponderResources: min(p.ResponderResources, f.InitiatorDepth), InitiatorDepth: min(p.InitiatorDepth, f.ResponderResources),
		TargetACKDelay: 15, RNRRetryCount: retryCount(p.RNRRetryCount), SRQ: p.SRQ, PrivateData: p.PrivateData}
	ic := id.ic
	id.state = stAccepted
	s.mu.Unlock()
	a := s.a
	if err := a.do(func(now time.Time) error { return a.cm.Accept(now, ic, &rep) }); err != nil {
		s.mu.Lock()
		id.state = stDead
		s.mu.Unlock()
		return fmt.Errorf("cm: the request is gone (the peer gave up): %w", syscall.EINVAL)
	}
	return nil
}

// Reject is rdma_reject: a REJ (reason "consumer reject") for a request received or
// a reply received, with private data.
func (s *Service) Reject(tok uint64, priv []byte) error {
	s.mu.Lock()
	id := s.ids[tok]
	if id == nil || (id.state != stRequested && id.state != stReplied) {
		s.mu.Unlock()
		if id == nil {
			return errNoID
		}
		return errIDState
	}
	if id.udp {
		return s.replyUD(id, &mad.SIDRRepFields{Status: mad.SIDRRejected, PrivateData: priv}) // unlocks
	}
	if len(priv) > mad.RejectPrivateLen {
		s.mu.Unlock()
		return errPrivLen
	}
	ic := id.ic
	id.state = stDead
	s.mu.Unlock()
	a := s.a
	if err := a.do(func(now time.Time) error { return a.cm.Reject(now, ic, mad.ReasonConsumerReject, priv) }); err != nil {
		return fmt.Errorf("cm: the connection is gone: %w", syscall.EINVAL)
	}
	return nil
}

// Establish is rdma_establish on the active side: the RTU, once the caller has
// brought its QP to RTS.
func (s *Service) Establish(tok uint64) error {
	id, err := s.lockedIn(tok, stReplied)
	if err != nil {
		return err
	}
	ic := id.ic
	id.state = stEstablished
	s.mu.Unlock()
	a := s.a
	if err := a.do(func(now time.Time) error { return a.cm.RTU(now, ic, nil) }); err != nil {
		s.mu.Lock()
		id.state = stDead
		s.mu.Unlock()
		return fmt.Errorf("cm: the connection is gone (the peer gave up): %w", syscall.ETIMEDOUT)
	}
	return nil
}

// Disconnect is rdma_disconnect: a DREQ; DISCONNECTED follows the DREP (or the
// retries' end). On a connection that has ended already (the peer disconnected,
// DISCONNECTED was reported) it does nothing and succeeds, as the kernel's rdma_cm
// answers once its id has a CM id: pyverbs' rdmacm tests disconnect the active side
// after its DISCONNECTED.
func (s *Service) Disconnect(tok uint64) error {
	s.mu.Lock()
	id := s.ids[tok]
	if id != nil && id.ic != nil && id.state == stDisconnected {
		s.mu.Unlock()
		return nil
	}
	if id == nil || (id.state != stEstablished && id.state != stAccepted) {
		s.mu.Unlock()
		if id == nil {
			return errNoID
		}
		return errIDState
	}
	ic := id.ic
	s.mu.Unlock()
	a := s.a
	err := a.do(func(now time.Time) error {
		switch ic.State() {
		case ibcm.StateDREQSent, ibcm.StateTimeWait, ibcm.StateIdle:
			// The peer's DREQ crossed this call (its DISCONNECTED is on its way to
			// the id), or the connection is gone already: as the kernel's
			// rdma_disconnect, which answers or starts the exchange and returns 0
			// whatever the CM's state, not an error (pyverbs' sync traffic test
			// disconnects both sides at once).
			return nil
		}
		return a.cm.Disconnect(now, ic, nil)
	})
	if err != nil {
		return fmt.Errorf("cm: not connected: %w", syscall.ENOTCONN)
	}
	return nil
}

// InitQPAttr is rdma_init_qp_attr: the attributes and mask that move the id's QP to
// state (INIT, RTR or RTS) for its connection.
func (s *Service) InitQPAttr(tok uint64, state verbs.QPState) (verbs.QPAttr, verbs.QPAttrMask, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	id := s.ids[tok]
	if id == nil {
		return verbs.QPAttr{}, 0, errNoID
	}
	switch state {
	case verbs.QPStateInit:
		return verbs.QPAttr{State: verbs.QPStateInit, Port: 1, PKeyIndex: 0,
				AccessFlags: verbs.AccessLocalWrite | verbs.AccessRemoteWrite | verbs.AccessRemoteRead | verbs.AccessRemoteAtomic},
			verbs.QPAttrState | verbs.QPAttrPKeyIndex | verbs.QPAttrPort | verbs.QPAttrAccessFlags, nil
	case verbs.QPStateRTR, verbs.QPStateRTS:
	default:
		return verbs.QPAttr{}, 0, fmt.Errorf("cm: no attributes for %v: %w", state, syscall.EINVAL)
	}
	if id.ic == nil || (id.state != stReplied && id.state != stRequested && id.state != stAccepted && id.state != stEstablished) {
		return verbs.QPAttr{}, 0, errIDState
	}
	var peer verbs.GID
	var destQPN, sqPSN uint32
	var maxDest, maxRd, retry, rnr, timeout uint8
	f := &id.ic.REQ // the path, the traffic class (TOS) included, is the REQ's on both sides
	if id.ic.Active {
		rep := &id.ic.REP
		peer, destQPN, sqPSN = f.Primary.RemoteGID, rep.LocalQPN, rep.StartingPSN
		maxDest, maxRd, retry, rnr = rep.InitiatorDepth, rep.ResponderResources, id.retry, rep.RNRRetryCount
	} else {
		peer, destQPN, sqPSN = f.Primary.LocalGID, f.LocalQPN, f.StartingPSN
		maxDest, maxRd, retry, rnr = f.InitiatorDepth, f.ResponderResources, f.RetryCount, f.RNRRetryCount
	}
	timeout = orDefault(f.Primary.LocalACKTimeout, localACKTimeout)
	if id.opt.timeoutSet {
		timeout = id.opt.timeout // as the kernel's rdma_init_qp_attr overrides the path's
	}
	if state == verbs.QPStateRTR {
		return verbs.QPAttr{State: verbs.QPStateRTR, PathMTU: id.mtu, DestQPN: destQPN, RQPSN: id.psn,
				MaxDestRdAtomic: maxDest, MinRNRTimer: 12,
				AH: verbs.AHAttr{DGID: peer, Port: 1, HopLimit: hopLimit, TrafficClass: f.Primary.TrafficClass}},
			verbs.QPAttrState | verbs.QPAttrAV | verbs.QPAttrPathMTU | verbs.QPAttrDestQPN | verbs.QPAttrRQPSN |
				verbs.QPAttrMaxDestRdAtomic | verbs.QPAttrMinRNRTimer, nil
	}
	return verbs.QPAttr{State: verbs.QPStateRTS, SQPSN: sqPSN, Timeout: timeout, RetryCnt: retry, RNRRetry: rnr, MaxRdAtomic: maxRd},
		verbs.QPAttrState | verbs.QPAttrSQPSN | verbs.QPAttrTimeout | verbs.QPAttrRetryCnt | verbs.QPAttrRNRRetry | verbs.QPAttrMaxQPRdAtomic, nil
}

// Destroy is rdma_destroy_id: a handshake under way is rejected, a connection
// disconnected, a port released. No event of the id comes after it returns.
func (s *Service) Destroy(tok uint64) {
	s.mu.Lock()
	id := s.ids[tok]
	if id == nil {
		s.mu.Unlock()
		return
	}
	delete(s.ids, tok)
	a := s.a
	if id.sid != 0 && s.unbindLocked(id) {
		a.mu.Lock()
		a.cm.Unreserve(id.sid) // its refusals go out with the next MADs, or at once below
		a.mu.Unlock()
	}
	if id.state == stListening {
		delete(s.listen, id.sid)
		// Under s.mu, as Listen registers: once s.mu is let go the port is free, and a
		// listener another id registers for it at once must not be the one taken out
		// (perftest's -R servers, one after another on port 18515, lost a REQ to that:
		// REJ "no listener").
		a.mu.Lock()
		a.cm.Unlisten(id.sid)
		a.mu.Unlock()
	}
	ic := id.ic
	s.mu.Unlock()
	a.do(func(now time.Time) error {
		if ic != nil {
			a.cm.Abort(now, ic)
		}
		return nil
	})
}

// dispatch takes an event of the CM (the Agent's, which serves this service only).
func (s *Service) dispatch(e ibcm.Event) {
	if e.Kind == ibcm.EventRequest || e.Kind == ibcm.EventSIDRRequest {
		s.request(e)
		return
	}
	a := s.a
	a.mu.Lock()
	id, _ := e.Conn.Context.(*svcID)
	a.mu.Unlock()
	s.mu.Lock()
	if id == nil || s.ids[id.tok] != id {
		s.mu.Unlock()
		return // destroyed: its events go nowhere
	}
	ev := ServiceEvent{ID: id.tok, Local: id.local, Remote: id.remote}
	switch e.Kind {
	case ibcm.EventReply:
		if id.state != stConnecting {
			s.mu.Unlock()
			return
		}
		id.state, id.ic = stReplied, e.Conn
		rep := &e.Conn.REP
		ev.Kind = SvcConnectResponse
		ev.Param = ServiceParam{ResponderResources: rep.InitiatorDepth, InitiatorDepth: rep.ResponderResources,
			RNRRetryCount: rep.RNRRetryCount, SRQ: rep.SRQ, QPN: rep.LocalQPN, PrivateData: e.PrivateData}
	case ibcm.EventEstablished:
		id.state = stEstablished
		ev.Kind = SvcEstablished
	case ibcm.EventRejected:
		id.state = stDead
		ev.Kind, ev.Status = SvcRejected, int(e.Reason)
		ev.Param.PrivateData = e.PrivateData
	case ibcm.EventTimeout:
		id.state = stDead
		ev.Kind, ev.Status = SvcUnreachable, -int(syscall.ETIMEDOUT)
	case ibcm.EventDisconnected:
		id.state = stDisconnected
		ev.Kind = SvcDisconnected
	case ibcm.EventTimeWaitExit:
		ev.Kind = SvcTimewaitExit
	case ibcm.EventSIDRReply:
		if id.state != stConnecting {
			s.mu.Unlock()
			return
		}
		id.state = stDead // resolved: only destroy is left, as with rdma_cm
		r := &e.Conn.SIDRRep
		ev.Param.PrivateData = e.PrivateData
		if r.Status != mad.SIDRValid {
			ev.Kind, ev.Status = SvcUnreachable, int(r.Status)
			break
		}
		ev.Kind, ev.Param.QPN, ev.QKey = SvcEstablished, r.QPN, r.QKey
		ev.AH = verbs.AHAttr{DGID: verbs.GIDFromAddr(id.remote.Addr()), Port: 1, HopLimit: hopLimit,
			TrafficClass: id.opt.tos}
	default:
		s.mu.Unlock()
		return
	}
	h := id.h
	s.mu.Unlock()
	h(ev)
}

// request makes the id of a REQ for a listening id and reports CONNECT_REQUEST to
// the listener's handler; one for nobody (or malformed) is rejected.
func (s *Service) request(e ibcm.Event) {
	a := s.a
	ic := e.Conn
	var l *svcID
	var hdr mad.CMAHeader
	var err error
	if e.Kind == ibcm.EventRequest {
		hdr, err = mad.ParseCMAHeader(ic.REQ.PrivateData)
	} else {
		hdr, err = mad.ParseCMAHeader(ic.SIDRReq.PrivateData)
	}
	s.mu.Lock()
	if err == nil {
		if l = s.listen[ic.ServiceID]; l == nil || s.closed {
			err = ErrClosed
		}
	}
	if err != nil {
		s.mu.Unlock()
		a.do(func(now time.Time) error {
			if e.Kind == ibcm.EventSIDRRequest {
				return a.cm.SIDRReply(now, ic, &mad.SIDRRepFields{Status: mad.SIDRRejected})
			}
			return a.cm.Reject(now, ic, mad.ReasonConsumerReject, nil)
		})
		return
	}
	if e.Kind == ibcm.EventSIDRRequest {
		id := &svcID{h: l.h, ps: l.ps, udp: true, state: stRequested, ic: ic, local: netip.AddrPortFrom(a.addr, l.local.Port()),
			remote: netip.AddrPortFrom(hdr.Src().Unmap(), hdr.Port())}
		s.addID(id)
		a.mu.Lock()
		ic.Context = id
		a.mu.Unlock()
		ev := ServiceEvent{Kind: SvcConnectRequest, ID: id.tok, Listen: l.tok, Local: id.local, Remote: id.remote,
			Param: ServiceParam{PrivateData: ic.SIDRReq.PrivateData[mad.CMAHeaderLen:]}}
		h := l.h
		s.mu.Unlock()
		h(ev)
		return
	}
	f := &ic.REQ
	id := &svcID{h: l.h, state: stRequested, ic: ic, psn: rand.Uint32() & 0xffffff,
		mtu:    min(a.mtu, mtuFromIB(f.PathMTU)),
		local:  netip.AddrPortFrom(a.addr, l.local.Port()),
		remote: netip.AddrPortFrom(hdr.Src().Unmap(), hdr.Port())}
	s.addID(id)
	a.mu.Lock()
	ic.Context = id
	a.mu.Unlock()
	ev := ServiceEvent{Kind: SvcConnectRequest, ID: id.tok, Listen: l.tok, Local: id.local, Remote: id.remote,
		Param: ServiceParam{ResponderResources: f.InitiatorDepth, InitiatorDepth: f.ResponderResources,
			RetryCount: f.RetryCount, RNRRetryCount: f.RNRRetryCount, SRQ: f.SRQ, QPN: f.LocalQPN,
			PrivateData: f.PrivateData[mad.CMAHeaderLen:]}}
	h := l.h
	s.mu.Unlock()
	h(ev)
}

// connectUD is rdma_connect on a UDP id: a SIDR_REQ; ESTABLISHED with the server's QP
// number, Q_Key and an address vector follows (UNREACHABLE with the SIDR status when it
// refuses, or -ETIMEDOUT). Called with s.mu held; it unlocks it.
func (s *Service) connectUD(id *svcID, p *ServiceParam) error {
	if len(p.PrivateData) > mad.UDPrivateLen {
		s.mu.Unlock()
		return errPrivLen
	}
	a := s.a
	priv := make([]byte, mad.SIDRReqPrivateLen)
	mad.CMAHeader(priv).Encode(&mad.CMAHeaderFields{Port: id.local.Port(), Src: a.addr, Dst: id.remote.Addr()})
	copy(priv[mad.CMAHeaderLen:], p.PrivateData)
	req := mad.SIDRReqFields{PKey: mad.PKeyDefault, ServiceID: mad.ServiceID(s.space(id), id.remote.Port()), PrivateData: priv}
	return s.start(id, func(now time.Time) (*ibcm.Conn, error) { return a.cm.SIDRRequest(now, id.remote.Addr(), &req) })
}

// replyUD answers a SIDR_REQ (rdma_accept or rdma_reject on a UDP id's request).
// Called with s.mu held; it unlocks it.
func (s *Service) replyUD(id *svcID, rep *mad.SIDRRepFields) error {
	if len(rep.PrivateData) > mad.SIDRRepPrivateLen {
		s.mu.Unlock()
		return errPrivLen
	}
	ic := id.ic
	id.state = stDead
	s.mu.Unlock()
	a := s.a
	if err := a.do(func(now time.Time) error { return a.cm.SIDRReply(now, ic, rep) }); err != nil {
		return fmt.Errorf("cm: the request is gone: %w", syscall.EINVAL)
	}
	return nil
}

// Join is rdma_join_multicast on a UDP id: on RoCE no MAD is sent, so MULTICAST_JOIN
// follows at once with the group's address vector (its MGID the group's address as a
// GID), QPN 0xFFFFFF and rdma_cm's UDP Q_Key. The caller attaches its QP.
func (s *Service) Join(tok uint64, group netip.Addr, sendOnly bool) error {
	group = group.Unmap()
	s.mu.Lock()
	id := s.ids[tok]
	var err error
	switch {
	case id == nil:
		err = errNoID
	case !id.udp:
		err = fmt.Errorf("cm: multicast needs a UDP id: %w", syscall.EINVAL)
	case !group.IsMulticast() || group.Is4() != s.a.addr.Is4():
		err = fmt.Errorf("%w: %v: %w", ErrNotMulticast, group, syscall.EINVAL)
	}
	if err != nil {
		s.mu.Unlock()
		return err
	}
	if id.state == stIdle {
		if err := s.bindLocked(id, 0); err != nil {
			s.mu.Unlock()
			return err
		}
		id.state = stBound
	}
	if id.groups == nil {
		id.groups = map[netip.Addr]struct{}{}
	}
	if _, ok := id.groups[group]; ok {
		s.mu.Unlock()
		return fmt.Errorf("cm: %v joined already: %w", group, syscall.EADDRINUSE)
	}
	id.groups[group] = struct{}{}
	mgid := verbs.GIDFromAddr(group)
	ev := ServiceEvent{Kind: SvcMulticastJoin, ID: tok, Local: id.local, Remote: netip.AddrPortFrom(group, 0),
		Param: ServiceParam{QPN: McastQPN}, QKey: UDPQKey, AH: verbs.AHAttr{DGID: mgid, Port: 1, HopLimit: hopLimit}}
	h := id.h
	s.mu.Unlock()
	go h(ev)
	return nil
}

// Leave is rdma_leave_multicast: the id is no longer a member of group (the caller
// detaches its QP). No event follows.
func (s *Service) Leave(tok uint64, group netip.Addr) error {
	group = group.Unmap()
	s.mu.Lock()
	defer s.mu.Unlock()
	id := s.ids[tok]
	if id == nil {
		return errNoID
	}
	if _, ok := id.groups[group]; !ok {
		return fmt.Errorf("cm: %v is not joined: %w", group, syscall.EADDRNOTAVAIL)
	}
	delete(id.groups, group)
	return nil
}

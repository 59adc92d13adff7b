package cm

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"sync"
	"syscall"
	"time"

	"github.com/goverbs/goverbs/cm/mad"
	"github.com/goverbs/goverbs/verbs"
	verbsattach "github.com/goverbs/goverbs/verbs/attach"
)

// cm on kernel RDMA devices (rxe, RNICs), under the ibverbs build tag: a device of the
// ibverbs provider has no QP1 for user space, so its Agent asks the kernel's rdma_cm,
// through the system's librdmacm, instead of speaking MADs. The Go API is the same;
// this file is the Go side of that path, the cgo side is kernel_ibverbs.go behind
// kernelBackend.
//
// Every QP is user-managed, as librdmacm allows (rdma_connect(3), rdma_accept(3) with
// conn_param.qp_num and no QP on the id): only its number travels in the CM messages,
// so the program's QP, created on the ibverbs provider's own ibv_context, serves
// although librdmacm's id has a context of its own on the same device. The kernel
// computes the attributes (rdma_init_qp_attr(3)) and the CM moves the QP with them
// through verbs, INIT, RTR and RTS, on both sides before the final step (rdma_establish
// on the active side, rdma_accept on the passive one), so the QP is in RTS when the
// peer may send.

// ErrNotSupported: the call has no implementation on kernel RDMA devices yet.
var ErrNotSupported = errors.New("cm: not supported on kernel RDMA devices yet")

// kernelBackend is librdmacm as the kernel path uses it: ids named by tokens, the
// events of all of them delivered to the handler given to the backend, one at a time.
type kernelBackend interface {
	newID(udp bool) (uint64, error) // rdma_create_id, RDMA_PS_TCP or RDMA_PS_UDP
	bind(tok uint64, addr netip.Addr) error
	join(tok uint64, group netip.Addr, sendOnly bool) error // rdma_join_multicast(_ex)
	resolveAddr(tok uint64, src netip.Addr, dst netip.AddrPort, timeout time.Duration) error
	resolveRoute(tok uint64, timeout time.Duration) error
	// device names the device the id is bound to (id->verbs): its name and node GUID.
	device(tok uint64) (name string, guid uint64, err error)
	localAddr(tok uint64) netip.AddrPort
	listen(tok uint64, addr netip.AddrPort, backlog int) (port uint16, err error)
	connect(tok uint64, p *kparam, priv []byte) error
	accept(tok uint64, p *kparam, priv []byte) error
	reject(tok uint64, priv []byte) error
	establish(tok uint64) error
	disconnect(tok uint64) error
	initQPAttr(tok uint64, state verbs.QPState) (verbs.QPAttr, verbs.QPAttrMask, error)
	setOption(tok uint64, opt Option, val uint32) error // rdma_set_option, level RDMA_OPTION_ID
	destroy(tok uint64)
	close() error
}

// startingBackend is a kernelBackend whose events start flowing to a handler.
type startingBackend interface {
	kernelBackend
	start(handle func(kevent))
}

// startKernelAgent makes the Agent of dev on backend b (librdmacm, or an attached
// device's daemon) and starts its events; b is closed if that fails.
func startKernelAgent(dev *verbs.Device, b startingBackend, cfg *Config) (*Agent, error) {
	a, err := newKernelAgent(dev, b, cfg)
	if err != nil {
		b.close()
		return nil, err
	}
	b.start(func(e kevent) { a.k.handle(a, e) })
	return a, nil
}

// Address and route resolution time out as rping's and ucmatose's do (2 s each).
const kernelResolveTimeout = 2 * time.Second

// kernelAgent is an Agent's kernel half: the backend and who each token is.
type kernelAgent struct {
	b   kernelBackend
	dev string // the verbs device's name, which every id must be bound to

	mu      sync.Mutex
	conns   map[uint64]*Conn
	listens map[uint64]*Listener
}

// kconn is a Conn's kernel half.
type kconn struct {
	tok  uint64
	ev   chan kevent   // handshake events, for the Dial or Accept waiting
	gone chan struct{} // closed when the id is destroyed
	drop sync.Once

	mu sync.Mutex
	up bool // the handshake finished: a DISCONNECTED ends the connection
}

// newKernelAgent makes the Agent of a kernel device over b. Its address is the
// device's first RoCE v2 GID that is an IPv4 address (else its first RoCE v2 GID, else
// GID 0): what rdma_cm binds to on a device with one IP address.
func newKernelAgent(dev *verbs.Device, b kernelBackend, cfg *Config) (*Agent, error) {
	pa, err := dev.QueryPort(1)
	if err != nil {
		return nil, err
	}
	gid, idx, err := kernelGID(dev)
	if err != nil {
		return nil, err
	}
	a := &Agent{dev: dev, gid: gid, gidIndex: idx, addr: gid.Addr().Unmap(), mtu: pa.ActiveMTU, guid: dev.Query().NodeGUID,
		listeners: map[uint64]*Listener{}, conns: map[*Conn]struct{}{}}
	a.sent0.L = &a.mu
	a.k = &kernelAgent{b: b, dev: dev.Name(), conns: map[uint64]*Conn{}, listens: map[uint64]*Listener{}}
	_ = cfg // the kernel's rdma_cm has its own timing (configfs, not per id)
	return a, nil
}

func kernelGID(dev *verbs.Device) (verbs.GID, uint8, error) {
	tbl, err := dev.GIDTable(1)
	if err != nil {
		return verbs.GID{}, 0, err
	}
	var v2 *verbs.GIDEntry
	for i := range tbl {
		g := &tbl[i]
		if g.GID.IsZero() || g.Type != "RoCE v2" || g.Index > 0xff {
			continue
		}
		if g.GID.Addr().Unmap().Is4() {
			return g.GID, uint8(g.Index), nil
		}
		if v2 == nil {
			v2 = g
		}
	}
	if v2 != nil {
		return v2.GID, uint8(v2.Index), nil
	}
	g, err := dev.QueryGID(1, 0)
	return g, 0, err
}

// handle takes one event from the backend's loop. It must not block: the loop
// serves every id of the agent.
func (k *kernelAgent) handle(a *Agent, e kevent) {
	if e.kind == evConnectRequest {
		k.request(a, e)
		return
	}
	k.mu.Lock()
	c := k.conns[e.tok]
	k.mu.Unlock()
	if c == nil {
		return
	}
	kc := c.kc
	if e.kind == evTimewaitExit || e.kind == evAddrChange {
		return
	}
	// Under kc.mu, so that markUp, which drains the handshake's events under it,
	// sees a disconnection either queued or after it set up.
	kc.mu.Lock()
	if kc.up && (e.kind == evDisconnected || e.kind == evDeviceRemoval) {
		kc.mu.Unlock()
		if e.kind == evDisconnected {
			c.takeArrived()
		}
		c.finish(ErrDisconnected)
		return
	}
	select {
	case kc.ev <- e:
	default:
	}
	kc.mu.Unlock()
}

// register makes c the Conn of the id tok, a new one (of the UDP port space when udp)
// when tok is 0.
func (k *kernelAgent) register(a *Agent, c *Conn, tok uint64, udp bool) error {
	if tok == 0 {
		var err error
		if tok, err = k.b.newID(udp); err != nil {
			return err
		}
	}
	c.kc = &kconn{tok: tok, ev: make(chan kevent, 8), gone: make(chan struct{})}
	a.mu.Lock()
	closed := a.closed
	if !closed {
		a.conns[c] = struct{}{}
	}
	a.mu.Unlock()
	if closed {
		k.b.destroy(tok)
		return ErrClosed
	}
	k.mu.Lock()
	k.conns[tok] = c
	k.mu.Unlock()
	return nil
}

// release destroys a Conn's id once (the kernel sends a REJ or DREQ if the
// connection needs one) and forgets it.
func (k *kernelAgent) release(a *Agent, c *Conn) {
	kc := c.kc
	kc.drop.Do(func() {
		k.mu.Lock()
		delete(k.conns, kc.tok)
		k.mu.Unlock()
		a.track(c, false)
		k.b.destroy(kc.tok)
		close(kc.gone)
	})
}

// wait waits for the event want of a handshake; the others that end one are its
// errors. ctx's end abandons the handshake (the caller releases the id).
func (kc *kconn) wait(ctx context.Context, want cmEvent) (kevent, error) {
	for {
		select {
		case e := <-kc.ev:
			if e.kind == want {
				return e, nil
			}
			if err := e.err(); err != nil {
				return e, err
			}
		case <-kc.gone:
			return kevent{}, ErrClosed
		case <-ctx.Done():
			return kevent{}, ctx.Err()
		}
	}
}

// pendingErr is the error of a handshake-ending event queued, or arriving within
// pendingWait, if any: a call the kernel refused because the peer gave up says so
// rather than EINVAL, as the software CM's pendingErr does.
func (kc *kconn) pendingErr() error {
	t := time.NewTimer(pendingWait)
	defer t.Stop()
	for {
		select {
		case e := <-kc.ev:
			if err := e.err(); err != nil {
				return err
			}
		case <-t.C:
			return nil
		}
	}
}

// markUp ends the handshake: from now on a DISCONNECTED ends the connection, also
// one that came while the handshake's last step was under way.
func (c *Conn) markUp() {
	kc := c.kc
	kc.mu.Lock()
	kc.up = true
	ended := false
	for len(kc.ev) > 0 {
		if e := <-kc.ev; e.kind == evDisconnected || e.kind == evDeviceRemoval {
			ended = true
		}
	}
	kc.mu.Unlock()
	if ended {
		c.finish(ErrDisconnected)
	}
}

// takeArrived gives the QP's device a moment to take what has arrived for it before a
// peer's disconnect moves the QP to ERR (finish). On a Go client running its own
// engine on a goverbs serve address, the disconnect and the peer's last packets come by
// different paths: the event through the daemon's event socket, the packets through
// the kernel's UDP. The peer's ACK of this side's last SEND left before its DREQ (the
// engine sends an owed ACK before rdma_cm's DREQ and before its QP leaves RTS), but
// the event could be handled first, and the SEND was flushed though its ACK sat in the
// socket (capitest's rdma_server, Go server and C client: 2 of 30 runs under load).
// Linux's rdma_cm leaves the QP alone until the program disconnects; this package
// moves it to ERR at once, so it first drives the device (verbs.Device.Progress) until
// a poll has read the socket, or, where the device's own goroutine holds the socket,
// lets that goroutine run for takeArrivedWait. Other devices are not touched: their
// events and packets come in order (the daemon's engine, the kernel's).
func (c *Conn) takeArrived() {
	c.mu.Lock()
	qp := c.qp
	c.mu.Unlock()
	if qp == nil || qp.Device() == nil || !verbsattach.OwnEngine(qp.Device().Commander()) {
		return
	}
	for deadline := time.Now().Add(takeArrivedWait); !qp.Device().Progress() && time.Now().Before(deadline); {
		time.Sleep(takeArrivedWait / 10)
	}
}

// takeArrivedWait bounds takeArrived's wait.
const takeArrivedWait = 2 * time.Millisecond

// ownAttrs are the attributes a side sets over the kernel's: the Param's RNR NAK
// delay (rdma_cm's would be 0, 655 ms), and on the passive side the READ depths
// agreed, as librdmacm takes them from rdma_accept's parameters.
type ownAttrs struct {
	minRNRTimer                  uint8
	depths                       bool
	maxDestRdAtomic, maxRdAtomic uint8
}

// modify moves qp to state with the attributes the kernel's CM computed for the id,
// o's set over them where the kernel sets them too.
func (k *kernelAgent) modify(tok uint64, qp *verbs.QP, state verbs.QPState, o *ownAttrs) error {
	attr, mask, err := k.b.initQPAttr(tok, state)
	if err != nil {
		return err
	}
	if o != nil {
		if mask&verbs.QPAttrMinRNRTimer != 0 {
			attr.MinRNRTimer = o.minRNRTimer
		}
		if o.depths && mask&verbs.QPAttrMaxDestRdAtomic != 0 {
			attr.MaxDestRdAtomic = o.maxDestRdAtomic
		}
		if o.depths && mask&verbs.QPAttrMaxQPRdAtomic != 0 {
			attr.MaxRdAtomic = o.maxRdAtomic
		}
	}
	if err := qp.Modify(&attr, mask); err != nil {
		return fmt.Errorf("cm: moving QP %#x to %v: %w", qp.QPN(), state, err)
	}
	return nil
}

// setOptions sets p's id options on the id: the ACK timeout, and on the active side
// (tos) the TOS; the passive side's path is the REQ's, as Accept documents.
func (k *kernelAgent) setOptions(tok uint64, p *Param, tos bool) error {
	if tos && p.TOS != 0 {
		if err := k.b.setOption(tok, OptionTOS, uint32(p.TOS)); err != nil {
			return err
		}
	}
	if p.ACKTimeout != 0 {
		return k.b.setOption(tok, OptionACKTimeout, uint32(p.ACKTimeout))
	}
	return nil
}

// bringUp moves qp through INIT (again, on the active side: before the REQ the
// kernel's INIT attributes grant no remote access, as rdma_cm has no connection to
// take the rights from; now they grant WRITE, and READ and atomics with responder
// resources), RTR and RTS.
func (k *kernelAgent) bringUp(tok uint64, qp *verbs.QP, o *ownAttrs) error {
	for _, st := range []verbs.QPState{verbs.QPStateInit, verbs.QPStateRTR, verbs.QPStateRTS} {
		if err := k.modify(tok, qp, st, o); err != nil {
			return err
		}
	}
	return nil
}

// checkDevice fails when librdmacm bound the id to another device than the agent's
// (rdma_resolve_addr binds to the device owning the source address).
func (k *kernelAgent) checkDevice(tok uint64, a *Agent) error {
	name, guid, err := k.b.device(tok)
	if err != nil {
		return err
	}
	if name != k.dev || guid != a.guid {
		return fmt.Errorf("cm: %v is reached through device %s (GUID %#016x), not the agent's %s (GUID %#016x)",
			a.addr, name, guid, k.dev, a.guid)
	}
	return nil
}

// resolve is rdma_resolve_addr from the agent's address and rdma_resolve_route, each
// waited for, with the check that the id is on the agent's device.
func (k *kernelAgent) resolve(ctx context.Context, a *Agent, c *Conn, raddr netip.AddrPort) error {
	kc := c.kc
	if err := k.b.resolveAddr(kc.tok, a.addr, raddr, kernelResolveTimeout); err != nil {
		return err
	}
	if _, err := kc.wait(ctx, evAddrResolved); err != nil {
		return err
	}
	if err := k.checkDevice(kc.tok, a); err != nil {
		return err
	}
	if err := k.b.resolveRoute(kc.tok, kernelResolveTimeout); err != nil {
		return err
	}
	if _, err := kc.wait(ctx, evRouteResolved); err != nil {
		return err
	}
	c.local = k.b.localAddr(kc.tok)
	return nil
}

// kernelDial is Dial's kernel half, for c with its QP and remote address set.
func (a *Agent) kernelDial(ctx context.Context, c *Conn, p *Param) (*Conn, error) {
	k, qp := a.k, c.qp
	if err := k.register(a, c, 0, false); err != nil {
		return nil, c.abandon(err)
	}
	kc := c.kc
	fail := func(err error) (*Conn, error) {
		k.release(a, c)
		return nil, c.abandon(err)
	}
	// The options before the route is resolved: rdma_cm takes the route's traffic
	// class from TOS, and its packet lifetime from the ACK timeout.
	if err := k.setOptions(kc.tok, p, true); err != nil {
		return fail(err)
	}
	if err := k.resolve(ctx, a, c, c.remote); err != nil {
		return fail(err)
	}
	// INIT now, as rdma_create_qp does once the id has its device; a QP the program
	// brought to INIT itself (InitQP) gets the same port and P_Key again.
	if err := k.modify(kc.tok, qp, verbs.QPStateInit, nil); err != nil {
		return fail(err)
	}
	kp := kparam{responderResources: p.ResponderResources, initiatorDepth: p.InitiatorDepth,
		retryCount: retryCount(p.RetryCount), rnrRetryCount: retryCount(p.RNRRetryCount),
		srq: p.QPInit.SRQ != nil, qpn: qp.QPN()}
	if err := k.b.connect(kc.tok, &kp, p.PrivateData); err != nil {
		return fail(err)
	}
	e, err := kc.wait(ctx, evConnectResponse)
	if err != nil {
		return fail(err)
	}
	c.privateData = fit(e.priv, mad.REPPrivateLen)
	if err := k.bringUp(kc.tok, qp, &ownAttrs{minRNRTimer: orDefault(p.MinRNRTimer, 12)}); err != nil {
		k.b.reject(kc.tok, nil)
		return fail(err)
	}
	if err := k.b.establish(kc.tok); err != nil {
		return fail(err)
	}
	c.markUp()
	return c, nil
}

func (a *Agent) kernelListen(space mad.PortSpace, port uint16, backlog int) (*Listener, error) {
	return a.kernelListenWith(space, port, &ListenConfig{Backlog: backlog})
}

// kernelListenWith is a listen with lc's options, set on the id before it binds.
func (a *Agent) kernelListenWith(space mad.PortSpace, port uint16, lc *ListenConfig) (*Listener, error) {
	if space != mad.PortSpaceTCP && space != mad.PortSpaceUDP {
		return nil, fmt.Errorf("%w: port space %v", ErrNotSupported, space)
	}
	backlog := lc.Backlog
	if backlog <= 0 {
		backlog = DefaultBacklog
	}
	k := a.k
	a.mu.Lock()
	closed := a.closed
	a.mu.Unlock()
	if closed {
		return nil, ErrClosed
	}
	tok, err := k.b.newID(space == mad.PortSpaceUDP)
	if err != nil {
		return nil, err
	}
	if lc.ReuseAddr {
		err = k.b.setOption(tok, OptionReuseAddr, 1)
	}
	if err == nil && lc.AFOnly {
		err = k.b.setOption(tok, OptionAFOnly, 1)
	}
	var got uint16
	if err == nil {
		got, err = k.b.listen(tok, netip.AddrPortFrom(a.addr, port), backlog)
	}
	if err == nil {
		err = k.checkDevice(tok, a)
	}
	if err != nil {
		k.b.destroy(tok)
		if errors.Is(err, syscall.EADDRINUSE) {
			return nil, ErrPortInUse
		}
		return nil, err
	}
	l := &Listener{a: a, space: space, port: got, ktok: tok, reqs: make(chan *Request, backlog), closed: make(chan struct{})}
	k.mu.Lock()
	k.listens[tok] = l
	k.mu.Unlock()
	a.mu.Lock()
	a.listeners[tok] = l
	a.mu.Unlock()
	return l, nil
}

func (l *Listener) kernelClose() {
	a, k := l.a, l.a.k
	k.mu.Lock()
	delete(k.listens, l.ktok)
	k.mu.Unlock()
	a.mu.Lock()
	delete(a.listeners, l.ktok)
	a.mu.Unlock()
	k.b.destroy(l.ktok)
}

// request queues a CONNECT_REQUEST for its listener's Accept; one nobody can take is
// rejected at once.
func (k *kernelAgent) request(a *Agent, e kevent) {
	k.mu.Lock()
	l := k.listens[e.listen]
	k.mu.Unlock()
	c := newConn(a)
	c.remote, c.local = e.remote, e.local
	ud := l != nil && l.space == mad.PortSpaceUDP
	if ud {
		c.privateData = fit(e.priv, mad.UDPrivateLen)
	} else {
		c.privateData = fit(e.priv, mad.ConnectPrivateLen)
	}
	if l == nil || k.register(a, c, e.tok, ud) != nil {
		k.b.reject(e.tok, nil)
		k.b.destroy(e.tok)
		return
	}
	r := &Request{c: c, Remote: c.remote, Local: c.local, PrivateData: c.privateData, Transport: verbs.QPTypeUD}
	if !ud {
		// The kernel's ib_cm swaps the REQ's READ depths into the receiver's view
		// (responder_resources is the REQ's initiator depth); a Request has them as the
		// peer sent them, as the software CM's does.
		r.ResponderResources, r.InitiatorDepth = e.param.initiatorDepth, e.param.responderResources
		r.RetryCount, r.RNRRetryCount = e.param.retryCount, e.param.rnrRetryCount
		r.Transport, r.PathMTU, r.QPN = verbs.QPTypeRC, a.mtu, e.param.qpn
	}
	select {
	case <-l.closed:
	case l.reqs <- r:
		return
	default:
	}
	k.b.reject(e.tok, nil)
	k.release(a, c)
}

func (r *Request) kernelAccept(ctx context.Context, p *Param) (*Conn, error) {
	c, a := r.c, r.c.a
	k, kc := a.k, c.kc
	fail := func(err error) (*Conn, error) {
		k.release(a, c)
		return nil, c.abandon(err)
	}
	qp, own, err := p.qp(a)
	if err != nil {
		k.b.reject(kc.tok, nil)
		return fail(err)
	}
	c.mu.Lock()
	c.qp, c.ownQP = qp, own
	c.mu.Unlock()
	if qp.Type() != r.Transport {
		k.b.reject(kc.tok, nil)
		return fail(ErrQP)
	}
	if err := k.setOptions(kc.tok, p, false); err != nil {
		k.b.reject(kc.tok, nil)
		return fail(err)
	}
	respRes, initDepth := min(p.ResponderResources, r.InitiatorDepth), min(p.InitiatorDepth, r.ResponderResources)
	err = k.bringUp(kc.tok, qp, &ownAttrs{minRNRTimer: orDefault(p.MinRNRTimer, 12), depths: true,
		maxDestRdAtomic: respRes, maxRdAtomic: initDepth})
	if err != nil {
		// The kernel refuses the attributes of a request whose peer gave up: say so.
		k.b.reject(kc.tok, nil)
		return fail(kc.orPending(err))
	}
	kp := kparam{responderResources: respRes, initiatorDepth: initDepth,
		rnrRetryCount: retryCount(p.RNRRetryCount), srq: p.QPInit.SRQ != nil, qpn: qp.QPN()}
	if err := k.b.accept(kc.tok, &kp, p.PrivateData); err != nil {
		return fail(kc.orPending(err))
	}
	if _, err := kc.wait(ctx, evEstablished); err != nil {
		return fail(err)
	}
	c.markUp()
	return c, nil
}

func (r *Request) kernelReject(privateData []byte) error {
	c, a := r.c, r.c.a
	err := a.k.b.reject(c.kc.tok, privateData)
	if err != nil {
		err = c.kc.orPending(err) // the peer gave up first: its event says how
	}
	a.k.release(a, c)
	c.abandon(nil)
	return err
}

// kernelDisconnect is rdma_disconnect, once sendDREQ has checked the private data and
// moved the QP to ERR. Its DREQ carries no private data: librdmacm has no way to send
// any, and the Go API shows a peer's DREQ data to nobody, so dropping it changes
// nothing a program can see.
func (c *Conn) kernelDisconnect() {
	if err := c.a.k.b.disconnect(c.kc.tok); err != nil {
		c.finish(ErrDisconnected) // not connected any more: it has ended
	}
}

// kernelClose ends every listener and connection, then the backend.
func (a *Agent) kernelClose(ls []*Listener, cs []*Conn) error {
	for _, l := range ls {
		l.Close()
	}
	for _, c := range cs {
		c.finish(ErrClosed)
	}
	return a.k.b.close()
}

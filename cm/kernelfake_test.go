package cm

import (
	"bytes"
	"context"
	"errors"
	"net/netip"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/goverbs/goverbs/cm/mad"
	"github.com/goverbs/goverbs/verbs"
)

// The kernel path's Go side (kernel.go, kernel_ud.go) runs here without a kernel
// device: fakeKernel plays the kernel's rdma_cm between agents of software devices,
// computing the QP attributes rdma_init_qp_attr would, so the software QPs the agents
// bring up really connect and carry data. It follows rdma_cm where the Go side relies
// on it: events per channel in order, private data padded to the message's field,
// INIT before the connection with no remote rights, a destroyed id's peer told.

type fakeKernel struct {
	mu     sync.Mutex
	next   uint64
	ids    map[uint64]*fakeID
	listen map[fakeService]uint64
}

type fakeService struct {
	port uint16
	udp  bool
}

type fakeID struct {
	ch            *fakeChannel
	udp           bool
	local, remote netip.AddrPort
	peer          uint64
	mine, theirs  kparam // this side's and the peer's connection parameters
	connected     bool
	// rdma_set_option's: the path's traffic class (the active side's TOS, which the
	// passive id takes from the REQ), the ACK timeout, REUSEADDR and AFONLY.
	tos               uint8
	timeout           uint8
	timeoutSet        bool
	reuseAddr, afOnly bool
}

// fakeChannel is one agent's event channel: a kernelBackend.
type fakeChannel struct {
	k       *fakeKernel
	dev     string
	guid    uint64
	events  chan kevent
	done    chan struct{}
	handler func(kevent)
	mu      sync.Mutex
	closed  bool
}

func newFakeKernel() *fakeKernel {
	return &fakeKernel{ids: map[uint64]*fakeID{}, listen: map[fakeService]uint64{}}
}

// agent makes the kernel-path agent of s's device over a channel of k, replacing s's
// software agent.
func (k *fakeKernel) agent(t *testing.T, s *side) *fakeChannel {
	t.Helper()
	s.a.Close()
	ch := &fakeChannel{k: k, dev: s.dev.Name(), guid: s.dev.Query().NodeGUID,
		events: make(chan kevent, 1024), done: make(chan struct{})}
	a, err := newKernelAgent(s.dev, ch, nil)
	if err != nil {
		t.Fatal(err)
	}
	ch.handler = func(e kevent) { a.k.handle(a, e) }
	go func() {
		defer close(ch.done)
		for e := range ch.events {
			ch.handler(e)
		}
	}()
	s.a = a
	t.Cleanup(func() { a.Close() })
	return ch
}

// deliver queues an event for the id's channel (the caller holds k.mu).
func (k *fakeKernel) deliver(tok uint64, e kevent) {
	id := k.ids[tok]
	if id == nil {
		return
	}
	e.tok = tok
	id.ch.mu.Lock()
	if !id.ch.closed {
		id.ch.events <- e
	}
	id.ch.mu.Unlock()
}

func (c *fakeChannel) newID(udp bool) (uint64, error) {
	k := c.k
	k.mu.Lock()
	defer k.mu.Unlock()
	k.next++
	k.ids[k.next] = &fakeID{ch: c, udp: udp}
	return k.next, nil
}

// lock takes the kernel's lock (the caller releases it) and finds the channel's id.
func (c *fakeChannel) lock(tok uint64) (*fakeKernel, *fakeID, error) {
	c.k.mu.Lock()
	id, err := c.id(tok)
	return c.k, id, err
}

func (c *fakeChannel) id(tok uint64) (*fakeID, error) {
	id := c.k.ids[tok]
	if id == nil || id.ch != c {
		return nil, syscall.EINVAL
	}
	return id, nil
}

func (c *fakeChannel) resolveAddr(tok uint64, src netip.Addr, dst netip.AddrPort, _ time.Duration) error {
	k, id, err := c.lock(tok)
	defer k.mu.Unlock()
	if err != nil {
		return err
	}
	id.local, id.remote = netip.AddrPortFrom(src, uint16(40000+tok)), dst
	k.deliver(tok, kevent{kind: evAddrResolved})
	return nil
}

func (c *fakeChannel) resolveRoute(tok uint64, _ time.Duration) error {
	k, _, err := c.lock(tok)
	defer k.mu.Unlock()
	if err != nil {
		return err
	}
	k.deliver(tok, kevent{kind: evRouteResolved})
	return nil
}

func (c *fakeChannel) bind(tok uint64, addr netip.Addr) error {
	c.k.mu.Lock()
	defer c.k.mu.Unlock()
	id, err := c.id(tok)
	if err == nil {
		id.local = netip.AddrPortFrom(addr, 0)
	}
	return err
}

func (c *fakeChannel) join(tok uint64, group netip.Addr, _ bool) error {
	k, _, err := c.lock(tok)
	defer k.mu.Unlock()
	if err != nil {
		return err
	}
	k.deliver(tok, kevent{kind: evMulticastJoin, ud: udParam{qpn: McastQPN, qkey: UDPQKey,
		ah: verbs.AHAttr{DGID: verbs.GIDFromAddr(group), Port: 1, HopLimit: 64}}})
	return nil
}

func (c *fakeChannel) device(uint64) (string, uint64, error) { return c.dev, c.guid, nil }

func (c *fakeChannel) localAddr(tok uint64) netip.AddrPort {
	c.k.mu.Lock()
	defer c.k.mu.Unlock()
	if id := c.k.ids[tok]; id != nil {
		return id.local
	}
	return netip.AddrPort{}
}

func (c *fakeChannel) listen(tok uint64, addr netip.AddrPort, _ int) (uint16, error) {
	k, id, err := c.lock(tok)
	defer k.mu.Unlock()
	if err != nil {
		return 0, err
	}
	port := addr.Port()
	for port == 0 {
		if p := ephemeralPort(); k.listen[fakeService{p, id.udp}] == 0 {
			port = p
		}
	}
	if k.listen[fakeService{port, id.udp}] != 0 {
		return 0, syscall.EADDRINUSE
	}
	k.listen[fakeService{port, id.udp}] = tok
	id.local = netip.AddrPortFrom(addr.Addr(), port)
	return port, nil
}

func (c *fakeChannel) connect(tok uint64, p *kparam, priv []byte) error {
	k, id, err := c.lock(tok)
	defer k.mu.Unlock()
	if err != nil {
		return err
	}
	id.mine = *p
	ltok := k.listen[fakeService{id.remote.Port(), id.udp}]
	l := k.ids[ltok]
	if l == nil {
		if id.udp {
			k.deliver(tok, kevent{kind: evUnreachable, status: int(mad.SIDRServiceIDNotSupported)})
		} else {
			k.deliver(tok, kevent{kind: evRejected, status: int(mad.ReasonInvalidServiceID)})
		}
		return nil
	}
	k.next++
	k.ids[k.next] = &fakeID{ch: l.ch, udp: id.udp, local: l.local, remote: id.local, peer: tok, theirs: *p, tos: id.tos}
	id.peer = k.next
	n := mad.ConnectPrivateLen
	if id.udp {
		n = mad.UDPrivateLen
	}
	// Linux's ib_cm reports the READ depths from the receiver's side: the REQ's
	// initiator depth as responder_resources, and the other way round.
	rp := *p
	rp.responderResources, rp.initiatorDepth = p.initiatorDepth, p.responderResources
	k.deliver(k.next, kevent{kind: evConnectRequest, listen: ltok, priv: fit(priv, n), param: rp,
		local: l.local, remote: id.local})
	return nil
}

func (c *fakeChannel) accept(tok uint64, p *kparam, priv []byte) error {
	k, id, err := c.lock(tok)
	defer k.mu.Unlock()
	if err != nil || k.ids[id.peer] == nil {
		return syscall.EINVAL
	}
	id.mine = *p
	peer := k.ids[id.peer]
	peer.theirs = *p
	if id.udp {
		k.deliver(id.peer, kevent{kind: evEstablished, priv: fit(priv, mad.SIDRRepPrivateLen), ud: udParam{qpn: p.qpn,
			qkey: UDPQKey, ah: verbs.AHAttr{DGID: verbs.GIDFromAddr(id.local.Addr()), Port: 1, HopLimit: 64}}})
		return nil
	}
	k.deliver(id.peer, kevent{kind: evConnectResponse, priv: fit(priv, mad.REPPrivateLen), param: *p})
	return nil
}

func (c *fakeChannel) establish(tok uint64) error {
	k, id, err := c.lock(tok)
	defer k.mu.Unlock()
	if err != nil || k.ids[id.peer] == nil {
		return syscall.EINVAL
	}
	id.connected, k.ids[id.peer].connected = true, true
	k.deliver(id.peer, kevent{kind: evEstablished})
	return nil
}

func (c *fakeChannel) reject(tok uint64, priv []byte) error {
	k, id, err := c.lock(tok)
	defer k.mu.Unlock()
	if err != nil {
		return err
	}
	if id.udp {
		k.deliver(id.peer, kevent{kind: evUnreachable, status: int(mad.SIDRRejected), priv: fit(priv, mad.SIDRRepPrivateLen)})
	} else {
		k.deliver(id.peer, kevent{kind: evRejected, status: int(mad.ReasonConsumerReject), priv: fit(priv, mad.RejectPrivateLen)})
	}
	if p := k.ids[id.peer]; p != nil {
		p.peer = 0
	}
	id.peer = 0
	return nil
}

func (c *fakeChannel) disconnect(tok uint64) error {
	k, id, err := c.lock(tok)
	defer k.mu.Unlock()
	if err != nil || !id.connected {
		return syscall.EINVAL
	}
	k.hangUp(tok)
	return nil
}

// hangUp ends a connection: DISCONNECTED on both ends (k.mu held).
func (k *fakeKernel) hangUp(tok uint64) {
	id := k.ids[tok]
	for _, t := range []uint64{tok, id.peer} {
		if p := k.ids[t]; p != nil && p.connected {
			p.connected = false
			k.deliver(t, kevent{kind: evDisconnected})
		}
	}
}

// initQPAttr gives what rdma_init_qp_attr gives for RoCE: before a connection exists
// an INIT without remote rights; then the rights, the peer's QPN and address, PSN 0
// both ways, and the READ depths of the handshake.
func (c *fakeChannel) initQPAttr(tok uint64, st verbs.QPState) (verbs.QPAttr, verbs.QPAttrMask, error) {
	k, id, err := c.lock(tok)
	defer k.mu.Unlock()
	if err != nil {
		return verbs.QPAttr{}, 0, err
	}
	known := id.theirs.qpn != 0
	switch st {
	case verbs.QPStateInit:
		a := verbs.QPAttr{State: st, Port: 1}
		if known {
			a.AccessFlags = verbs.AccessRemoteWrite
			if id.mine.responderResources > 0 || id.theirs.initiatorDepth > 0 {
				a.AccessFlags |= verbs.AccessRemoteRead | verbs.AccessRemoteAtomic
			}
		}
		return a, verbs.QPAttrState | verbs.QPAttrAccessFlags | verbs.QPAttrPKeyIndex | verbs.QPAttrPort, nil
	case verbs.QPStateRTR:
		if !known {
			return verbs.QPAttr{}, 0, syscall.EINVAL
		}
		return verbs.QPAttr{State: st, PathMTU: verbs.MTU1024, DestQPN: id.theirs.qpn,
				AH:              verbs.AHAttr{DGID: verbs.GIDFromAddr(id.remote.Addr()), Port: 1, HopLimit: 64, TrafficClass: id.tos},
				MaxDestRdAtomic: id.theirs.initiatorDepth},
			verbs.QPAttrState | verbs.QPAttrAV | verbs.QPAttrPathMTU | verbs.QPAttrDestQPN | verbs.QPAttrRQPSN |
				verbs.QPAttrMaxDestRdAtomic | verbs.QPAttrMinRNRTimer, nil
	case verbs.QPStateRTS:
		if !known {
			return verbs.QPAttr{}, 0, syscall.EINVAL
		}
		timeout := uint8(14)
		if id.timeoutSet {
			timeout = id.timeout
		}
		return verbs.QPAttr{State: st, Timeout: timeout, RetryCnt: 7, RNRRetry: 7, MaxRdAtomic: id.theirs.responderResources},
			verbs.QPAttrState | verbs.QPAttrSQPSN | verbs.QPAttrTimeout | verbs.QPAttrRetryCnt | verbs.QPAttrRNRRetry |
				verbs.QPAttrMaxQPRdAtomic, nil
	}
	return verbs.QPAttr{}, 0, syscall.EINVAL
}

func (c *fakeChannel) setOption(tok uint64, opt Option, val uint32) error {
	k, id, err := c.lock(tok)
	defer k.mu.Unlock()
	if err != nil {
		return err
	}
	switch opt {
	case OptionTOS:
		id.tos = uint8(val)
	case OptionACKTimeout:
		id.timeout, id.timeoutSet = uint8(val), true
	case OptionReuseAddr:
		id.reuseAddr = val != 0
	case OptionAFOnly:
		id.afOnly = val != 0
	default:
		return syscall.ENOSYS
	}
	return nil
}

func (c *fakeChannel) destroy(tok uint64) {
	k := c.k
	k.mu.Lock()
	defer k.mu.Unlock()
	id := k.ids[tok]
	if id == nil || id.ch != c {
		return
	}
	if p := k.ids[id.peer]; p != nil {
		if id.connected {
			k.hangUp(tok)
		} else if p.peer == tok && !id.udp {
			k.deliver(id.peer, kevent{kind: evRejected, status: int(mad.ReasonTimeout)})
		}
		p.peer = 0
	}
	for s, t := range k.listen {
		if t == tok {
			delete(k.listen, s)
		}
	}
	delete(k.ids, tok)
}

func (c *fakeChannel) close() error {
	c.k.mu.Lock()
	var toks []uint64
	for t, id := range c.k.ids {
		if id.ch == c {
			toks = append(toks, t)
		}
	}
	c.k.mu.Unlock()
	for _, t := range toks {
		c.destroy(t)
	}
	c.mu.Lock()
	c.closed = true
	close(c.events)
	c.mu.Unlock()
	<-c.done
	return nil
}

// live counts a channel's ids.
func (c *fakeChannel) live() int {
	c.k.mu.Lock()
	defer c.k.mu.Unlock()
	n := 0
	for _, id := range c.k.ids {
		if id.ch == c {
			n++
		}
	}
	return n
}

func fakePair(t *testing.T) (cl, sv *side, clc, svc *fakeChannel) {
	k := newFakeKernel()
	cl, sv = pair(t, nil)
	return cl, sv, k.agent(t, cl), k.agent(t, sv)
}

// TestFakeKernelDialAccept: the kernel path's handshake brings two software QPs up
// with rdma_cm's attributes; they carry a SEND and a READ; the disconnection reaches
// both; every id is destroyed.
func TestFakeKernelDialAccept(t *testing.T) {
	cl, sv, clc, svc := fakePair(t)
	ctx := ctxT(t)
	l, err := sv.a.Listen(0, 4)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sv.a.Listen(l.Addr().Port(), 4); !errors.Is(err, ErrPortInUse) {
		t.Fatalf("a second Listen on the port: %v", err)
	}
	cc, sc := dialAccepted(ctx, t, cl, sv, l)
	sendAndRead(t, cl, sv, cc, sc)
	disconnect(ctx, t, cc, sc)
	l.Close()
	if n, m := clc.live(), svc.live(); n+m != 0 {
		t.Fatalf("%d and %d ids left", n, m)
	}
}

func TestFakeKernelRejects(t *testing.T) {
	cl, sv, clc, svc := fakePair(t)
	ctx := ctxT(t)
	var rej *RejectError
	_, err := cl.a.Dial(ctx, netip.AddrPortFrom(sv.a.Addr(), 9), cl.param(nil))
	if !errors.As(err, &rej) || rej.Reason != mad.ReasonInvalidServiceID {
		t.Fatalf("no listener: %v", err)
	}
	l, _ := sv.a.Listen(7174, 4)
	go func() {
		if r, err := l.Accept(ctx); err == nil {
			if err := r.Reject(make([]byte, mad.RejectPrivateLen+1)); !errors.Is(err, ErrPrivateDataTooLong) {
				t.Errorf("Reject over budget: %v", err)
			}
			r.Reject([]byte("go away"))
			if err := r.Reject(nil); !errors.Is(err, ErrAnswered) {
				t.Errorf("second Reject: %v", err)
			}
		}
	}()
	_, err = cl.a.Dial(ctx, l.Addr(), cl.param(nil))
	if !errors.As(err, &rej) || rej.Reason != mad.ReasonConsumerReject || !bytes.HasPrefix(rej.PrivateData, []byte("go away")) {
		t.Fatalf("rejected: %v", err)
	}
	if _, err := cl.a.Dial(ctx, l.Addr(), cl.param(make([]byte, mad.ConnectPrivateLen+1))); !errors.Is(err, ErrPrivateDataTooLong) {
		t.Fatalf("over budget: %v", err)
	}
	waitFor(t, func() bool { return clc.live() == 0 && svc.live() == 1 }) // the listener's
}

// TestFakeKernelDialCancelled: a Dial whose context ends destroys its id; the peer
// hears (a REJ) and its Accept fails with it.
func TestFakeKernelDialCancelled(t *testing.T) {
	cl, sv, clc, _ := fakePair(t)
	l, _ := sv.a.Listen(7174, 4)
	ctx, cancel := context.WithCancel(context.Background())
	reqs := make(chan *Request, 1)
	go func() {
		r, _ := l.Accept(ctxT(t))
		reqs <- r
		cancel()
	}()
	if _, err := cl.a.Dial(ctx, l.Addr(), cl.param(nil)); !errors.Is(err, context.Canceled) {
		t.Fatalf("Dial: %v", err)
	}
	r := <-reqs
	waitFor(t, func() bool { return clc.live() == 0 })
	if _, err := r.Accept(ctxT(t), sv.param(nil)); !errors.Is(err, ErrRejected) {
		t.Errorf("Accept of an abandoned request: %v", err)
	}
}

// TestFakeKernelWrongDevice: an id the kernel bound to another device than the agent's
// fails the Dial, clearly.
func TestFakeKernelWrongDevice(t *testing.T) {
	cl, sv, clc, _ := fakePair(t)
	clc.dev = "mlx5_9"
	l, _ := sv.a.Listen(7174, 4)
	_, err := cl.a.Dial(ctxT(t), l.Addr(), cl.param(nil))
	if err == nil || !bytes.Contains([]byte(err.Error()), []byte("mlx5_9")) {
		t.Fatalf("Dial through another device: %v", err)
	}
}

// TestFakeKernelClose: closing the agent ends a Dial under way (ErrClosed), the
// listener's queued requests are refused, and nothing is left.
func TestFakeKernelClose(t *testing.T) {
	cl, sv, clc, svc := fakePair(t)
	l, _ := sv.a.Listen(7174, 4)
	done := make(chan error, 1)
	go func() {
		_, err := cl.a.Dial(ctxT(t), l.Addr(), cl.param(nil))
		done <- err
	}()
	waitFor(t, func() bool { return len(l.reqs) == 1 })
	cl.a.Close()
	if err := <-done; !errors.Is(err, ErrClosed) {
		t.Fatalf("Dial under Close: %v", err)
	}
	sv.a.Close()
	if n, m := clc.live(), svc.live(); n+m != 0 {
		t.Fatalf("%d and %d ids left", n, m)
	}
	if _, err := sv.a.Listen(7175, 1); !errors.Is(err, ErrClosed) {
		t.Fatalf("Listen after Close: %v", err)
	}
}

func TestFakeKernelUD(t *testing.T) {
	cl, sv, _, _ := fakePair(t)
	ctx := ctxT(t)
	l, err := sv.a.ListenUD(0, 4)
	if err != nil {
		t.Fatal(err)
	}
	sqp := sv.udQP(t)
	go func() {
		for i := 0; ; i++ {
			r, err := l.Accept(ctx)
			if err != nil {
				return
			}
			if i == 0 {
				r.AcceptUD(&Param{QP: sqp, PrivateData: []byte("served")})
			} else {
				r.Reject([]byte("no"))
			}
		}
	}()
	cqp := cl.udQP(t)
	d, err := cl.a.ResolveUD(ctx, l.Addr(), &Param{QP: cqp, PrivateData: []byte("ud hello")})
	if err != nil {
		t.Fatal(err)
	}
	if d.QPN != sqp.QPN() || d.QKey != UDPQKey || d.AH == nil || !bytes.HasPrefix(d.PrivateData, []byte("served")) {
		t.Fatalf("resolved %+v", d)
	}
	var serr *SIDRError
	if _, err := cl.a.ResolveUD(ctx, l.Addr(), &Param{}); !errors.As(err, &serr) || serr.Status != mad.SIDRRejected {
		t.Fatalf("refused: %v", err)
	}
	if _, err := cl.a.ResolveUD(ctx, netip.AddrPortFrom(sv.a.Addr(), 9), &Param{}); !errors.As(err, &serr) ||
		serr.Status != mad.SIDRServiceIDNotSupported {
		t.Fatalf("no listener: %v", err)
	}
	m, err := cl.a.JoinMulticast(netip.MustParseAddr("239.1.2.3"), &JoinParam{PD: cl.pd})
	if err != nil || m.QPN != McastQPN || m.QKey != UDPQKey || m.AH == nil || m.MGID != verbs.GIDFromAddr(netip.MustParseAddr("239.1.2.3")) {
		t.Fatalf("join: %+v, %v", m, err)
	}
	if err := m.Leave(); err != nil {
		t.Fatal(err)
	}
}

// TestFakeKernelHostileEvents: events no id asked for, for ids nobody knows, twice, or
// with the most private data an event can carry, are ignored or refused, never a crash.
func TestFakeKernelHostileEvents(t *testing.T) {
	cl, sv, _, svc := fakePair(t)
	ctx := ctxT(t)
	l, _ := sv.a.Listen(7174, 4)
	long := bytes.Repeat([]byte{0xee}, 255)
	a := sv.a
	for _, e := range []kevent{
		{kind: evConnectResponse, tok: 999, priv: long},
		{kind: evDisconnected, tok: 999},
		{kind: evConnectRequest, tok: 998, listen: 12345, priv: long}, // no such listener
		{kind: cmEvent(77), tok: 1},
		{kind: evEstablished, tok: l.ktok},
	} {
		a.k.handle(a, e)
	}
	// A request for the listener with 255 bytes of private data: cut to 56.
	svc.k.mu.Lock()
	svc.k.next++
	tok := svc.k.next
	svc.k.ids[tok] = &fakeID{ch: svc}
	svc.k.mu.Unlock()
	a.k.handle(a, kevent{kind: evConnectRequest, tok: tok, listen: l.ktok, priv: long})
	r, err := l.Accept(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(r.PrivateData) != mad.ConnectPrivateLen || r.PrivateData[55] != 0xee {
		t.Fatalf("private data %x", r.PrivateData)
	}
	r.Reject(nil)
	// The real handshake still works after all that.
	ch := kernelAccept(ctx, l, sv.param(nil))
	cc, err := cl.a.Dial(ctx, l.Addr(), cl.param(nil))
	if err != nil {
		t.Fatal(err)
	}
	acc := <-ch
	if acc.err != nil {
		t.Fatal(acc.err)
	}
	// Events again for the established connection: a second ESTABLISHED and a
	// CONNECT_RESPONSE are ignored; the connection stays up.
	a.k.handle(a, kevent{kind: evEstablished, tok: acc.c.kc.tok})
	a.k.handle(a, kevent{kind: evConnectResponse, tok: acc.c.kc.tok, priv: long})
	select {
	case <-acc.c.Done():
		t.Fatal("the connection ended")
	default:
	}
	disconnect(ctx, t, cc, acc.c)
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !cond(); {
		if time.Now().After(deadline) {
			t.Fatal("condition never met")
		}
		time.Sleep(time.Millisecond)
	}
}

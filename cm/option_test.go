package cm

import (
	"bytes"
	"encoding/binary"
	"errors"
	"math/rand/v2"
	"net/netip"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/goverbs/goverbs/cm/mad"
	"github.com/goverbs/goverbs/internal/testaddr"
	"github.com/goverbs/goverbs/pcap"
	"github.com/goverbs/goverbs/verbs"
	"github.com/goverbs/goverbs/wire"
)

// dialWith connects cl to a listener of sv, the client with cp's options and the server
// with sp's, and returns both connections.
func dialWith(t *testing.T, cl, sv *side, cp, sp *Param) (cc, sc *Conn) {
	t.Helper()
	ctx := ctxT(t)
	l, err := sv.a.Listen(0, 4)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	ch := kernelAccept(ctx, l, sp)
	cc, err = cl.a.Dial(ctx, l.Addr(), cp)
	if err != nil {
		t.Fatal(err)
	}
	acc := <-ch
	if acc.err != nil {
		t.Fatal(acc.err)
	}
	t.Cleanup(func() { cc.Close(); acc.c.Close() })
	return cc, acc.c
}

// checkPath checks a connected QP's traffic class and ACK timeout.
func checkPath(t *testing.T, who string, qp *verbs.QP, tc, timeout uint8) {
	t.Helper()
	a := qp.Query()
	if a.State != verbs.QPStateRTS || a.AH.TrafficClass != tc || a.Timeout != timeout {
		t.Fatalf("%s's QP: %v, traffic class %#x, ACK timeout %d; want RTS, %#x, %d",
			who, a.State, a.AH.TrafficClass, a.Timeout, tc, timeout)
	}
}

// TestParamTOSAndACKTimeout: Param's TOS and ACKTimeout are rdma_set_option's TOS and
// ACK_TIMEOUT. The dialler's TOS is the path's traffic class on both QPs (the passive
// side takes the REQ's, as rdma_cm does on RoCE); its ACK timeout is its QP's, and the
// REQ's path carries it to the passive side, whose own ACKTimeout overrides it. Left 0,
// both are the CM's: class 0, timeout 19. On the software agent and on the kernel path
// (the fake kernel's rdma_set_option), alike.
func TestParamTOSAndACKTimeout(t *testing.T) {
	for _, kernel := range []bool{false, true} {
		name := "soft"
		if kernel {
			name = "kernel"
		}
		t.Run(name, func(t *testing.T) {
			cl, sv := pair(t, nil)
			var clc, svc *fakeChannel
			if kernel {
				k := newFakeKernel()
				clc, svc = k.agent(t, cl), k.agent(t, sv)
			}
			cc, sc := dialWith(t, cl, sv, cl.param(nil), sv.param(nil))
			def := uint8(localACKTimeout)
			if kernel {
				def = 14 // the fake kernel's rdma_init_qp_attr
			}
			checkPath(t, "client", cc.QP(), 0, def)
			checkPath(t, "server", sc.QP(), 0, def)

			cp, sp := cl.param(nil), sv.param(nil)
			cp.TOS, cp.ACKTimeout = 0xb8, 12
			cc, sc = dialWith(t, cl, sv, cp, sp)
			checkPath(t, "client", cc.QP(), 0xb8, 12)
			if kernel {
				checkPath(t, "server", sc.QP(), 0xb8, def) // the fake's path has no ACK timeout
			} else {
				checkPath(t, "server", sc.QP(), 0xb8, 12)
			}
			sendAndRead(t, cl, sv, cc, sc)

			cp, sp = cl.param(nil), sv.param(nil)
			cp.TOS, cp.ACKTimeout, sp.TOS, sp.ACKTimeout = 0x28, 10, 0xb8, 16
			cc, sc = dialWith(t, cl, sv, cp, sp)
			checkPath(t, "client", cc.QP(), 0x28, 10)
			checkPath(t, "server", sc.QP(), 0x28, 16) // its TOS ignored, its timeout its own
			if kernel && (clc.live() == 0 || svc.live() == 0) {
				t.Fatal("no ids")
			}

			bad := cl.param(nil)
			bad.ACKTimeout = MaxACKTimeout + 1
			if _, err := cl.a.Dial(ctxT(t), sc.LocalAddr(), bad); !errors.Is(err, ErrBadOption) {
				t.Fatalf("Dial with ACK timeout 32: %v", err)
			}
		})
	}
}

// TestListenConfigKernelOptions: a ListenConfig's ReuseAddr and AFOnly reach the
// kernel's listening id before it binds, and its backlog bounds the listener.
func TestListenConfigKernelOptions(t *testing.T) {
	_, sv, _, svc := fakePair(t)
	lc := ListenConfig{Backlog: 2, ReuseAddr: true, AFOnly: true}
	l, err := lc.Listen(sv.a, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if cap(l.reqs) != 2 {
		t.Fatalf("backlog %d", cap(l.reqs))
	}
	k := svc.k
	k.mu.Lock()
	id := k.ids[l.ktok]
	ok := id != nil && id.reuseAddr && id.afOnly
	k.mu.Unlock()
	if !ok {
		t.Fatalf("listening id %+v", id)
	}
	// On the software agent the options change nothing: a port conflicts with a
	// listener only.
	cl, _ := pair(t, nil)
	l2, err := (&ListenConfig{ReuseAddr: true}).Listen(cl.a, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer l2.Close()
	if _, err := (&ListenConfig{ReuseAddr: true}).Listen(cl.a, l2.Addr().Port()); !errors.Is(err, ErrPortInUse) {
		t.Fatalf("a second listener on the port: %v", err)
	}
}

// TestAcceptEstablishesOnFirstData: the server's RTU is lost; the dialler, established
// once it sent it, writes at once, and that first packet at the server's QP (in RTR
// until established) establishes the connection as the RTU would have (the IBTA's
// communication established), long before the CM would resend its REP (a response
// timeout of 17 s here). The connection then carries data both ways, and a late RTU
// (the REP's retry brings one) changes nothing.
func TestAcceptEstablishesOnFirstData(t *testing.T) {
	cfg := &Config{ResponseTimeout: 22}
	hub, cl, sv := memPair(t, cfg)
	var rtus atomic.Int32
	hub.drop = func(_, _ netip.Addr, m []byte) bool {
		if binary.BigEndian.Uint16(m[16:]) == uint16(mad.AttrRTU) {
			rtus.Add(1)
			return true
		}
		return false
	}
	ctx := ctxT(t)
	l, err := sv.a.Listen(0, 4)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	ch := kernelAccept(ctx, l, sv.param(nil))
	cc, err := cl.a.Dial(ctx, l.Addr(), cl.param(nil))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	select {
	case acc := <-ch:
		t.Fatalf("accepted without the RTU or data: %v", acc.err)
	case <-time.After(50 * time.Millisecond):
	}
	start := time.Now()
	// A zero-length WRITE: the responder checks no R_Key for it (IBTA 9.7.4.1.3).
	if err := cc.QP().PostSend(verbs.SendWR{ID: 9, Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled}); err != nil {
		t.Fatal(err)
	}
	var acc acceptResult
	select {
	case acc = <-ch:
	case <-time.After(5 * time.Second):
		t.Fatal("the first data did not establish the connection")
	}
	if acc.err != nil {
		t.Fatal(acc.err)
	}
	defer acc.c.Close()
	t.Logf("established %v after the first data; %d RTU lost", time.Since(start), rtus.Load())
	if n := rtus.Load(); n != 1 {
		t.Fatalf("%d RTUs dropped, want 1", n)
	}
	poll(t, cl.cq)
	sendAndRead(t, cl, sv, cc, acc.c)
}

// svcPair is two Services whose MADs go through an in-memory hub (the QPs are only
// numbers to them), with their events collected by id.
type svcPair struct {
	hub    *memHub
	cl, sv *Service
	mu     sync.Mutex
	evs    map[evKey][]ServiceEvent
}

// evKey is an event's service and the id it names (CONNECT_REQUEST: the listener).
type evKey struct {
	s  *Service
	id uint64
}

func newSvcPair(t *testing.T) *svcPair {
	p := &svcPair{hub: newHub(), evs: map[evKey][]ServiceEvent{}}
	a1, a2 := testaddr.Addr(testaddr.CM), testaddr.Addr(testaddr.CM)
	for a2 == a1 {
		a2 = testaddr.Addr(testaddr.CM)
	}
	p.cl = NewService(p.hub.port(a1), a1, 1, verbs.MTU1024, nil)
	p.sv = NewService(p.hub.port(a2), a2, 2, verbs.MTU1024, nil)
	t.Cleanup(func() { p.cl.Close(); p.sv.Close() })
	return p
}

// handler is the event handler of s's ids.
func (p *svcPair) handler(s *Service) func(ServiceEvent) {
	return func(e ServiceEvent) {
		p.mu.Lock()
		k := evKey{s, e.ID}
		if e.Kind == SvcConnectRequest {
			k.id = e.Listen
		}
		p.evs[k] = append(p.evs[k], e)
		p.mu.Unlock()
	}
}

// tcpIDs makes a TCP-port-space id on the client and a listening one on the server,
// and returns them with the listener's address.
func (p *svcPair) tcpIDs(t *testing.T) (cid, lid uint64, local netip.AddrPort) {
	t.Helper()
	cid, err := p.cl.NewID(mad.PortSpaceTCP, p.handler(p.cl))
	must(t, err)
	lid, err = p.sv.NewID(mad.PortSpaceTCP, p.handler(p.sv))
	must(t, err)
	must(t, p.sv.Listen(lid, 4))
	local, _, _ = p.sv.Query(lid)
	return cid, lid, local
}

// wait waits for an event of kind on s's id.
func (p *svcPair) wait(t *testing.T, s *Service, id uint64, kind int) ServiceEvent {
	t.Helper()
	k := evKey{s, id}
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		p.mu.Lock()
		for i, e := range p.evs[k] {
			if e.Kind == kind {
				p.evs[k] = append(p.evs[k][:i], p.evs[k][i+1:]...)
				p.mu.Unlock()
				return e
			}
		}
		p.mu.Unlock()
	}
	t.Fatalf("id %d: no %s", id, EventName(kind))
	return ServiceEvent{}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// TestServiceOptionsAndNotify: a Service id's SetOption and Notify, as the daemon serves
// rdma_set_option and rdma_notify. TOS and ACK_TIMEOUT set on the active id before
// Connect reach both ids' InitQPAttr (the passive one through the REQ, its own
// ACK_TIMEOUT over it); REUSEADDR lets two ids bind one port, never a listener; bad
// values and options are refused. With the RTU lost, COMM_EST notified on the passive
// id establishes it (ESTABLISHED), a second time is EISCONN, other events EINVAL.
func TestServiceOptionsAndNotify(t *testing.T) {
	p := newSvcPair(t)
	var rtus atomic.Int32
	p.hub.drop = func(_, _ netip.Addr, m []byte) bool {
		if binary.BigEndian.Uint16(m[16:]) == uint16(mad.AttrRTU) {
			rtus.Add(1)
			return true
		}
		return false
	}
	cid, lid, local := p.tcpIDs(t)

	if err := p.cl.SetOption(cid, OptionACKTimeout, 32); !errors.Is(err, syscall.EINVAL) {
		t.Fatalf("ACK timeout 32: %v", err)
	}
	if err := p.cl.SetOption(cid, OptionTOS, 256); !errors.Is(err, syscall.EINVAL) {
		t.Fatalf("TOS 256: %v", err)
	}
	if err := p.cl.SetOption(cid, Option(9), 1); !errors.Is(err, syscall.ENOSYS) {
		t.Fatalf("option 9: %v", err)
	}
	must(t, p.cl.SetOption(cid, OptionTOS, 0xb8))
	must(t, p.cl.SetOption(cid, OptionACKTimeout, 12))
	must(t, p.cl.ResolveAddr(cid, netip.Addr{}, local))
	p.wait(t, p.cl, cid, SvcAddrResolved)
	must(t, p.cl.ResolveRoute(cid))
	p.wait(t, p.cl, cid, SvcRouteResolved)
	must(t, p.cl.Connect(cid, &ServiceParam{QPN: 0x111, ResponderResources: 1, InitiatorDepth: 1}))
	req := p.wait(t, p.sv, lid, SvcConnectRequest)
	sid := req.ID
	if err := p.sv.Notify(sid, verbs.EventCommEst); !errors.Is(err, syscall.EINVAL) {
		t.Fatalf("COMM_EST before the accept: %v", err)
	}
	check := func(s *Service, tok uint64, tc, timeout uint8) {
		t.Helper()
		rtr, _, err := s.InitQPAttr(tok, verbs.QPStateRTR)
		must(t, err)
		rts, _, err := s.InitQPAttr(tok, verbs.QPStateRTS)
		must(t, err)
		if rtr.AH.TrafficClass != tc || rts.Timeout != timeout {
			t.Fatalf("id %d: RTR traffic class %#x, RTS timeout %d; want %#x, %d", tok, rtr.AH.TrafficClass, rts.Timeout, tc, timeout)
		}
	}
	check(p.sv, sid, 0xb8, 12) // the REQ's path
	must(t, p.sv.SetOption(sid, OptionACKTimeout, 16))
	check(p.sv, sid, 0xb8, 16)
	must(t, p.sv.Accept(sid, &ServiceParam{QPN: 0x222, ResponderResources: 1, InitiatorDepth: 1}))
	p.wait(t, p.cl, cid, SvcConnectResponse)
	check(p.cl, cid, 0xb8, 12)
	must(t, p.cl.Establish(cid)) // its RTU is lost
	time.Sleep(20 * time.Millisecond)
	p.mu.Lock()
	early := len(p.evs[evKey{p.sv, sid}])
	p.mu.Unlock()
	if early != 0 || rtus.Load() != 1 {
		t.Fatalf("%d events for the server's id before COMM_EST, %d RTUs dropped", early, rtus.Load())
	}
	if err := p.sv.Notify(sid, verbs.EventType(5)); !errors.Is(err, syscall.EINVAL) {
		t.Fatalf("PATH_MIG (5): %v", err)
	}
	must(t, p.sv.Notify(sid, verbs.EventCommEst))
	p.wait(t, p.sv, sid, SvcEstablished)
	if err := p.sv.Notify(sid, verbs.EventCommEst); !errors.Is(err, syscall.EISCONN) {
		t.Fatalf("COMM_EST again: %v", err)
	}
	must(t, p.sv.Disconnect(sid))
	p.wait(t, p.cl, cid, SvcDisconnected)
	// rdma_disconnect after DISCONNECTED is nothing to do, not an error (pyverbs' tests
	// disconnect so).
	must(t, p.cl.Disconnect(cid))

	// REUSEADDR: ids that all set it share a port until one listens.
	port := uint16(20000 + rand.IntN(20000))
	a, _ := p.cl.NewID(mad.PortSpaceTCP, p.handler(p.cl))
	b, _ := p.cl.NewID(mad.PortSpaceTCP, p.handler(p.cl))
	c, _ := p.cl.NewID(mad.PortSpaceTCP, p.handler(p.cl))
	must(t, p.cl.SetOption(a, OptionReuseAddr, 1))
	must(t, p.cl.SetOption(b, OptionReuseAddr, 1))
	must(t, p.cl.SetOption(b, OptionAFOnly, 1))
	ap := netip.AddrPortFrom(p.cl.Addr(), port)
	if _, err := p.cl.Bind(a, ap); err != nil {
		t.Fatal(err)
	}
	if _, err := p.cl.Bind(c, ap); !errors.Is(err, syscall.EADDRINUSE) {
		t.Fatalf("a bind without REUSEADDR: %v", err)
	}
	if _, err := p.cl.Bind(b, ap); err != nil {
		t.Fatalf("a bind with REUSEADDR: %v", err)
	}
	if err := p.cl.SetOption(b, OptionReuseAddr, 0); !errors.Is(err, syscall.EINVAL) {
		t.Fatalf("REUSEADDR on a bound id: %v", err)
	}
	if err := p.cl.Listen(a, 1); !errors.Is(err, syscall.EADDRINUSE) {
		t.Fatalf("listening on a shared port: %v", err)
	}
	p.cl.Destroy(b)
	must(t, p.cl.Listen(a, 1))
	d, _ := p.cl.NewID(mad.PortSpaceTCP, p.handler(p.cl))
	must(t, p.cl.SetOption(d, OptionReuseAddr, 1))
	if _, err := p.cl.Bind(d, ap); !errors.Is(err, syscall.EADDRINUSE) {
		t.Fatalf("a bind with REUSEADDR beside a listener: %v", err)
	}
}

// TestTOSOnTheWire: a connection dialled with TOS leaves with it on the wire: in the
// dialler's capture (a pcap.Writer on its device, which records each datagram's DS
// field as sent), every packet to the acceptor's QP carries DSCP 46 (TOS 0xb8), and the
// CM's MADs, on QP1's path, the default class. The dialler's device is kept off the
// same-host shortcut (NoSameHost), so that what it records is what its UDP socket sent.
func TestTOSOnTheWire(t *testing.T) {
	var buf bytes.Buffer
	w, err := pcap.NewWriter(&buf)
	must(t, err)
	cl := newSide(t, nil, verbs.SoftConfig{Recorder: w, NoSameHost: true}, nil)
	sv := newSide(t, nil, verbs.SoftConfig{}, nil)
	cp := cl.param(nil)
	cp.TOS = 0xb8
	cc, sc := dialWith(t, cl, sv, cp, sv.param(nil))
	sendAndRead(t, cl, sv, cc, sc)
	qpn := sc.QP().QPN()
	cl.a.Close()
	cl.dev.Close() // nothing is recorded after it
	must(t, w.Flush())
	r, err := pcap.NewReader(&buf)
	must(t, err)
	data, mads := 0, 0
	for {
		_, pkt, err := r.NextIP()
		if err != nil {
			break
		}
		ip, udp, err := wire.ParseIPUDP(pkt)
		if err != nil || ip.Src.Unmap() != cl.a.Addr() || len(udp) < wire.BTHLen {
			continue
		}
		switch dqp := wire.BTH(udp).DestQP(); dqp { // udp is the UDP payload
		case qpn:
			data++
			if ip.TOS != 0xb8 {
				t.Fatalf("a packet to QP %#x with TOS %#x, want 0xb8", dqp, ip.TOS)
			}
		case 1:
			mads++
			if ip.TOS != 0 {
				t.Fatalf("a MAD with TOS %#x", ip.TOS)
			}
		}
	}
	if data < 2 || mads < 2 {
		t.Fatalf("%d packets to the acceptor's QP, %d MADs sent", data, mads)
	}
}

// TestServiceIPoIBPortSpace: IPoIB ids are UD ids in a port space of their own: one
// resolves another's port through SIDR, while a UDP id naming the same port finds no
// service there (its service ID is the UDP space's), and a TCP one is refused the
// unserved spaces' way.
func TestServiceIPoIBPortSpace(t *testing.T) {
	p := newSvcPair(t)
	if _, err := p.sv.NewID(mad.PortSpaceIB, p.handler(p.sv)); !errors.Is(err, syscall.EPROTONOSUPPORT) {
		t.Fatalf("RDMA_PS_IB: %v", err)
	}
	lid, err := p.sv.NewID(mad.PortSpaceIPoIB, p.handler(p.sv))
	must(t, err)
	must(t, p.sv.Listen(lid, 4))
	local, _, _ := p.sv.Query(lid)
	if !p.sv.IsUDP(lid) {
		t.Fatal("an IPoIB id is not a UD one")
	}
	resolve := func(ps mad.PortSpace) uint64 {
		t.Helper()
		id, err := p.cl.NewID(ps, p.handler(p.cl))
		must(t, err)
		must(t, p.cl.ResolveAddr(id, netip.Addr{}, local))
		p.wait(t, p.cl, id, SvcAddrResolved)
		must(t, p.cl.ResolveRoute(id))
		p.wait(t, p.cl, id, SvcRouteResolved)
		must(t, p.cl.Connect(id, &ServiceParam{QPN: 0x123, PrivateData: []byte("ipoib?")}))
		return id
	}
	udp := resolve(mad.PortSpaceUDP)
	if e := p.wait(t, p.cl, udp, SvcUnreachable); e.Status == int(mad.SIDRValid) {
		t.Fatalf("a UDP id reached an IPoIB listener: %+v", e)
	}
	ib := resolve(mad.PortSpaceIPoIB)
	req := p.wait(t, p.sv, lid, SvcConnectRequest)
	if !bytes.HasPrefix(req.Param.PrivateData, []byte("ipoib?")) {
		t.Fatalf("request %+v", req)
	}
	must(t, p.sv.Accept(req.ID, &ServiceParam{QPN: 0x456}))
	if e := p.wait(t, p.cl, ib, SvcEstablished); e.Param.QPN != 0x456 {
		t.Fatalf("resolved %+v", e)
	}
}

// TestRetryCountsAboveSeven: retry counts above 7 (libfabric's verbs provider asks
// rdma_connect for 15) are cut to 7, as the kernel's rdma_cm cuts them, on Dial and
// Accept and on a Service's ids, whose RTS attributes are then valid for the QP (3-bit
// fields); before, the dialler's RTS carried 15 and ibv_modify_qp refused it.
func TestRetryCountsAboveSeven(t *testing.T) {
	cl, sv := pair(t, nil)
	cp, sp := cl.param(nil), sv.param(nil)
	cp.RetryCount, cp.RNRRetryCount, sp.RNRRetryCount = 15, 15, 255
	cc, sc := dialWith(t, cl, sv, cp, sp)
	for _, c := range []*Conn{cc, sc} {
		if a := c.QP().Query(); a.State != verbs.QPStateRTS || a.RetryCnt != 7 || a.RNRRetry != 7 {
			t.Fatalf("QP %v, retry_cnt %d, rnr_retry %d; want RTS, 7, 7", a.State, a.RetryCnt, a.RNRRetry)
		}
	}
	sendAndRead(t, cl, sv, cc, sc)

	p := newSvcPair(t)
	cid, lid, local := p.tcpIDs(t)
	must(t, p.cl.ResolveAddr(cid, netip.Addr{}, local))
	p.wait(t, p.cl, cid, SvcAddrResolved)
	must(t, p.cl.ResolveRoute(cid))
	p.wait(t, p.cl, cid, SvcRouteResolved)
	must(t, p.cl.Connect(cid, &ServiceParam{QPN: 0x111, RetryCount: 15, RNRRetryCount: 15}))
	sid := p.wait(t, p.sv, lid, SvcConnectRequest).ID
	must(t, p.sv.Accept(sid, &ServiceParam{QPN: 0x222, RNRRetryCount: 9}))
	p.wait(t, p.cl, cid, SvcConnectResponse)
	for _, s := range []struct {
		s   *Service
		tok uint64
	}{{p.cl, cid}, {p.sv, sid}} {
		rts, _, err := s.s.InitQPAttr(s.tok, verbs.QPStateRTS)
		must(t, err)
		if rts.RetryCnt != 7 || rts.RNRRetry != 7 {
			t.Fatalf("id %d: RTS retry_cnt %d, rnr_retry %d; want 7, 7", s.tok, rts.RetryCnt, rts.RNRRetry)
		}
	}
}

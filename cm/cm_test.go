package cm

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/goverbs/goverbs/cm/internal/ibcm"
	"github.com/goverbs/goverbs/cm/mad"
	"github.com/goverbs/goverbs/internal/testaddr"
	"github.com/goverbs/goverbs/verbs"
)

// side is one machine of a test: a software device on its own loopback
// address, with a PD, a CQ and a CM agent.
type side struct {
	dev *verbs.Device
	pd  *verbs.PD
	cq  *verbs.CQ
	a   *Agent
}

// newSide opens the device (on a free loopback address when scfg has none);
// its agent's MADs go through hub when hub is not nil, through the device's
// QP1 otherwise.
func newSide(t *testing.T, hub *memHub, scfg verbs.SoftConfig, cfg *Config) *side {
	t.Helper()
	var dev *verbs.Device
	var err error
	if scfg.Addr.IsValid() {
		dev, err = verbs.OpenSoft(scfg)
	} else {
		dev = testaddr.Open(t, testaddr.CM, func(a netip.Addr) (*verbs.Device, error) {
			scfg.Addr = a
			return verbs.OpenSoft(scfg)
		})
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { dev.Close() })
	s := &side{dev: dev}
	if s.pd, err = dev.AllocPD(); err != nil {
		t.Fatal(err)
	}
	if s.cq, err = dev.CreateCQ(256, nil); err != nil {
		t.Fatal(err)
	}
	if hub != nil {
		s.a, err = newAgent(dev, hub.port(scfg.Addr), cfg)
	} else {
		s.a, err = NewAgent(dev, cfg)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.a.Close() })
	return s
}

func (s *side) param(pd []byte) *Param {
	return &Param{PD: s.pd, QPInit: verbs.QPInitAttr{SendCQ: s.cq, RecvCQ: s.cq,
		Cap: verbs.QPCap{MaxSendWR: 16, MaxRecvWR: 16, MaxSendSGE: 1, MaxRecvSGE: 1}},
		PrivateData: pd, ResponderResources: 1, InitiatorDepth: 1}
}

// pair is two sides on two loopback addresses, speaking over real UDP,
// MADs included.
func pair(t *testing.T, cfg *Config) (client, server *side) {
	return newSide(t, nil, verbs.SoftConfig{}, cfg), newSide(t, nil, verbs.SoftConfig{}, cfg)
}

// memPair is two sides whose MADs go through an in-memory hub that can
// lose them.
func memPair(t *testing.T, cfg *Config) (hub *memHub, client, server *side) {
	hub = newHub()
	return hub, newSide(t, hub, verbs.SoftConfig{}, cfg), newSide(t, hub, verbs.SoftConfig{}, cfg)
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// poll waits for one completion on cq.
func poll(t *testing.T, cq *verbs.CQ) verbs.WC {
	t.Helper()
	wc := make([]verbs.WC, 1)
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		n, err := cq.Poll(wc)
		if err != nil {
			t.Fatal(err)
		}
		if n == 1 {
			if wc[0].Status != verbs.WCSuccess {
				t.Fatalf("completion %+v", wc[0])
			}
			return wc[0]
		}
		time.Sleep(100 * time.Microsecond)
	}
	t.Fatal("no completion")
	return verbs.WC{}
}

// TestDialAccept connects two devices through the CM with no side
// channel, moves data both ways over the QPs it set up, and disconnects.
func TestDialAccept(t *testing.T) {
	cl, sv := pair(t, nil)
	ctx := ctxT(t)
	l, err := sv.a.Listen(7174, 4)
	if err != nil {
		t.Fatal(err)
	}
	cc, sc := dialAccepted(ctx, t, cl, sv, l)
	qa, qb := cl.a.Counters(), sv.a.Counters()
	if qa.MADsSent != 2 || qb.MADsSent != 1 || qa.MADsDropped+qb.MADsDropped != 0 {
		t.Fatalf("counters %+v %+v", qa, qb)
	}

	// A SEND from the server and an RDMA READ from it: the QPs are connected
	// and READ depths were agreed.
	sendAndRead(t, cl, sv, cc, sc)

	// The client disconnects; the server hears of it.
	disconnect(ctx, t, cc, sc)
	l.Close()
}

func TestRejects(t *testing.T) {
	cl, sv := pair(t, nil)
	ctx := ctxT(t)

	// Nobody listens: REJ "invalid service ID".
	_, err := cl.a.Dial(ctx, netip.AddrPortFrom(sv.a.Addr(), 9), cl.param(nil))
	var rej *RejectError
	if !errors.As(err, &rej) || rej.Reason != mad.ReasonInvalidServiceID || !errors.Is(err, ErrRejected) {
		t.Fatalf("dial to no listener: %v", err)
	}

	// The program refuses, with private data.
	l, _ := sv.a.Listen(7174, 4)
	go func() {
		r, err := l.Accept(ctx)
		if err == nil {
			r.Reject([]byte("not today"))
		}
	}()
	_, err = cl.a.Dial(ctx, l.Addr(), cl.param(nil))
	if !errors.As(err, &rej) || rej.Reason != mad.ReasonConsumerReject || !bytes.HasPrefix(rej.PrivateData, []byte("not today")) {
		t.Fatalf("consumer reject: %v", err)
	}

	// Over budget: an error before anything is sent.
	sent := cl.a.Counters().MADsSent
	if _, err := cl.a.Dial(ctx, l.Addr(), cl.param(make([]byte, 57))); !errors.Is(err, ErrPrivateDataTooLong) {
		t.Fatal(err)
	}
	if cl.a.Counters().MADsSent != sent {
		t.Fatal("a MAD left for an over-budget Dial")
	}
	go func() {
		r, err := l.Accept(ctx)
		if err != nil {
			return
		}
		if _, err := r.Accept(ctx, sv.param(make([]byte, 197))); !errors.Is(err, ErrPrivateDataTooLong) {
			t.Errorf("over-budget Accept: %v", err)
		}
		if err := r.Reject(make([]byte, 149)); !errors.Is(err, ErrPrivateDataTooLong) {
			t.Errorf("over-budget Reject: %v", err)
		}
		r.Reject(nil)
	}()
	if _, err := cl.a.Dial(ctx, l.Addr(), cl.param(nil)); !errors.As(err, &rej) {
		t.Fatalf("after over-budget answers: %v", err)
	}
	// The QPs the CM made for the failed dials are gone.
	if n := cl.a.tracked(); n != 0 {
		t.Fatalf("%d connections tracked", n)
	}
}

// A flood of REQs: the backlog holds what waits for Accept, the rest is
// rejected with "no resources".
func TestBacklog(t *testing.T) {
	cl, sv := pair(t, nil)
	ctx := ctxT(t)
	l, _ := sv.a.Listen(7174, 2)
	const n = 6
	errs := make(chan error, n)
	dctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
	defer cancel()
	for range n {
		go func() {
			_, err := cl.a.Dial(dctx, l.Addr(), cl.param(nil))
			errs <- err
		}()
	}
	noRes := 0
	for range n {
		var rej *RejectError
		if err := <-errs; errors.As(err, &rej) && rej.Reason == mad.ReasonNoResources {
			noRes++
		}
	}
	if noRes != n-2 {
		t.Fatalf("%d rejected for no resources, want %d", noRes, n-2)
	}
	if len(l.reqs) != 2 {
		t.Fatalf("%d requests queued", len(l.reqs))
	}
}

// The server never answers: the client's context ends the dial, and its
// REJ takes the request off the server's queue.
func TestDialCancelled(t *testing.T) {
	cl, sv := pair(t, nil)
	l, _ := sv.a.Listen(7174, 2)
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	if _, err := cl.a.Dial(ctx, l.Addr(), cl.param(nil)); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatal(err)
	}
	r, err := l.Accept(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	// The client's REJ reaches the server's receive path on its own time: wait for it.
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(time.Millisecond) {
		sv.a.mu.Lock()
		n := sv.a.cm.Conns()
		sv.a.mu.Unlock()
		if n == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the server never heard the client withdraw")
		}
	}
	var rej *RejectError
	if _, err := r.Accept(ctxT(t), sv.param(nil)); !errors.As(err, &rej) || rej.Reason != mad.ReasonTimeout {
		t.Fatalf("accepting a withdrawn request: %v", err)
	}
}

// With short CM timeouts and a peer whose MADs vanish, Dial ends in
// ErrTimeout after the retries.
func TestDialTimeout(t *testing.T) {
	hub, cl, sv := memPair(t, &Config{ResponseTimeout: 12, MaxRetries: 2, PacketLifetime: 8})
	hub.drop = func(from, to netip.Addr, m []byte) bool { return true }
	start := time.Now()
	if _, err := cl.a.Dial(ctxT(t), netip.AddrPortFrom(sv.a.Addr(), 7174), cl.param(nil)); !errors.Is(err, ErrTimeout) {
		t.Fatal(err)
	}
	if d := time.Since(start); d < 3*(2*time.Millisecond+16*time.Millisecond) {
		t.Fatalf("gave up after %v", d)
	}
	if cl.a.Counters().MADsSent != 4 { // 3 REQs and the REJ
		t.Fatalf("counters %+v", cl.a.Counters())
	}
}

// Many connections at once through one listener, each disconnected by the
// server this time.
func TestManyConnections(t *testing.T) {
	cl, sv := pair(t, nil)
	ctx := ctxT(t)
	l, _ := sv.a.Listen(7174, 16)
	const n = 8
	var wg sync.WaitGroup
	server := make(chan *Conn, n)
	wg.Go(func() {
		for range n {
			r, err := l.Accept(ctx)
			if err != nil {
				t.Error(err)
				return
			}
			wg.Go(func() {
				c, err := r.Accept(ctx, sv.param([]byte(fmt.Sprint(r.QPN))))
				if err != nil {
					t.Error(err)
					return
				}
				server <- c
			})
		}
	})
	clients := make([]*Conn, n)
	for i := range n {
		wg.Go(func() {
			c, err := cl.a.Dial(ctx, l.Addr(), cl.param(nil))
			if err != nil {
				t.Error(err)
				return
			}
			if want := fmt.Sprint(c.QP().QPN()); !bytes.HasPrefix(c.PrivateData(), []byte(want)) {
				t.Errorf("connection %d got the answer %q meant for QPN %s", i, c.PrivateData()[:8], want)
			}
			clients[i] = c
		})
	}
	wg.Wait()
	close(server)
	for c := range server {
		c.Disconnect(ctx, nil)
	}
	for _, c := range clients {
		if c == nil {
			continue
		}
		select {
		case <-c.Done():
		case <-ctx.Done():
			t.Fatal("a client never saw the disconnect")
		}
	}
}

// One agent per device: QP1 has one receiver.
func TestOneAgentPerDevice(t *testing.T) {
	cl, _ := pair(t, nil)
	if _, err := NewAgent(cl.dev, nil); !errors.Is(err, verbs.ErrGSIBusy) {
		t.Fatalf("second agent: %v", err)
	}
	cl.a.Close()
	a, err := NewAgent(cl.dev, nil)
	if err != nil {
		t.Fatalf("agent after the first closed: %v", err)
	}
	a.Close()
}

func netipPort(s *side, port uint16) netip.AddrPort { return netip.AddrPortFrom(s.a.Addr(), port) }

// tracked is how many connections the agent and its CM hold, under the lock.
func (a *Agent) tracked() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.conns) + a.cm.Conns()
}

// TestPendingErrWaitsForTheEvent: a handshake call that finds its connection gone reports
// the event that took it even when the event is delivered a moment later (the agent
// delivers events after it has released its lock and sent the MADs), and def when none
// comes.
func TestPendingErrWaitsForTheEvent(t *testing.T) {
	c := newConn(nil)
	go func() {
		time.Sleep(10 * time.Millisecond)
		c.ev <- ibcm.Event{Kind: ibcm.EventRejected, Reason: mad.ReasonTimeout}
	}()
	var rej *RejectError
	if err := c.pendingErr(ErrTimeout); !errors.As(err, &rej) || rej.Reason != mad.ReasonTimeout {
		t.Fatalf("pendingErr with the REJ's event on its way = %v, want the RejectError", err)
	}
	if err := newConn(nil).pendingErr(ErrTimeout); !errors.Is(err, ErrTimeout) {
		t.Fatalf("pendingErr with no event = %v, want the default", err)
	}
}

// sendAndRead checks a connection's QPs: a SEND from the server's, then an RDMA READ
// of the client's memory by the server. cl and sv may be one side (one CQ).
func sendAndRead(t *testing.T, cl, sv *side, cc, sc *Conn) {
	t.Helper()
	buf := make([]byte, 64)
	cmr, err := cl.pd.RegMR(buf, verbs.AccessLocalWrite|verbs.AccessRemoteRead)
	if err != nil {
		t.Fatal(err)
	}
	copy(buf[32:], "client memory")
	if err := cc.QP().PostRecv(verbs.RecvWR{ID: 1, SGL: []verbs.SGE{cmr.SGE(0, 32)}}); err != nil {
		t.Fatal(err)
	}
	sbuf := make([]byte, 64)
	smr, err := sv.pd.RegMR(sbuf, verbs.AccessLocalWrite)
	if err != nil {
		t.Fatal(err)
	}
	copy(sbuf, "ping")
	if err := sc.QP().PostSend(verbs.SendWR{ID: 2, Opcode: verbs.WRSend, Flags: verbs.SendSignaled,
		SGL: []verbs.SGE{smr.SGE(0, 4)}}); err != nil {
		t.Fatal(err)
	}
	if wc1, wc2 := poll(t, sv.cq), poll(t, cl.cq); string(buf[:4]) != "ping" ||
		wc1.Opcode == verbs.WCRecv && wc1.ByteLen != 4 || wc2.Opcode == verbs.WCRecv && wc2.ByteLen != 4 {
		t.Fatalf("received %+v %+v %q", wc1, wc2, buf[:4])
	}
	if err := sc.QP().PostSend(verbs.SendWR{ID: 3, Opcode: verbs.WRRDMARead, Flags: verbs.SendSignaled,
		SGL: []verbs.SGE{smr.SGE(16, 13)}, RemoteAddr: cmr.Addr() + 32, RKey: cmr.RKey()}); err != nil {
		t.Fatal(err)
	}
	poll(t, sv.cq)
	if string(sbuf[16:29]) != "client memory" {
		t.Fatalf("READ gave %q", sbuf[16:29])
	}
}

// kernelAccept accepts the next request of l in the background.
func kernelAccept(ctx context.Context, l *Listener, p *Param) <-chan acceptResult {
	ch := make(chan acceptResult, 1)
	go func() {
		r, err := l.Accept(ctx)
		if err != nil {
			ch <- acceptResult{err: err}
			return
		}
		c, err := r.Accept(ctx, p)
		ch <- acceptResult{c, r, err}
	}()
	return ch
}

type acceptResult struct {
	c   *Conn
	r   *Request
	err error
}

// dialAccepted dials l from cl while sv accepts in the background, with the private data
// checkHandshake expects, and checks the handshake.
func dialAccepted(ctx context.Context, t *testing.T, cl, sv *side, l *Listener) (cc, sc *Conn) {
	t.Helper()
	ch := kernelAccept(ctx, l, sv.param([]byte("welcome")))
	cc, err := cl.a.Dial(ctx, l.Addr(), cl.param([]byte("hello")))
	if err != nil {
		t.Fatal(err)
	}
	acc := <-ch
	if acc.err != nil {
		t.Fatal(acc.err)
	}
	checkHandshake(t, l, acc.r, cc, acc.c)
	return cc, acc.c
}

// checkHandshake checks what each side of a connection made by Dial("hello") and
// Accept("welcome") knows of the other, and that both QPs are in RTS.
func checkHandshake(t *testing.T, l *Listener, r *Request, cc, sc *Conn) {
	t.Helper()
	if r.Remote != cc.LocalAddr() || r.Local != l.Addr() || !bytes.HasPrefix(r.PrivateData, []byte("hello")) ||
		len(r.PrivateData) != mad.ConnectPrivateLen || r.QPN != cc.QP().QPN() || r.Transport != verbs.QPTypeRC {
		t.Fatalf("request %+v (client %v qpn %#x)", r, cc.LocalAddr(), cc.QP().QPN())
	}
	if !bytes.HasPrefix(cc.PrivateData(), []byte("welcome")) || len(cc.PrivateData()) != mad.REPPrivateLen ||
		cc.RemoteAddr() != l.Addr() {
		t.Fatalf("client sees %q from %v", cc.PrivateData(), cc.RemoteAddr())
	}
	for _, c := range []*Conn{cc, sc} {
		if st := c.QP().State(); st != verbs.QPStateRTS {
			t.Fatalf("QP in %v", st)
		}
	}
}

// disconnect disconnects the client's side, waits until the server hears of it, checks
// that both ended with ErrDisconnected and their QPs are in ERR, and closes both.
func disconnect(ctx context.Context, t *testing.T, cc, sc *Conn) {
	t.Helper()
	if err := cc.Disconnect(ctx, []byte("bye")); err != nil {
		t.Fatal(err)
	}
	select {
	case <-sc.Done():
	case <-ctx.Done():
		t.Fatal("server never saw the disconnect")
	}
	if !errors.Is(sc.Err(), ErrDisconnected) || !errors.Is(cc.Err(), ErrDisconnected) {
		t.Fatal(sc.Err(), cc.Err())
	}
	for _, c := range []*Conn{cc, sc} {
		if st := c.QP().State(); st != verbs.QPStateErr {
			t.Fatalf("QP in %v after the disconnection", st)
		}
		c.Close()
	}
}

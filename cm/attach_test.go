//go:build linux

package cm_test

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/goverbs/goverbs/cm"
	"github.com/goverbs/goverbs/internal/attach"
	"github.com/goverbs/goverbs/internal/attach/attachtest"
	"github.com/goverbs/goverbs/internal/attach/server"
	"github.com/goverbs/goverbs/internal/testaddr"
	"github.com/goverbs/goverbs/verbs"
	verbsattach "github.com/goverbs/goverbs/verbs/attach"
	"github.com/goverbs/goverbs/verbs/soft"
)

// cm on attached devices: every process's agent is a client of the daemon's one
// rdma_cm (cm.Service), sharing the device's address by port.

func TestMain(m *testing.M) {
	if mode := os.Getenv("CM_ATTACH_CHILD"); mode != "" {
		os.Exit(attachChild(mode))
	}
	os.Exit(m.Run())
}

// aside is one process's view of a device: the device, a PD, a CQ, a registered
// buffer and the CM agent.
type aside struct {
	dev *verbs.Device
	pd  *verbs.PD
	cq  *verbs.CQ
	buf []byte
	mr  *verbs.MR
	a   *cm.Agent
}

func openSide(cfg verbs.SoftConfig) (*aside, error) {
	dev, err := verbs.OpenSoft(cfg)
	if err != nil {
		return nil, err
	}
	s := &aside{dev: dev, buf: make([]byte, 1<<16)}
	fail := func(err error) (*aside, error) {
		s.close()
		return nil, err
	}
	if s.pd, err = dev.AllocPD(); err != nil {
		return fail(err)
	}
	if s.cq, err = dev.CreateCQ(64, nil); err != nil {
		return fail(err)
	}
	if s.mr, err = s.pd.RegMR(s.buf, verbs.AccessLocalWrite|verbs.AccessRemoteWrite|verbs.AccessRemoteRead); err != nil {
		return fail(err)
	}
	if s.a, err = cm.NewAgent(dev, nil); err != nil {
		return fail(err)
	}
	return s, nil
}

func (s *aside) close() {
	if s.a != nil {
		s.a.Close()
	}
	s.dev.Close()
}

func attachedSide(t *testing.T, addr netip.Addr) *aside {
	t.Helper()
	s, err := openSide(verbs.SoftConfig{Name: "sw0", Addr: addr, Attach: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.close)
	return s
}

func (s *aside) param(priv string) *cm.Param {
	return &cm.Param{PD: s.pd, QPInit: verbs.QPInitAttr{SendCQ: s.cq, RecvCQ: s.cq,
		Cap: verbs.QPCap{MaxSendWR: 8, MaxRecvWR: 8, MaxSendSGE: 1, MaxRecvSGE: 1}},
		PrivateData: []byte(priv), ResponderResources: 1, InitiatorDepth: 1}
}

func waitWC(cq *verbs.CQ) (verbs.WC, error) {
	wc := make([]verbs.WC, 1)
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); {
		n, err := cq.Poll(wc)
		if err != nil {
			return verbs.WC{}, err
		}
		if n == 1 {
			if wc[0].Status != verbs.WCSuccess {
				return wc[0], fmt.Errorf("completion %v", wc[0].Status)
			}
			return wc[0], nil
		}
		time.Sleep(50 * time.Microsecond)
	}
	return verbs.WC{}, errors.New("no completion")
}

// send moves msg from s's connection to r's with a SEND.
func send(s, r *aside, sc, rc *cm.Conn, msg string) error {
	if err := rc.QP().PostRecv(verbs.RecvWR{ID: 1, SGL: []verbs.SGE{r.mr.SGE(0, 1024)}}); err != nil {
		return err
	}
	copy(s.buf[2048:], msg)
	if err := sc.QP().PostSend(verbs.SendWR{ID: 2, Opcode: verbs.WRSend, Flags: verbs.SendSignaled,
		SGL: []verbs.SGE{s.mr.SGE(2048, len(msg))}}); err != nil {
		return err
	}
	if _, err := waitWC(s.cq); err != nil {
		return fmt.Errorf("send: %w", err)
	}
	wc, err := waitWC(r.cq)
	if err != nil {
		return fmt.Errorf("receive: %w", err)
	}
	if got := string(r.buf[:wc.ByteLen]); got != msg {
		return fmt.Errorf("received %q, want %q", got, msg)
	}
	return nil
}

// accept takes one request on l and accepts it with private data.
func accept(ctx context.Context, s *aside, l *cm.Listener, priv string) (*cm.Conn, []byte, error) {
	return acceptWith(ctx, l, s.param(priv))
}

// acceptWith takes one request on l and accepts it with p.
func acceptWith(ctx context.Context, l *cm.Listener, p *cm.Param) (*cm.Conn, []byte, error) {
	r, err := l.Accept(ctx)
	if err != nil {
		return nil, nil, err
	}
	c, err := r.Accept(ctx, p)
	return c, r.PrivateData, err
}

type accepted struct {
	c    *cm.Conn
	priv []byte
	err  error
}

func acceptAsync(ctx context.Context, s *aside, l *cm.Listener, priv string) chan accepted {
	return acceptWithAsync(ctx, l, s.param(priv))
}

func acceptWithAsync(ctx context.Context, l *cm.Listener, p *cm.Param) chan accepted {
	ch := make(chan accepted, 1)
	go func() {
		c, priv, err := acceptWith(ctx, l, p)
		ch <- accepted{c, priv, err}
	}()
	return ch
}

// dialBoth connects cl to l (on sv) and checks both sides' private data and a SEND
// each way.
func dialBoth(ctx context.Context, t *testing.T, cl, sv *aside, l *cm.Listener, tag string) *cm.Conn {
	t.Helper()
	ach := acceptAsync(ctx, sv, l, "rep "+tag)
	cc, err := cl.a.Dial(ctx, l.Addr(), cl.param("req "+tag))
	if err != nil {
		t.Fatalf("dial %s: %v", tag, err)
	}
	ac := <-ach
	if ac.err != nil {
		t.Fatalf("accept %s: %v", tag, ac.err)
	}
	if !bytes.HasPrefix(ac.priv, []byte("req "+tag)) || !bytes.HasPrefix(cc.PrivateData(), []byte("rep "+tag)) {
		t.Fatalf("%s: private data %q / %q", tag, ac.priv, cc.PrivateData())
	}
	if err := send(cl, sv, cc, ac.c, "to "+tag); err != nil {
		t.Fatalf("%s: %v", tag, err)
	}
	if err := send(sv, cl, ac.c, cc, "from "+tag); err != nil {
		t.Fatalf("%s: %v", tag, err)
	}
	t.Cleanup(func() { ac.c.Close() })
	return cc
}

// TestAttachedCMSharesPorts: two sessions of one daemon listen on two ports of its
// one address (the same port twice is refused), a third connects to both, and an
// in-process device connects to one and is connected to.
func TestAttachedCMSharesPorts(t *testing.T) {
	_, addr := attachtest.Daemon(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	a, b, c := attachedSide(t, addr), attachedSide(t, addr), attachedSide(t, addr)
	la, err := a.a.Listen(7001, 4)
	if err != nil {
		t.Fatal(err)
	}
	lb, err := b.a.Listen(7002, 4)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.a.Listen(7001, 4); !errors.Is(err, cm.ErrPortInUse) {
		t.Fatalf("a second listener on 7001: %v", err)
	}
	if la.Addr() != netip.AddrPortFrom(addr, 7001) || lb.Addr() != netip.AddrPortFrom(addr, 7002) {
		t.Fatalf("listening on %v and %v", la.Addr(), lb.Addr())
	}
	ca := dialBoth(ctx, t, c, a, la, "a")
	cb := dialBoth(ctx, t, c, b, lb, "b")

	// Nobody listens on 7003: the REJ says so.
	var rej *cm.RejectError
	if _, err := c.a.Dial(ctx, netip.AddrPortFrom(addr, 7003), c.param("")); !errors.As(err, &rej) {
		t.Fatalf("dial to no listener: %v", err)
	}

	// An in-process device dials a's listener, and b dials the in-process one's.
	p := testaddr.Open(t, testaddr.CM, func(ad netip.Addr) (*aside, error) {
		return openSide(verbs.SoftConfig{Name: "cmp0", Addr: ad})
	})
	t.Cleanup(p.close)
	dialBoth(ctx, t, p, a, la, "p")
	lp, err := p.a.Listen(7004, 4)
	if err != nil {
		t.Fatal(err)
	}
	dialBoth(ctx, t, b, p, lp, "b2p")

	// A refusal with private data crosses the daemon both ways.
	go func() {
		if r, err := la.Accept(ctx); err == nil {
			r.Reject([]byte("no thanks"))
		}
	}()
	if _, err := c.a.Dial(ctx, la.Addr(), c.param("")); !errors.As(err, &rej) || !bytes.HasPrefix(rej.PrivateData, []byte("no thanks")) {
		t.Fatalf("rejected dial: %v", err)
	}

	// c disconnects from a: a's side hears it.
	dctx, dcancel := context.WithTimeout(ctx, 10*time.Second)
	defer dcancel()
	if err := ca.Disconnect(dctx, nil); err != nil {
		t.Fatal(err)
	}
	cb.Close()
}

// TestAttachedCMForeignQP: a session cannot name another session's QP number in
// CM_CONNECT, and garbage CM commands fail that session's commands only.
func TestAttachedCMForeignQP(t *testing.T) {
	_, addr := attachtest.Daemon(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	a, b := attachedSide(t, addr), attachedSide(t, addr)
	la, err := a.a.Listen(7001, 4)
	if err != nil {
		t.Fatal(err)
	}
	qp, err := a.pd.CreateQP(verbs.QPInitAttr{Type: verbs.QPTypeRC, SendCQ: a.cq, RecvCQ: a.cq,
		Cap: verbs.QPCap{MaxSendWR: 1, MaxRecvWR: 1, MaxSendSGE: 1, MaxRecvSGE: 1}})
	if err != nil {
		t.Fatal(err)
	}
	defer qp.Close()

	cmd := b.dev.Commander()
	call := func(op attach.Op, build func(w *attach.Writer)) (attach.Reader, error) {
		var w attach.Writer
		if build != nil {
			build(&w)
		}
		rep, files, err := cmd.Command(uint16(op), w.B)
		for _, f := range files {
			f.Close()
		}
		return attach.Reader{B: rep}, err
	}
	r, err := call(attach.OpCMCreateChannel, nil)
	if err != nil {
		t.Fatal(err)
	}
	ch := r.U32()
	r, err = call(attach.OpCMCreateID, func(w *attach.Writer) { w.U32(ch); w.U16(attach.PortSpaceTCP); w.U16(0); w.U64(7) })
	if err != nil {
		t.Fatal(err)
	}
	id := r.U32()
	for _, op := range []attach.Op{attach.OpCMResolveAddr, attach.OpCMResolveRoute} {
		if _, err := call(op, func(w *attach.Writer) {
			w.U32(id)
			w.U32(1000)
			if op == attach.OpCMResolveAddr {
				w.PutAddr(netip.AddrPort{})
				w.PutAddr(la.Addr())
			}
		}); err != nil {
			t.Fatal(op, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	_, err = call(attach.OpCMConnect, func(w *attach.Writer) {
		w.U32(id)
		w.PutConnParam(&attach.ConnParam{QPN: qp.QPN()})
	})
	if !errors.Is(err, syscall.EINVAL) {
		t.Fatalf("CM_CONNECT with another session's QPN %#x: %v", qp.QPN(), err)
	}

	// Garbage: short payloads, unknown handles, impossible states, oversized
	// private data. Each fails; the session and the daemon go on.
	garbage := []struct {
		op attach.Op
		b  []byte
	}{
		{attach.OpCMCreateID, nil},
		{attach.OpCMCreateID, []byte{99, 0, 0, 0, 6, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}},
		{attach.OpCMCreateID, []byte{byte(ch), 0, 0, 0, 0x34, 0x12, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}},
		{attach.OpCMBindAddr, []byte{1}},
		{attach.OpCMBindAddr, append([]byte{byte(id), 0, 0, 0}, make([]byte, attach.AddrLen)...)}, // resolved: not idle
		{attach.OpCMListen, []byte{0xff, 0xff, 0xff, 0xff, 1, 0, 0, 0}},
		{attach.OpCMAccept, append([]byte{byte(id), 0, 0, 0}, make([]byte, 12)...)},
		{attach.OpCMReject, []byte{byte(id), 0, 0, 0, 200}},
		{attach.OpCMEstablish, []byte{byte(id), 0, 0, 0}},
		{attach.OpCMDisconnect, []byte{byte(id), 0, 0, 0}},
		{attach.OpCMInitQPAttr, []byte{byte(id), 0, 0, 0, 3}},
		{attach.OpCMInitQPAttr, []byte{byte(id), 0, 0, 0, 99}},
		{attach.OpCMDestroyChannel, []byte{byte(ch), 0, 0, 0}}, // it has an id
		{attach.OpCMDestroyID, []byte{0, 0, 0, 0}},
	}
	for _, g := range garbage {
		if _, files, err := cmd.Command(uint16(g.op), g.b); err == nil {
			for _, f := range files {
				f.Close()
			}
			t.Errorf("op %d with % x succeeded", g.op, g.b)
		}
	}
	// Multicast membership through raw commands: a UDP id joins once, leaves once.
	r, err = call(attach.OpCMCreateID, func(w *attach.Writer) { w.U32(ch); w.U16(attach.PortSpaceUDP); w.U16(0); w.U64(8) })
	if err != nil {
		t.Fatal(err)
	}
	uid := r.U32()
	group := netip.AddrPortFrom(testaddr.Group(testaddr.Attach), 0)
	for i, want := range []error{nil, syscall.EADDRINUSE} {
		if _, err := call(attach.OpCMJoinMcast, func(w *attach.Writer) { w.U32(uid); w.PutAddr(group); w.U8(0) }); !errors.Is(err, want) && !(want == nil && err == nil) {
			t.Fatalf("join %d: %v", i, err)
		}
	}
	for i, want := range []error{nil, syscall.EADDRNOTAVAIL} {
		if _, err := call(attach.OpCMLeaveMcast, func(w *attach.Writer) { w.U32(uid); w.PutAddr(group) }); !errors.Is(err, want) && !(want == nil && err == nil) {
			t.Fatalf("leave %d: %v", i, err)
		}
	}
	if _, err := call(attach.OpCMDestroyID, func(w *attach.Writer) { w.U32(uid) }); err != nil {
		t.Fatal(err)
	}

	// A flood of channels ends in ENOMEM, not in the daemon's descriptors running out.
	var chans []uint32
	for {
		r, err := call(attach.OpCMCreateChannel, nil)
		if err != nil {
			if !errors.Is(err, syscall.ENOMEM) || len(chans) > 100 {
				t.Fatalf("after %d channels: %v", len(chans), err)
			}
			break
		}
		chans = append(chans, r.U32())
	}
	for _, h := range chans {
		if _, err := call(attach.OpCMDestroyChannel, func(w *attach.Writer) { w.U32(h) }); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := call(attach.OpCMDestroyID, func(w *attach.Writer) { w.U32(id) }); err != nil {
		t.Fatal(err)
	}
	if _, err := call(attach.OpCMDestroyChannel, func(w *attach.Writer) { w.U32(ch) }); err != nil {
		t.Fatal(err)
	}
	// Random commands from a third session: whatever they do, they do it to that
	// session's own CM objects.
	g := attachedSide(t, addr)
	rnd := rand.New(rand.NewPCG(1, 2))
	for range 500 {
		op := attach.OpCMCreateChannel + attach.Op(rnd.IntN(int(attach.OpCMLeaveMcast-attach.OpCMCreateChannel)+1))
		b := make([]byte, rnd.IntN(80))
		for i := range b {
			b[i] = byte(rnd.IntN(4)) // small numbers: handles that may exist
		}
		_, files, _ := g.dev.Commander().Command(uint16(op), b)
		for _, f := range files {
			f.Close()
		}
	}
	// b's agent and a's listener still work.
	dialBoth(ctx, t, b, a, la, "after")
}

// child is a test's child process attached to the daemon.
type child struct {
	cmd   *exec.Cmd
	lines *bufio.Scanner
	port  uint16
}

// startChild starts an echo child (attachChild) and reads the port it listens on.
func startChild(t *testing.T, addr netip.Addr) *child {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "CM_ATTACH_CHILD=echo", "CM_ATTACH_ADDR="+addr.String())
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	c := &child{cmd: cmd, lines: bufio.NewScanner(out)}
	if !c.lines.Scan() || !strings.HasPrefix(c.lines.Text(), "listening ") {
		t.Fatalf("child: %q", c.lines.Text())
	}
	port, _ := strconv.Atoi(strings.TrimPrefix(c.lines.Text(), "listening "))
	c.port = uint16(port)
	return c
}

// echo sends msg on cc and waits for it to come back.
func echo(s *aside, cc *cm.Conn, msg string) error {
	if err := cc.QP().PostRecv(verbs.RecvWR{ID: 1, SGL: []verbs.SGE{s.mr.SGE(0, 1024)}}); err != nil {
		return err
	}
	copy(s.buf[2048:], msg)
	if err := cc.QP().PostSend(verbs.SendWR{ID: 2, Opcode: verbs.WRSend, Flags: verbs.SendSignaled,
		SGL: []verbs.SGE{s.mr.SGE(2048, len(msg))}}); err != nil {
		return err
	}
	var got string
	for i := 0; i < 2; i++ {
		wc, err := waitWC(s.cq)
		if err != nil {
			return err
		}
		if wc.ID == 1 {
			got = string(s.buf[:wc.ByteLen])
		}
	}
	if got != msg {
		return fmt.Errorf("echoed %q, want %q", got, msg)
	}
	return nil
}

// TestAttachedCMProcesses: two processes attached to one daemon listen on their own
// ports of its one address; a third (this one) connects to both and exchanges bytes.
// One is killed while connected: its peer's connection ends (the daemon disconnects
// the dead session's ids), its port is free again, and the other connection goes on.
func TestAttachedCMProcesses(t *testing.T) {
	_, addr := attachtest.Daemon(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	kids := []*child{startChild(t, addr), startChild(t, addr)}
	if kids[0].port == kids[1].port {
		t.Fatalf("both children listen on %d", kids[0].port)
	}
	c := attachedSide(t, addr)
	var conns []*cm.Conn
	for i, k := range kids {
		cc, err := c.a.Dial(ctx, netip.AddrPortFrom(addr, k.port), c.param("hi"))
		if err != nil {
			t.Fatal(err)
		}
		if !k.lines.Scan() || k.lines.Text() != "accepted" {
			t.Fatalf("child %d: %q", i, k.lines.Text())
		}
		if err := echo(c, cc, fmt.Sprintf("hello %d", i)); err != nil {
			t.Fatalf("child %d: %v", i, err)
		}
		conns = append(conns, cc)
	}
	kids[0].cmd.Process.Kill()
	kids[0].cmd.Wait()
	select {
	case <-conns[0].Done():
		if !errors.Is(conns[0].Err(), cm.ErrDisconnected) {
			t.Fatalf("connection ended with %v", conns[0].Err())
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the dead process's peer was not disconnected")
	}
	l, err := c.a.Listen(kids[0].port, 1)
	if err != nil {
		t.Fatalf("the dead process's port: %v", err)
	}
	l.Close()
	if err := echo(c, conns[1], "still there"); err != nil {
		t.Fatal(err)
	}
}

// attachChild is a test's child process: "echo" attaches, listens on a free port
// (printing it), accepts one connection, says so, and sends back every message it
// receives until it is killed.
func attachChild(mode string) int {
	addr := netip.MustParseAddr(os.Getenv("CM_ATTACH_ADDR"))
	s, err := openSide(verbs.SoftConfig{Name: "sw0", Addr: addr, Attach: true})
	if err != nil {
		fmt.Println("error:", err)
		return 1
	}
	l, err := s.a.Listen(0, 1)
	if err != nil {
		fmt.Println("error:", err)
		return 1
	}
	fmt.Println("listening", l.Addr().Port())
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c, _, err := accept(ctx, s, l, "")
	if err != nil {
		fmt.Println("error:", err)
		return 1
	}
	fmt.Println("accepted")
	for ctx.Err() == nil {
		if err := c.QP().PostRecv(verbs.RecvWR{ID: 1, SGL: []verbs.SGE{s.mr.SGE(0, 1024)}}); err != nil {
			return 1
		}
		var wc verbs.WC
		for err = errors.New("no completion"); err != nil && ctx.Err() == nil; {
			wc, err = waitWC(s.cq)
		}
		if err != nil {
			return 1
		}
		if err := c.QP().PostSend(verbs.SendWR{ID: 2, Opcode: verbs.WRSend, Flags: verbs.SendSignaled,
			SGL: []verbs.SGE{s.mr.SGE(0, int(wc.ByteLen))}}); err != nil {
			return 1
		}
		if _, err := waitWC(s.cq); err != nil {
			return 1
		}
	}
	return 0
}

func (s *aside) udQP(t *testing.T) *verbs.QP {
	t.Helper()
	qp, err := s.pd.CreateQP(verbs.QPInitAttr{Type: verbs.QPTypeUD, SendCQ: s.cq, RecvCQ: s.cq,
		Cap: verbs.QPCap{MaxSendWR: 4, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { qp.Close() })
	return qp
}

// udSend sends msg from s's qp to r's with ah, QPN and Q_Key, and checks that it
// arrived (after the GRH) from s's QP.
func udSend(t *testing.T, s, r *aside, sqp, rqp *verbs.QP, ah *verbs.AH, qpn, qkey uint32, msg string) {
	t.Helper()
	if err := rqp.PostRecv(verbs.RecvWR{ID: 1, SGL: []verbs.SGE{r.mr.SGE(0, 1024)}}); err != nil {
		t.Fatal(err)
	}
	copy(s.buf[2048:], msg)
	if err := sqp.PostSend(verbs.SendWR{ID: 2, Opcode: verbs.WRSend, Flags: verbs.SendSignaled, AH: ah,
		RemoteQPN: qpn, RemoteQKey: qkey, SGL: []verbs.SGE{s.mr.SGE(2048, len(msg))}}); err != nil {
		t.Fatal(err)
	}
	if _, err := waitWC(s.cq); err != nil {
		t.Fatal(err)
	}
	wc, err := waitWC(r.cq)
	if err != nil {
		t.Fatal(err)
	}
	if got := string(r.buf[verbs.GRHLen:wc.ByteLen]); got != msg || wc.SrcQP != sqp.QPN() {
		t.Fatalf("received %q from QP %#x", got, wc.SrcQP)
	}
}

// TestAttachedCMUD: UD service resolution (SIDR) and a multicast join between two
// sessions, through the daemon's rdma_cm.
func TestAttachedCMUD(t *testing.T) {
	_, addr := attachtest.Daemon(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	a, b := attachedSide(t, addr), attachedSide(t, addr)
	aqp, bqp := a.udQP(t), b.udQP(t)
	l, err := a.a.ListenUD(7010, 4)
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		r, err := l.Accept(ctx)
		if err != nil {
			return
		}
		if !bytes.HasPrefix(r.PrivateData, []byte("which QP?")) {
			t.Errorf("SIDR private data %q", r.PrivateData)
		}
		r.AcceptUD(&cm.Param{QP: aqp, PrivateData: []byte("this one")})
		if r, err = l.Accept(ctx); err == nil {
			r.Reject([]byte("go away"))
		}
	}()
	d, err := b.a.ResolveUD(ctx, l.Addr(), &cm.Param{QP: bqp, PrivateData: []byte("which QP?")})
	if err != nil {
		t.Fatal(err)
	}
	if d.QPN != aqp.QPN() || d.QKey != cm.UDPQKey || d.AH == nil || !bytes.HasPrefix(d.PrivateData, []byte("this one")) {
		t.Fatalf("resolved %+v", d)
	}
	udSend(t, b, a, bqp, aqp, d.AH, d.QPN, d.QKey, "to the UD service")
	var se *cm.SIDRError
	if _, err := b.a.ResolveUD(ctx, l.Addr(), &cm.Param{QP: bqp}); !errors.As(err, &se) || !bytes.HasPrefix(se.PrivateData, []byte("go away")) {
		t.Fatalf("refused resolution: %v", err)
	}

	group := testaddr.Group(testaddr.Attach)
	rm, err := a.a.JoinMulticast(group, &cm.JoinParam{QP: aqp})
	if err != nil {
		t.Fatal(err)
	}
	defer rm.Leave()
	sm, err := b.a.JoinMulticast(group, &cm.JoinParam{QP: bqp, SendOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer sm.Leave()
	if sm.MGID != verbs.GIDFromAddr(group) || sm.QPN != cm.McastQPN || sm.QKey != cm.UDPQKey || sm.AH == nil {
		t.Fatalf("joined %+v", sm)
	}
	udSend(t, b, a, bqp, aqp, sm.AH, sm.QPN, sm.QKey, "to the group")
}

// TestAttachedCMDaemonGone: the daemon stops while an attached process is connected
// to an in-process device: the attached side's connection ends (its ids get
// DEVICE_REMOVAL) and so does the peer's (the daemon disconnected them on its way out).
func TestAttachedCMDaemonGone(t *testing.T) {
	srv, addr := attachtest.Daemon(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	a := attachedSide(t, addr)
	p := testaddr.Open(t, testaddr.CM, func(ad netip.Addr) (*aside, error) {
		return openSide(verbs.SoftConfig{Name: "cmp0", Addr: ad})
	})
	t.Cleanup(p.close)
	l, err := a.a.Listen(7020, 1)
	if err != nil {
		t.Fatal(err)
	}
	ach := acceptAsync(ctx, a, l, "")
	pc, err := p.a.Dial(ctx, l.Addr(), p.param(""))
	if err != nil {
		t.Fatal(err)
	}
	ac := <-ach
	if ac.err != nil {
		t.Fatal(ac.err)
	}
	srv.Close()
	for _, c := range []*cm.Conn{ac.c, pc} {
		select {
		case <-c.Done():
		case <-time.After(10 * time.Second):
			t.Fatal("a connection outlived the daemon")
		}
	}
}

// TestAttachedCMTwoDevices: a daemon serving two devices; a process attached to one
// connects to a listener of a process attached to the other, each device's CM its own.
func TestAttachedCMTwoDevices(t *testing.T) {
	t.Setenv("XDG_RUNTIME_DIR", t.TempDir())
	var srv *server.Server
	var addrs [2]netip.Addr
	testaddr.Open(t, testaddr.Attach, func(a netip.Addr) (*server.Server, error) {
		addrs = [2]netip.Addr{a, testaddr.Addr(testaddr.Attach)}
		s, err := server.New(server.Config{Devices: []soft.Config{{Name: "sw0", Addr: addrs[0]}, {Name: "sw1", Addr: addrs[1]}}})
		srv = s
		return s, err
	})
	defer srv.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	a, b := attachedSide(t, addrs[0]), attachedSide(t, addrs[1])
	l, err := b.a.Listen(7030, 1)
	if err != nil {
		t.Fatal(err)
	}
	// The same port on the other device's address is another address's port.
	l2, err := a.a.Listen(7030, 1)
	if err != nil {
		t.Fatal(err)
	}
	defer l2.Close()
	cc := dialBoth(ctx, t, a, b, l, "across")
	cc.Close()
}

// TestAttachedCMOptions: Param's TOS and ACKTimeout travel to the daemon's CM as
// CM_SET_OPTION (rdma_set_option) and come back in CM_INIT_QP_ATTR: the dialler's QP
// and the acceptor's have the traffic class, and the ACK timeout (the acceptor's from
// the REQ's path, or its own).
func TestAttachedCMOptions(t *testing.T) {
	_, addr := attachtest.Daemon(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	a, c := attachedSide(t, addr), attachedSide(t, addr)
	l, err := a.a.Listen(7010, 4)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	for _, tc := range []struct{ acceptorTimeout, want uint8 }{{0, 12}, {16, 16}} {
		ap := a.param("")
		ap.ACKTimeout = tc.acceptorTimeout
		ch := acceptWithAsync(ctx, l, ap)
		p := c.param("")
		p.TOS, p.ACKTimeout = 0xb8, 12
		cc, err := c.a.Dial(ctx, l.Addr(), p)
		if err != nil {
			t.Fatal(err)
		}
		ac := <-ch
		if ac.err != nil {
			t.Fatal(ac.err)
		}
		for _, q := range []struct {
			who     string
			qp      *verbs.QP
			timeout uint8
		}{{"dialler", cc.QP(), 12}, {"acceptor", ac.c.QP(), tc.want}} {
			at := q.qp.Query()
			if at.AH.TrafficClass != 0xb8 || at.Timeout != q.timeout {
				t.Fatalf("%s's QP: traffic class %#x, ACK timeout %d; want 0xb8, %d", q.who, at.AH.TrafficClass, at.Timeout, q.timeout)
			}
		}
		if err := send(c, a, cc, ac.c, "tos"); err != nil {
			t.Fatal(err)
		}
		cc.Close()
		ac.c.Close()
	}
}

// TestAttachedCMOwnEngine: rdma_cm on attached devices whose clients run engines of
// their own on the daemon's address (GOVERBS_ATTACH_ENGINE=1): the CM stays the
// daemon's, the QPs are the clients' engines', moved with CM_INIT_QP_ATTR's attributes,
// and a QPN of a client's range is that client's own.
func TestAttachedCMOwnEngine(t *testing.T) {
	t.Setenv(verbsattach.EnvOwnEngine, "1")
	_, addr := attachtest.Daemon(t)
	dev, err := verbs.OpenSoft(verbs.SoftConfig{Addr: addr, Attach: true})
	if err != nil {
		t.Fatal(err)
	}
	own := verbsattach.OwnEngine(dev.Commander())
	dev.Close()
	if !own {
		t.Fatal("GOVERBS_ATTACH_ENGINE=1 gave a device on the daemon's engine")
	}
	t.Run("SharesPorts", TestAttachedCMSharesPorts)
	t.Run("ForeignQP", TestAttachedCMForeignQP)
	t.Run("Processes", TestAttachedCMProcesses)
	t.Run("UD", TestAttachedCMUD)
	t.Run("Options", TestAttachedCMOptions)
}

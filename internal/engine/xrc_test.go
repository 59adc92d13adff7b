package engine_test

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/goverbs/goverbs/internal/engine"
	"github.com/goverbs/goverbs/verbs"
)

// xrcTarget is the receive side of XRC on one host: a domain, an XRC SRQ with its CQ,
// and XRC_RECV QPs made on demand.
type xrcTarget struct {
	h    *host
	xrcd *verbs.XRCD
	srq  *verbs.SRQ
	cq   *verbs.CQ
	num  uint32
}

func newXRCTarget(t *testing.T, h *host, xrcd *verbs.XRCD) *xrcTarget {
	t.Helper()
	cq, err := h.Dev.CreateCQ(1024, nil)
	if err != nil {
		t.Fatal(err)
	}
	srq, err := h.PD.CreateSRQEx(verbs.SRQInitEx{Type: verbs.SRQTypeXRC, XRCD: xrcd, CQ: cq,
		Attr: verbs.SRQAttr{MaxWR: 256, MaxSGE: 2}})
	if err != nil {
		t.Fatal(err)
	}
	num, err := srq.Num()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srq.Close(); cq.Close() })
	return &xrcTarget{h: h, xrcd: xrcd, srq: srq, cq: cq, num: num}
}

func openXRCD(t *testing.T, h *host) *verbs.XRCD {
	t.Helper()
	x, err := h.Dev.OpenXRCD(-1, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { x.Close() })
	return x
}

// xrcLink connects an XRC_SEND QP of sender to a new XRC_RECV QP of xrcd (on target).
func xrcLink(t *testing.T, sender, target *host, xrcd *verbs.XRCD) (ini, tgt *verbs.QP) {
	t.Helper()
	ini, err := sender.PD.CreateQP(verbs.QPInitAttr{Type: verbs.QPTypeXRCSend, SendCQ: sender.CQ,
		Cap: verbs.QPCap{MaxSendWR: 256, MaxSendSGE: 2}})
	if err != nil {
		t.Fatal(err)
	}
	tgt, err = xrcd.CreateQP(verbs.QPInitAttr{Type: verbs.QPTypeXRCRecv})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ini.Close(); tgt.Close() })
	connect(t, ini, defaultRC(), target.GID, tgt.QPN(), 0x10, 0x200)
	connect(t, tgt, defaultRC(), sender.GID, ini.QPN(), 0x200, 0x10)
	return ini, tgt
}

// TestXRCManySendersOneSRQ: four XRC_SEND QPs on two devices send into one XRC SRQ
// through four XRC_RECV QPs of one domain (Annex A14's point: receive buffers shared by
// every sender). Each message lands in the SRQ's buffers, completes in the SRQ's CQ
// under the XRC_RECV QP it came through, and WRITE, READ and atomics reach the memory of
// the SRQ's PD.
func TestXRCManySendersOneSRQ(t *testing.T) {
	tg, a, b := newHost(t), newHost(t), newHost(t)
	if tg.Dev.Query().DeviceCapFlags&verbs.DeviceXRC == 0 {
		t.Fatal("the software device does not claim IBV_DEVICE_XRC")
	}
	x := newXRCTarget(t, tg, openXRCD(t, tg))
	const n = 256
	dst := tg.MR(t, 8*n, allAccess)
	for i := range 8 {
		if err := x.srq.PostRecv(verbs.RecvWR{ID: uint64(100 + i), SGL: []verbs.SGE{dst.SGE(i*n, n)}}); err != nil {
			t.Fatal(err)
		}
	}
	type link struct {
		from     *host
		ini, tgt *verbs.QP
	}
	var links []link
	for _, h := range []*host{a, b, a, b} {
		ini, tgt := xrcLink(t, h, tg, x.xrcd)
		links = append(links, link{h, ini, tgt})
	}
	srcA, srcB := a.MR(t, n, allAccess), b.MR(t, n, allAccess)
	fill(srcA.Buf(), 1)
	fill(srcB.Buf(), 2)
	src := map[*host]*verbs.MR{a: srcA, b: srcB}
	for i, l := range links {
		for k := range 2 {
			wr := verbs.SendWR{ID: uint64(10*i + k), Opcode: verbs.WRSend, Flags: verbs.SendSignaled,
				SGL: []verbs.SGE{src[l.from].SGE(0, n)}, RemoteSRQN: x.num}
			if k == 1 {
				wr.Opcode, wr.Imm = verbs.WRSendWithImm, uint32(i)
			}
			if err := l.ini.PostSend(wr); err != nil {
				t.Fatal(err)
			}
		}
	}
	for _, h := range []*host{a, b} {
		for _, wc := range waitWC(t, h.CQ, 4, 5*time.Second) {
			if wc.Status != verbs.WCSuccess || wc.Opcode != verbs.WCSend {
				t.Fatalf("send completion %+v", wc)
			}
		}
	}
	byQP := map[uint32]int{}
	for _, wc := range waitWC(t, x.cq, 8, 5*time.Second) {
		if wc.Status != verbs.WCSuccess || wc.Opcode != verbs.WCRecv || wc.ByteLen != n || wc.ID < 100 || wc.ID >= 108 {
			t.Fatalf("receive completion %+v", wc)
		}
		byQP[wc.QPN]++
		i := int(wc.ID - 100)
		got := dst.Buf()[i*n : (i+1)*n]
		if !bytes.Equal(got, srcA.Buf()) && !bytes.Equal(got, srcB.Buf()) {
			t.Fatalf("buffer %d holds neither sender's data", i)
		}
	}
	for _, l := range links {
		if byQP[l.tgt.QPN()] != 2 {
			t.Errorf("XRC_RECV QP %#x: %d completions, want 2 (%v)", l.tgt.QPN(), byQP[l.tgt.QPN()], byQP)
		}
	}

	// One-sided operations check the rkey against the PD of the SRQ the XRCETH names.
	l := links[1]
	fill(srcB.Buf(), 3)
	back := b.MR(t, n, allAccess)
	word := tg.MR(t, 8, allAccess)
	wrs := []verbs.SendWR{
		{ID: 1, Opcode: verbs.WRRDMAWrite, SGL: []verbs.SGE{srcB.SGE(0, n)}, RemoteAddr: dst.Addr(), RKey: dst.RKey(), RemoteSRQN: x.num},
		{ID: 2, Opcode: verbs.WRRDMARead, SGL: []verbs.SGE{back.SGE(0, n)}, RemoteAddr: dst.Addr(), RKey: dst.RKey(), RemoteSRQN: x.num},
		{ID: 3, Opcode: verbs.WRAtomicFetchAdd, SGL: []verbs.SGE{back.SGE(0, 8)}, RemoteAddr: word.Addr(), RKey: word.RKey(), CompareAdd: 5, RemoteSRQN: x.num},
	}
	for i := range wrs {
		wrs[i].Flags = verbs.SendSignaled
	}
	if err := l.ini.PostSend(wrs...); err != nil {
		t.Fatal(err)
	}
	for _, wc := range waitWC(t, b.CQ, 3, 5*time.Second) {
		if wc.Status != verbs.WCSuccess {
			t.Fatalf("one-sided completion %+v", wc)
		}
	}
	if !bytes.Equal(dst.Buf()[:n], srcB.Buf()) {
		t.Error("XRC RDMA WRITE did not land")
	}
	if word.Buf()[0] != 5 || back.Buf()[0] != 0 {
		t.Errorf("XRC FETCH_ADD: word %d, original %d", word.Buf()[0], back.Buf()[0])
	}
}

// TestXRCRequestErrors: the requests an XRC target must refuse, each with an Invalid
// Request NAK (the sender's WR completes with REM_INV_REQ_ERR) and its counter: an SRQ
// number nobody has, an XRC SRQ of another domain, and a basic SRQ's number.
func TestXRCRequestErrors(t *testing.T) {
	tg, a := newHost(t), newHost(t)
	x := newXRCTarget(t, tg, openXRCD(t, tg))
	other := newXRCTarget(t, tg, openXRCD(t, tg)) // a second domain on the same device
	basic, err := tg.PD.CreateSRQ(verbs.SRQAttr{MaxWR: 4, MaxSGE: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer basic.Close()
	basicNum, _ := basic.Num()
	buf := tg.MR(t, 64, allAccess)
	for _, s := range []*verbs.SRQ{x.srq, other.srq, basic} {
		if err := s.PostRecv(verbs.RecvWR{ID: 1, SGL: []verbs.SGE{buf.SGE(0, 64)}}); err != nil {
			t.Fatal(err)
		}
	}
	src := a.MR(t, 64, allAccess)
	for _, c := range []struct {
		name    string
		srqn    uint32
		counter string
	}{
		{"no such SRQ", x.num ^ 0x800000, "xrc_bad_srqn"},
		{"SRQ of another domain", other.num, "xrc_domain_violation"},
		{"basic SRQ", basicNum, "xrc_bad_srqn"},
	} {
		t.Run(c.name, func(t *testing.T) {
			ini, tgt := xrcLink(t, a, tg, x.xrcd)
			before := tg.Dev.Counters().Get(c.counter)
			if err := ini.PostSend(verbs.SendWR{ID: 9, Opcode: verbs.WRSend, Flags: verbs.SendSignaled,
				SGL: []verbs.SGE{src.SGE(0, 64)}, RemoteSRQN: c.srqn}); err != nil {
				t.Fatal(err)
			}
			wc := expectStatus(t, a.CQ, 9, verbs.WCRemInvReqErr)
			if wc.QPN != ini.QPN() {
				t.Errorf("completion %+v", wc)
			}
			if got := tg.Dev.Counters().Get(c.counter); got != before+1 {
				t.Errorf("%s: %d, want %d", c.counter, got, before+1)
			}
			waitState(t, tgt, verbs.QPStateErr) // a responder error is fatal to the target QP (9.9.3)
		})
	}
	// Nothing reached a receive queue.
	for _, cq := range []*verbs.CQ{x.cq, other.cq} {
		var wcs [4]verbs.WC
		if n, _ := cq.Poll(wcs[:]); n != 0 {
			t.Errorf("a refused request completed: %+v", wcs[:n])
		}
	}
}

// TestXRCDLifetime: ibv_open_xrcd's sharing and its refusals. Opens of one file share a
// domain (an SRQ made through one serves a target made through the other), O_CREAT is
// needed to make one and O_EXCL refuses an existing one; a domain with objects cannot be
// closed, and a closed one makes nothing.
func TestXRCDLifetime(t *testing.T) {
	tg, a := newHost(t), newHost(t)
	path := filepath.Join(t.TempDir(), "xrc_domain")
	f, err := os.OpenFile(path, os.O_RDONLY|os.O_CREATE, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	fd := int(f.Fd())
	if _, err := tg.Dev.OpenXRCD(fd, 0); !errors.Is(err, syscall.EAGAIN) {
		t.Fatalf("open without O_CREAT of a file with no domain: %v, want EAGAIN (the kernel's)", err)
	}
	x1, err := tg.Dev.OpenXRCD(fd, os.O_CREATE)
	if err != nil {
		t.Fatal(err)
	}
	g, err := os.Open(path) // another descriptor of the same inode
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	if _, err := tg.Dev.OpenXRCD(int(g.Fd()), os.O_CREATE|os.O_EXCL); !errors.Is(err, syscall.EINVAL) {
		t.Fatalf("O_EXCL open of a file with a domain: %v, want EINVAL (the kernel's)", err)
	}
	x2, err := tg.Dev.OpenXRCD(int(g.Fd()), 0)
	if err != nil {
		t.Fatal(err)
	}
	x := newXRCTarget(t, tg, x2)
	buf := tg.MR(t, 64, allAccess)
	if err := x.srq.PostRecv(verbs.RecvWR{ID: 5, SGL: []verbs.SGE{buf.SGE(0, 64)}}); err != nil {
		t.Fatal(err)
	}
	ini, tgt := xrcLink(t, a, tg, x1)
	src := a.MR(t, 64, allAccess)
	if err := ini.PostSend(verbs.SendWR{ID: 1, Opcode: verbs.WRSend, Flags: verbs.SendSignaled,
		SGL: []verbs.SGE{src.SGE(0, 64)}, RemoteSRQN: x.num}); err != nil {
		t.Fatal(err)
	}
	expectStatus(t, a.CQ, 1, verbs.WCSuccess)
	if wc := waitWC(t, x.cq, 1, 5*time.Second)[0]; wc.Status != verbs.WCSuccess || wc.ID != 5 || wc.QPN != tgt.QPN() {
		t.Fatalf("completion through a shared domain: %+v", wc)
	}
	if err := x2.Close(); !errors.Is(err, verbs.ErrBusy) {
		t.Fatalf("close of a domain open with an SRQ: %v, want ErrBusy", err)
	}
	if err := x1.Close(); !errors.Is(err, verbs.ErrBusy) {
		t.Fatalf("close of a domain open with a QP: %v, want ErrBusy", err)
	}
	tgt.Close()
	if err := x1.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := x1.CreateQP(verbs.QPInitAttr{Type: verbs.QPTypeXRCRecv}); !errors.Is(err, verbs.ErrClosed) {
		t.Fatalf("CreateQP on a closed domain: %v, want ErrClosed", err)
	}
	if _, err := tg.PD.CreateSRQEx(verbs.SRQInitEx{Type: verbs.SRQTypeXRC, XRCD: x1, CQ: x.cq,
		Attr: verbs.SRQAttr{MaxWR: 4, MaxSGE: 1}}); !errors.Is(err, verbs.ErrClosed) {
		t.Fatalf("CreateSRQEx on a closed domain: %v, want ErrClosed", err)
	}
	// The domain lives on through x2: the O_EXCL open still finds it.
	if _, err := tg.Dev.OpenXRCD(fd, os.O_CREATE|os.O_EXCL); !errors.Is(err, syscall.EINVAL) {
		t.Fatalf("domain gone with one of two opens: %v", err)
	}
}

// TestXRCQPRules: what XRC QPs refuse at creation and in the state machine.
func TestXRCQPRules(t *testing.T) {
	h := newHost(t)
	x := openXRCD(t, h)
	if _, err := h.PD.CreateQP(verbs.QPInitAttr{Type: verbs.QPTypeXRCRecv, SendCQ: h.CQ, RecvCQ: h.RCQ}); !errors.Is(err, verbs.ErrInvalidAttr) {
		t.Errorf("XRC_RECV from a PD: %v", err)
	}
	if _, err := x.CreateQP(verbs.QPInitAttr{Type: verbs.QPTypeRC}); !errors.Is(err, verbs.ErrInvalidAttr) {
		t.Errorf("RC from an XRC domain: %v", err)
	}
	ini, err := h.PD.CreateQP(verbs.QPInitAttr{Type: verbs.QPTypeXRCSend, SendCQ: h.CQ})
	if err != nil {
		t.Fatal(err)
	}
	defer ini.Close()
	if err := ini.PostRecv(verbs.RecvWR{ID: 1}); !errors.Is(err, verbs.ErrQPState) {
		t.Errorf("PostRecv on XRC_SEND: %v", err)
	}
	tgt, err := x.CreateQP(verbs.QPInitAttr{Type: verbs.QPTypeXRCRecv})
	if err != nil {
		t.Fatal(err)
	}
	defer tgt.Close()
	init := &verbs.QPAttr{State: verbs.QPStateInit, Port: 1}
	imask := verbs.QPAttrState | verbs.QPAttrPKeyIndex | verbs.QPAttrPort | verbs.QPAttrAccessFlags
	if err := ini.Modify(init, imask); err != nil {
		t.Fatal(err)
	}
	if err := tgt.Modify(init, imask); err != nil {
		t.Fatal(err)
	}
	rtr := &verbs.QPAttr{State: verbs.QPStateRTR, PathMTU: verbs.MTU1024, DestQPN: 1, AH: verbs.AHAttr{DGID: h.GID, Port: 1}}
	base := verbs.QPAttrState | verbs.QPAttrAV | verbs.QPAttrPathMTU | verbs.QPAttrDestQPN | verbs.QPAttrRQPSN
	if err := ini.Modify(rtr, base|verbs.QPAttrMinRNRTimer); !errors.Is(err, verbs.ErrExtraAttr) {
		t.Errorf("XRC_SEND RTR with min_rnr_timer (it has no responder): %v", err)
	}
	if err := tgt.Modify(rtr, base); !errors.Is(err, verbs.ErrMissingAttr) {
		t.Errorf("XRC_RECV RTR without max_dest_rd_atomic and min_rnr_timer: %v", err)
	}
	if err := tgt.PostSend(verbs.SendWR{Opcode: verbs.WRSend}); err == nil {
		t.Error("PostSend on XRC_RECV accepted")
	}
}

// TestXRCPostPollAllocatesNothing: an XRC round, an SRQ receive posted, a SEND with its
// RemoteSRQN posted, both completions polled, costs no allocation anywhere in the
// process (the engine's goroutines included): the XRCETH's lookup and the target's SRQ
// choice are on the data path.
func TestXRCPostPollAllocatesNothing(t *testing.T) {
	if engine.RaceEnabled {
		t.Skip("allocation counts are meaningless under the race detector (sync.Pool drops items)")
	}
	tg, a := newHost(t), newHost(t)
	x := newXRCTarget(t, tg, openXRCD(t, tg))
	ini, _ := xrcLink(t, a, tg, x.xrcd)
	src, dst := a.MR(t, 64, allAccess), tg.MR(t, 64, allAccess)
	var wcs [4]verbs.WC
	poll := func(cq *verbs.CQ) {
		deadline := time.Now().Add(5 * time.Second)
		for {
			n, err := cq.Poll(wcs[:])
			if err != nil || n > 1 || n == 1 && wcs[0].Status != verbs.WCSuccess {
				t.Fatalf("poll: %d %v %+v", n, err, wcs[0])
			}
			if n == 1 {
				return
			}
			if time.Now().After(deadline) {
				t.Fatal("no completion")
			}
		}
	}
	round := func() {
		if err := x.srq.PostRecv(verbs.RecvWR{ID: 1, SGL: []verbs.SGE{dst.SGE(0, 64)}}); err != nil {
			t.Fatal(err)
		}
		if err := ini.PostSend(verbs.SendWR{ID: 2, Opcode: verbs.WRSend, Flags: verbs.SendSignaled,
			SGL: []verbs.SGE{src.SGE(0, 64)}, RemoteSRQN: x.num}); err != nil {
			t.Fatal(err)
		}
		poll(a.CQ)
		poll(x.cq)
	}
	for range 20 { // warm the pools
		round()
	}
	if n := testing.AllocsPerRun(50, round); n != 0 {
		t.Errorf("%v allocations per XRC post and poll", n)
	}
}

package engine

import (
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/goverbs/goverbs/verbs/driver"
)

// leadPair is two default-mode devices on real UDP sockets with an RC QP each, connected,
// and a receive posted on b's QP.
type leadPair struct {
	a, b       *Device
	qa, qb     *QP
	cqa, cqb   *CQ
	mra, mrb   *MR
	bufa, bufb []byte
}

func newLeadPair(t *testing.T) *leadPair {
	t.Helper()
	p := &leadPair{a: openUDPDevice(t), b: openUDPDevice(t)}
	// Room for every send of a test's rounds (TestPollReadsTheSocket's 20): a's receive
	// goroutine may not have processed b's ACKs, and retired a's sends, by the next post.
	qcap := driver.QPCap{MaxSendWR: 32, MaxRecvWR: 16, MaxSendSGE: 1, MaxRecvSGE: 1}
	side := func(d *Device) (*QP, *CQ, *MR, []byte) {
		pd, err := d.allocPD()
		must(t, err)
		cq, err := d.newCQ(64)
		must(t, err)
		qp, err := d.CreateQP(pd, QPInit{Type: driver.QPTypeRC, SendCQ: cq, RecvCQ: cq, Cap: qcap})
		must(t, err)
		buf := make([]byte, 64)
		mr, err := pd.regMR(buf, driver.AccessLocalWrite)
		must(t, err)
		return qp, cq, mr, buf
	}
	p.qa, p.cqa, p.mra, p.bufa = side(p.a)
	p.qb, p.cqb, p.mrb, p.bufb = side(p.b)
	rcUp(t, p.qa, p.b.LocalAddr().Addr(), p.qb.QPN(), 0, 0)
	rcUp(t, p.qb, p.a.LocalAddr().Addr(), p.qa.QPN(), 0, 0)
	// a's retry timer (4.096 us << 16, about 270 ms) outlasts the ACK deferral, so an ACK
	// b owes arrives before a retransmission would answer for it.
	p.qa.mu.Lock()
	p.qa.attr.Timeout = 16
	p.qa.mu.Unlock()
	return p
}

func (p *leadPair) recvB(t *testing.T) {
	t.Helper()
	must(t, p.qb.PostRecv([]driver.RecvWR{{ID: 1, SGL: []driver.SGE{{Addr: p.mrb.Addr(), Length: 64, LKey: p.mrb.LKey()}}}}))
}

func (p *leadPair) sendA(t *testing.T) {
	t.Helper()
	must(t, p.qa.PostSend([]driver.SendWR{{ID: 2, Opcode: driver.WRSend, Flags: driver.SendSignaled, SGL: []driver.SGE{{Addr: p.mra.Addr(), Length: 8, LKey: p.mra.LKey()}}}}))
}

// serve runs w.Serve until it reports that it served, as a channel's Wait does (a
// Serve that finds the receive goroutine holding the socket waits for its Turn).
func serve(w driver.Waiter) {
	for !w.Serve() {
		select {
		case <-w.Turn():
		case <-time.After(time.Millisecond):
		}
	}
}

// TestWaiterReadsTheSocket: on a default-mode device, the goroutine serving a waiting
// completion channel is the one that reads and processes the packet its completion comes
// from: the CQ's event handler runs inside its Serve, not in the receive goroutine, so
// the netpoller wakes the goroutine that wants the completion (no hand-off).
func TestWaiterReadsTheSocket(t *testing.T) {
	p := newLeadPair(t)
	w := p.b.NewWaiter()
	if w == nil {
		t.Fatal("a default-mode device on a UDP socket offers no Waiter")
	}
	inServe := make(chan bool, 16)
	p.cqb.SetHandler(func() {
		buf := make([]byte, 64<<10)
		inServe <- strings.Contains(string(buf[:runtime.Stack(buf, false)]), "(*Waiter).Serve")
		w.Wake()
	})
	for i := range 5 {
		p.recvB(t)
		must(t, p.cqb.RequestNotify(false))
		served := make(chan struct{})
		go func() { serve(w); close(served) }()
		time.Sleep(20 * time.Millisecond) // the waiter is blocked in the socket's read
		p.sendA(t)
		select {
		case <-served:
		case <-time.After(5 * time.Second):
			t.Fatalf("round %d: Serve did not return after the completion", i)
		}
		wcs := make([]driver.WC, 4)
		if n, _ := p.cqb.Poll(wcs); n != 1 || wcs[0].Status != driver.WCSuccess {
			t.Fatalf("round %d: polled %d completions %+v, want the receive", i, n, wcs[:n])
		}
		// The first round may find the receive goroutine in the read: it steps aside
		// once it sees a waiter come.
		if in := <-inServe; !in && i > 0 {
			t.Fatalf("round %d: the completion was pushed outside the waiter's Serve", i)
		}
	}
}

// TestWakeInterruptsAServeBlockedInTheSocket: a completion pushed from outside the
// receive path (a retry timer's error, a flush) reaches a waiter blocked in the socket's
// read: Wake interrupts the read, and the device still receives afterwards.
func TestWakeInterruptsAServeBlockedInTheSocket(t *testing.T) {
	p := newLeadPair(t)
	w := p.b.NewWaiter()
	served := make(chan struct{})
	go func() { serve(w); close(served) }()
	time.Sleep(20 * time.Millisecond)
	select {
	case <-served:
		t.Fatal("Serve returned with nothing to wake it")
	default:
	}
	w.Wake()
	select {
	case <-served:
	case <-time.After(5 * time.Second):
		t.Fatal("Wake did not end a Serve blocked in the socket's read")
	}
	// A Wake before Serve ends the next one at once.
	w.Wake()
	if !w.Serve() {
		t.Fatal("Serve after Wake reported that another goroutine holds the socket")
	}
	// Nobody serves now: the receive goroutine takes the socket back.
	p.recvB(t)
	p.sendA(t)
	waitCQ(t, p.cqb, 5*time.Second)
}

// TestOwedAckLeavesWithoutTheWaiter: an ACK the serving waiter left owing (its reply
// would have carried it) still leaves when the waiter neither replies nor waits again:
// the receive goroutine sends it once no waiter has come for a while, and the requester
// completes its send.
func TestOwedAckLeavesWithoutTheWaiter(t *testing.T) {
	p := newLeadPair(t)
	w := p.b.NewWaiter()
	p.cqb.SetHandler(w.Wake)
	// A first round lets the receive goroutine step aside.
	for range 2 {
		p.recvB(t)
		must(t, p.cqb.RequestNotify(false))
		served := make(chan struct{})
		go func() { serve(w); close(served) }()
		time.Sleep(20 * time.Millisecond)
		p.sendA(t)
		<-served
		waitCQ(t, p.cqb, time.Second)
	}
	// The last SEND's ACK is owed by b; nobody on b waits or posts again.
	n := 0
	for deadline := time.Now().Add(5 * time.Second); n < 2 && time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		k, _ := p.cqa.Poll(make([]driver.WC, 4))
		n += k
	}
	if n != 2 {
		t.Fatalf("a completed %d sends, want 2: the ACK b owed never left", n)
	}
	if r := p.a.counters.RetryTimeouts.Load(); r != 0 {
		t.Fatalf("a's retry timer expired %d times: the owed ACK came only for a retransmission", r)
	}
}

// waitCQ polls cq until it yields one successful completion.
func waitCQ(t *testing.T, cq *CQ, within time.Duration) {
	t.Helper()
	wcs := make([]driver.WC, 4)
	for deadline := time.Now().Add(within); time.Now().Before(deadline); time.Sleep(100 * time.Microsecond) {
		if n, _ := cq.Poll(wcs); n > 0 {
			if wcs[0].Status != driver.WCSuccess {
				t.Fatalf("completion %+v", wcs[0])
			}
			return
		}
	}
	t.Fatal("no completion")
}

// TestPollReadsTheSocket: on a default-mode device, a program that polls its CQ in a
// loop reads and processes the packets itself: once the receive goroutine has seen the
// polls and stepped aside, the completion is pushed from inside the polling goroutine's
// Poll (PollRx), with no other goroutine's wake-up between the packet and the program.
// The receive goroutine takes the socket back when the polls slow down (drivingGap), which
// a loaded machine may make them do, so most rounds, not all, must show it.
func TestPollReadsTheSocket(t *testing.T) {
	p := newLeadPair(t)
	inPoll := make(chan bool, 1)
	p.cqb.SetHandler(func() {
		buf := make([]byte, 64<<10)
		inPoll <- strings.Contains(string(buf[:runtime.Stack(buf, false)]), "(*Device).PollRx")
	})
	wcs := make([]driver.WC, 4)
	const rounds = 20
	polled := 0
	for i := range rounds {
		p.recvB(t)
		must(t, p.cqb.RequestNotify(false))
		for range 100 { // polls before the packet comes: the receive goroutine sees them
			p.cqb.Poll(wcs)
		}
		p.sendA(t)
		n := 0
		for deadline := time.Now().Add(5 * time.Second); n == 0 && time.Now().Before(deadline); {
			n, _ = p.cqb.Poll(wcs)
		}
		if n != 1 || wcs[0].Status != driver.WCSuccess || wcs[0].ID != 1 {
			t.Fatalf("round %d: polled %d completions %+v, want the receive", i, n, wcs[:n])
		}
		if <-inPoll {
			polled++
		}
	}
	// Under the race detector the polls may come slower than drivingGap, and the receive
	// goroutine may keep the socket in most rounds: the polls must still win some.
	want := rounds / 2
	if raceEnabled {
		want = 1
	}
	if polled < want {
		t.Fatalf("%d of %d completions were pushed inside the poller's Poll, want at least %d", polled, rounds, want)
	}
}

// TestPollerLeavesTheSocket: a program that polled and then stopped polling (it sleeps,
// or waits for something else) loses nothing: the receive goroutine takes the socket
// back and the traffic is served, ACKs included, with no poll on that device.
func TestPollerLeavesTheSocket(t *testing.T) {
	p := newLeadPair(t)
	wcs := make([]driver.WC, 4)
	p.recvB(t)
	p.sendA(t)
	for n := 0; n == 0; { // b receives by polling: its receive goroutine steps aside
		n, _ = p.cqb.Poll(wcs)
	}
	waitCQ(t, p.cqa, 5*time.Second)
	// b stops polling. a sends again; b must receive and ACK from its own goroutine.
	p.recvB(t)
	p.sendA(t)
	waitCQ(t, p.cqa, 5*time.Second) // the ACK came: b processed the SEND
	if r := p.a.counters.RetryTimeouts.Load(); r != 0 {
		t.Fatalf("a's retry timer expired %d times: b served the SEND only for a retransmission", r)
	}
	if n, _ := p.cqb.Poll(wcs); n != 1 || wcs[0].Status != driver.WCSuccess {
		t.Fatalf("b's CQ holds %d completions %+v, want the receive", n, wcs[:n])
	}
}

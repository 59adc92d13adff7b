package engine_test

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/goverbs/goverbs/verbs"
)

// Peer failure (issue 6): the peer is another process — this test binary re-executed as a
// helper that opens a software device and serves — killed with SIGKILL in the middle of a
// transfer; then a new peer process with a new QP; and objects closed while traffic runs,
// with a goroutine-leak check.

const (
	peerEnv    = "GOVERBS_PEERFAIL_HELPER" // "[PEERADDR],LOCALADDR" in the helper process
	peerMRSize = 1 << 20
)

// TestPeerFailHelper is the helper process's body: it is skipped in a normal run.
//
// Protocol on stdin/stdout: the helper prints "READY qpn rkey addr ip", reads
// "PEER qpn rqpsn sqpsn", connects, posts receives, prints "CONNECTED", then serves: it
// answers WRITE and READ as the RC responder does and echoes every SEND back with a SEND
// of the same bytes. It exits when stdin closes.
func TestPeerFailHelper(t *testing.T) {
	spec := os.Getenv(peerEnv)
	if spec == "" {
		t.Skip("the peer-failure tests' helper process")
	}
	self, parent, _ := strings.Cut(spec, ",")
	fail := func(err error) {
		fmt.Fprintln(os.Stderr, "helper:", err)
		os.Exit(3)
	}
	var h *host
	if self == "" {
		h = newHost(t) // an address of its own, chosen where it is bound
	} else {
		h = newHostAt(t, self)
	}
	mr, err := h.PD.RegMR(make([]byte, peerMRSize), allAccess)
	if err != nil {
		fail(err)
	}
	qp := h.QP(t, verbs.QPTypeRC)
	fmt.Printf("READY %d %d %d %s\n", qp.QPN(), mr.RKey(), mr.Addr(), h.GID.Addr())
	in := bufio.NewScanner(os.Stdin)
	if !in.Scan() {
		fail(errors.New("no PEER line"))
	}
	var qpn, rq, sq uint32
	if _, err := fmt.Sscanf(in.Text(), "PEER %d %d %d", &qpn, &rq, &sq); err != nil {
		fail(err)
	}
	p := defaultRC()
	connect(t, qp, p, verbs.GIDFromAddr(netip.MustParseAddr(parent)), qpn, rq, sq)
	const slot, nrecv = 8192, 64
	for i := 0; i < nrecv; i++ {
		if err := qp.PostRecv(verbs.RecvWR{ID: uint64(i), SGL: []verbs.SGE{mr.SGE(i*slot, slot)}}); err != nil {
			fail(err)
		}
	}
	fmt.Println("CONNECTED")
	go func() {
		for in.Scan() {
		}
		os.Exit(0) // the parent closed stdin
	}()
	wcs := make([]verbs.WC, 32)
	for {
		n, err := h.RCQ.Poll(wcs)
		if err != nil {
			fail(err)
		}
		for _, wc := range wcs[:n] {
			if wc.Status != verbs.WCSuccess {
				fail(fmt.Errorf("receive %+v", wc))
			}
			i := int(wc.ID) % nrecv
			// Echo into the echo half of the region, then repost the buffer.
			echo := peerMRSize/2 + i*slot
			copy(mr.Buf()[echo:], mr.Buf()[i*slot:i*slot+int(wc.ByteLen)])
			if err := qp.PostSend(verbs.SendWR{ID: wc.ID, Opcode: verbs.WRSend, SGL: []verbs.SGE{mr.SGE(echo, int(wc.ByteLen))}}); err != nil {
				fail(err)
			}
			if err := qp.PostRecv(verbs.RecvWR{ID: wc.ID + nrecv, SGL: []verbs.SGE{mr.SGE(i*slot, slot)}}); err != nil {
				fail(err)
			}
		}
		h.CQ.Poll(wcs) // the echoes' own (unsignaled: errors only)
		if n == 0 {
			time.Sleep(50 * time.Microsecond)
		}
	}
}

// peerProc is a running helper process.
type peerProc struct {
	t     *testing.T
	cmd   *exec.Cmd
	stdin io.WriteCloser
	out   *bufio.Scanner
	qpn   uint32
	rkey  uint32
	addr  uint64
	gid   verbs.GID
	errs  bytes.Buffer
}

// startPeer starts a helper process serving on self ("": an address it chooses) whose
// QP will be connected to parent.
func startPeer(t *testing.T, self string, parent verbs.GID) *peerProc {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestPeerFailHelper$", "-test.count=1")
	cmd.Env = append(os.Environ(), peerEnv+"="+self+","+parent.Addr().String())
	p := &peerProc{t: t, cmd: cmd}
	cmd.Stderr = &p.errs
	var err error
	if p.stdin, err = cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		p.stdin.Close()
		p.cmd.Process.Kill()
		p.cmd.Wait()
	})
	p.out = bufio.NewScanner(stdout)
	line := p.expect("READY")
	var ip string
	if _, err := fmt.Sscanf(line, "READY %d %d %d %s", &p.qpn, &p.rkey, &p.addr, &ip); err != nil {
		t.Fatalf("helper said %q: %v", line, err)
	}
	a, err := netip.ParseAddr(ip)
	if err != nil {
		t.Fatalf("helper said %q: %v", line, err)
	}
	p.gid = verbs.GIDFromAddr(a)
	return p
}

// expect reads the helper's stdout up to a line starting with prefix.
func (p *peerProc) expect(prefix string) string {
	p.t.Helper()
	lines := make(chan string, 1)
	go func() {
		for p.out.Scan() {
			if l := p.out.Text(); strings.HasPrefix(l, prefix) {
				lines <- l
				return
			}
		}
		close(lines)
	}()
	select {
	case l, ok := <-lines:
		if !ok {
			p.t.Fatalf("helper exited before %s; stderr:\n%s", prefix, p.errs.String())
		}
		return l
	case <-time.After(20 * time.Second):
		p.t.Fatalf("helper did not say %s; stderr:\n%s", prefix, p.errs.String())
	}
	return ""
}

// connectTo tells the helper our QP and PSNs and waits until it is connected.
func (p *peerProc) connectTo(qpn, rq, sq uint32) {
	p.t.Helper()
	fmt.Fprintf(p.stdin, "PEER %d %d %d\n", qpn, rq, sq)
	p.expect("CONNECTED")
}

// checkTransfer WRITEs a pattern into the peer, READs it back, and has a SEND echoed: the
// connection works byte for byte.
func checkTransfer(t *testing.T, h *host, qp *verbs.QP, p *peerProc, seed uint64) {
	t.Helper()
	src, back := h.MR(t, 64<<10, allAccess), h.MR(t, 64<<10, allAccess)
	fill(src.Buf(), seed)
	if err := qp.PostRecv(verbs.RecvWR{ID: 900, SGL: []verbs.SGE{back.SGE(0, 8192)}}); err != nil {
		t.Fatal(err)
	}
	if err := qp.PostSend(
		verbs.SendWR{ID: 901, Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled, SGL: []verbs.SGE{src.SGE(0, 64<<10)}, RemoteAddr: p.addr + 4096, RKey: p.rkey},
		verbs.SendWR{ID: 902, Opcode: verbs.WRRDMARead, Flags: verbs.SendSignaled, SGL: []verbs.SGE{back.SGE(0, 64<<10)}, RemoteAddr: p.addr + 4096, RKey: p.rkey},
	); err != nil {
		t.Fatal(err)
	}
	expectStatus(t, h.CQ, 901, verbs.WCSuccess)
	expectStatus(t, h.CQ, 902, verbs.WCSuccess)
	if !bytes.Equal(back.Buf(), src.Buf()) {
		t.Fatal("READ back from the peer differs from what was written")
	}
	if err := qp.PostSend(verbs.SendWR{ID: 903, Opcode: verbs.WRSend, Flags: verbs.SendSignaled, SGL: []verbs.SGE{src.SGE(100, 3000)}}); err != nil {
		t.Fatal(err)
	}
	expectStatus(t, h.CQ, 903, verbs.WCSuccess)
	wc := expectStatus(t, h.RCQ, 900, verbs.WCSuccess)
	if wc.ByteLen != 3000 || !bytes.Equal(back.Buf()[:3000], src.Buf()[100:3100]) {
		t.Fatalf("echo: %+v", wc)
	}
}

func TestPeerProcessKilledMidTransfer(t *testing.T) {
	if testing.Short() {
		t.Skip("starts helper processes")
	}
	h := newHost(t)
	peer := startPeer(t, "", h.GID)
	params := defaultRC()
	params.Timeout, params.Retry = 14, 3 // 67.1 ms per try, 4 tries: 268 ms
	qp := h.QP(t, verbs.QPTypeRC)
	connect(t, qp, params, peer.gid, peer.qpn, 0x10, 0x20)
	peer.connectTo(qp.QPN(), 0x20, 0x10)
	checkTransfer(t, h, qp, peer, 1)
	checkPath(t, h.Dev) // two processes: through rings with the shortcut on

	// Mid-transfer: 200 WRITEs and READs of 64–256 KiB queued (about 30 MiB: what is left
	// after the kill must outlast the peer's death; with 16–64 KiB the transfer
	// sometimes finished first), and the peer killed once 10 are done.
	src := h.MR(t, peerMRSize, allAccess)
	fill(src.Buf(), 2)
	const total = 200
	for i := 0; i < total; i++ {
		n := 64<<10 + (i%4)*64<<10
		wr := verbs.SendWR{ID: uint64(i), Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled, SGL: []verbs.SGE{src.SGE(0, n)}, RemoteAddr: peer.addr, RKey: peer.rkey}
		if i%3 == 2 {
			wr.Opcode = verbs.WRRDMARead
			wr.SGL = []verbs.SGE{src.SGE(peerMRSize/2, n)}
		}
		if err := qp.PostSend(wr); err != nil {
			t.Fatal(err)
		}
	}
	var killed time.Time
	var failedAt time.Duration
	wcs := waitWCFunc(t, h.CQ, total, 20*time.Second, func(done int) {
		if done >= 10 && killed.IsZero() {
			if err := peer.cmd.Process.Kill(); err != nil { // SIGKILL
				t.Fatal(err)
			}
			killed = time.Now()
		}
	}, func(wc verbs.WC) {
		if wc.Status == verbs.WCRetryExcErr {
			failedAt = time.Since(killed)
		}
	})
	// In order: successes, then exactly one RETRY_EXC_ERR, then every later WR flushed.
	i := 0
	for i < total && wcs[i].Status == verbs.WCSuccess {
		i++
	}
	if i == total || wcs[i].Status != verbs.WCRetryExcErr {
		t.Fatalf("after %d successes: %+v", i, wcs[min(i, total-1)])
	}
	for k, wc := range wcs {
		if wc.ID != uint64(k) {
			t.Fatalf("completion %d is for wr %d", k, wc.ID)
		}
		if k > i && wc.Status != verbs.WCWRFlushErr {
			t.Fatalf("wr %d after the failure completed with %v, want flushed", k, wc.Status)
		}
	}
	budget := time.Duration(params.Retry+1) * 4096 * time.Nanosecond << params.Timeout
	t.Logf("peer killed after %d completions; RETRY_EXC_ERR %v later (timeout×(retry_cnt+1) = %v); %d flushed",
		10, failedAt.Round(time.Millisecond), budget, total-i-1)
	// The deadline runs from the last progress, which is before the kill; scheduling on a
	// loaded machine (and -race) adds a little.
	if failedAt > budget+budget/2+100*time.Millisecond {
		t.Errorf("RETRY_EXC_ERR took %v, more than timeout×(retry_cnt+1) = %v", failedAt, budget)
	}
	if failedAt < budget*time.Duration(params.Retry)/time.Duration(params.Retry+1)/2 {
		t.Errorf("RETRY_EXC_ERR after only %v: fewer tries than retry_cnt", failedAt)
	}
	waitState(t, qp, verbs.QPStateErr)
	if c := qp.Counters(); c.RetryTimeouts < uint64(params.Retry)+1 {
		t.Errorf("%d retry timeouts, want %d", c.RetryTimeouts, params.Retry+1)
	}

	// The peer comes back (a new process, a new QP); the same local QP, reset, connects to
	// it and works.
	peer.cmd.Wait()
	peer2 := startPeer(t, peer.gid.Addr().String(), h.GID) // back on the address the killed one held
	if peer2.qpn != peer.qpn {
		t.Logf("new peer QPN %#x (was %#x)", peer2.qpn, peer.qpn)
	}
	if err := qp.Modify(&verbs.QPAttr{State: verbs.QPStateReset}, verbs.QPAttrState); err != nil {
		t.Fatal(err)
	}
	connect(t, qp, params, peer2.gid, peer2.qpn, 0x500, 0x700)
	peer2.connectTo(qp.QPN(), 0x700, 0x500)
	checkTransfer(t, h, qp, peer2, 3)
	// And a brand-new QP beside it.
	qp2 := h.QP(t, verbs.QPTypeRC)
	peer3 := startPeer(t, "", h.GID)
	connect(t, qp2, params, peer3.gid, peer3.qpn, 1, 2)
	peer3.connectTo(qp2.QPN(), 2, 1)
	checkTransfer(t, h, qp2, peer3, 4)
}

// checkGoroutines returns a function that fails the test if the number of goroutines has
// not come back to what it is now within a few seconds, printing every goroutine's stack.
func checkGoroutines(t *testing.T) func() {
	base := runtime.NumGoroutine()
	return func() {
		t.Helper()
		deadline := time.Now().Add(5 * time.Second)
		for runtime.NumGoroutine() > base {
			if time.Now().After(deadline) {
				buf := make([]byte, 1<<20)
				buf = buf[:runtime.Stack(buf, true)]
				t.Errorf("goroutines leaked: %d now, %d before\n%s", runtime.NumGoroutine(), base, buf)
				return
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
}

// traffic keeps a stream of WRITEs (and SENDs) going from qa to a region of b until stop,
// from one goroutine posting and one polling, and counts completions by status. Errors
// from PostSend and Poll after something was closed end the goroutines; they never panic.
type traffic struct {
	stop     chan struct{}
	wg       sync.WaitGroup
	mu       sync.Mutex
	statuses map[verbs.WCStatus]int
	postErr  atomic.Value
	pollErr  atomic.Value
	posted   atomic.Int64
	done     atomic.Int64
	diag     func() string // what to print when an expectation fails
}

func startTraffic(qa *verbs.QP, cq *verbs.CQ, src, dst *verbs.MR) *traffic {
	tr := &traffic{stop: make(chan struct{}), statuses: map[verbs.WCStatus]int{}}
	tr.wg.Add(2)
	go func() {
		defer tr.wg.Done()
		for i := 0; ; i++ {
			select {
			case <-tr.stop:
				return
			default:
			}
			if tr.posted.Load()-tr.done.Load() >= 32 {
				time.Sleep(20 * time.Microsecond)
				continue
			}
			wr := verbs.SendWR{ID: uint64(i), Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled, SGL: []verbs.SGE{src.SGE(0, 16<<10)},
				RemoteAddr: dst.Addr(), RKey: dst.RKey()}
			if err := qa.PostSend(wr); err != nil {
				tr.postErr.Store(err)
				return
			}
			tr.posted.Add(1)
		}
	}()
	go func() {
		defer tr.wg.Done()
		wcs := make([]verbs.WC, 32)
		for {
			select {
			case <-tr.stop:
				return
			default:
			}
			n, err := cq.Poll(wcs)
			if err != nil {
				tr.pollErr.Store(err)
				return
			}
			tr.mu.Lock()
			for _, wc := range wcs[:n] {
				tr.statuses[wc.Status]++
			}
			tr.mu.Unlock()
			tr.done.Add(int64(n))
			if n == 0 {
				time.Sleep(20 * time.Microsecond)
			}
		}
	}()
	return tr
}

// waitDone waits until at least n completions were polled.
func (tr *traffic) waitDone(t *testing.T, n int64) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for tr.done.Load() < n {
		if time.Now().After(deadline) {
			t.Fatalf("only %d completions", tr.done.Load())
		}
		time.Sleep(time.Millisecond)
	}
}

func (tr *traffic) end() map[verbs.WCStatus]int {
	close(tr.stop)
	tr.wg.Wait()
	tr.mu.Lock()
	defer tr.mu.Unlock()
	return tr.statuses
}

// waitStatus waits until a completion with status st was polled.
func (tr *traffic) waitStatus(t *testing.T, st verbs.WCStatus) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		tr.mu.Lock()
		n := tr.statuses[st]
		tr.mu.Unlock()
		if n > 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("no %v completion; statuses %v\n%s", st, tr.end(), tr.diag())
		}
		time.Sleep(time.Millisecond)
	}
}

func TestCloseWhileTrafficRuns(t *testing.T) {
	// Cases that end in RETRY_EXC_ERR use a short timeout (≈1 ms per try); the others the
	// default, as a responder slowed down by -race on a loaded machine can take longer than
	// 3 ms to answer a burst, and the requester would give up before the NAK arrives.
	fast := defaultRC()
	fast.Timeout, fast.Retry = 8, 2
	cases := []struct {
		name string
		fast bool
		// act closes something while traffic runs and checks what follows.
		act func(t *testing.T, a, b *host, p *pair, dst *verbs.MR, tr *traffic)
	}{
		{"responder MR", false, func(t *testing.T, a, b *host, p *pair, dst *verbs.MR, tr *traffic) {
			if err := dst.Close(); err != nil {
				t.Fatal(err)
			}
			tr.waitStatus(t, verbs.WCRemAccessErr)
			waitState(t, p.QA, verbs.QPStateErr)
		}},
		{"requester QP", false, func(t *testing.T, a, b *host, p *pair, dst *verbs.MR, tr *traffic) {
			// Outstanding work is discarded without completions (ibv_destroy_qp), and
			// posting after Close is an error, not a panic.
			if err := p.QA.Close(); err != nil {
				t.Fatal(err)
			}
			if err := p.QA.PostSend(verbs.SendWR{ID: 1, Opcode: verbs.WRSend, Flags: verbs.SendSignaled}); err == nil {
				t.Fatal("posting to a closed QP did not fail")
			}
			if err := p.QA.PostRecv(verbs.RecvWR{ID: 1}); err == nil {
				t.Fatal("posting a receive to a closed QP did not fail")
			}
		}},
		{"responder QP", true, func(t *testing.T, a, b *host, p *pair, dst *verbs.MR, tr *traffic) {
			if err := p.QB.Close(); err != nil {
				t.Fatal(err)
			}
			tr.waitStatus(t, verbs.WCRetryExcErr)
		}},
		{"CQ", false, func(t *testing.T, a, b *host, p *pair, dst *verbs.MR, tr *traffic) {
			if err := a.CQ.Close(); err == nil {
				t.Fatal("closed a CQ a QP still uses")
			}
			if err := a.PD.Close(); err == nil {
				t.Fatal("closed a PD that still has QPs and MRs")
			}
		}},
		{"requester device", false, func(t *testing.T, a, b *host, p *pair, dst *verbs.MR, tr *traffic) {
			if err := a.Dev.Close(); err != nil {
				t.Fatal(err)
			}
			a.Closed = true
			if err := p.QA.PostSend(verbs.SendWR{ID: 1, Opcode: verbs.WRSend, Flags: verbs.SendSignaled}); err == nil {
				t.Fatal("posting on a closed device did not fail")
			}
		}},
		{"responder device", true, func(t *testing.T, a, b *host, p *pair, dst *verbs.MR, tr *traffic) {
			if err := b.Dev.Close(); err != nil {
				t.Fatal(err)
			}
			b.Closed = true
			tr.waitStatus(t, verbs.WCRetryExcErr)
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			leaks := checkGoroutines(t)
			func() {
				a, b := newHost(t), newHost(t)
				defer a.Dev.Close()
				defer b.Dev.Close()
				params := defaultRC()
				if c.fast {
					params = fast
				}
				p := newPair(t, a, b, verbs.QPTypeRC, params)
				src, dst := a.MR(t, 16<<10, allAccess), b.MR(t, 16<<10, allAccess)
				tr := startTraffic(p.QA, a.CQ, src, dst)
				tr.diag = func() string {
					return fmt.Sprintf("A %v\nB %v\nqa %s\nqb %s", a.Dev.Counters(), b.Dev.Counters(), debugA(p), debugB(p))
				}
				tr.waitDone(t, 50)
				c.act(t, a, b, p, dst, tr)
				time.Sleep(20 * time.Millisecond) // let the failure run its course under traffic
				st := tr.end()
				t.Logf("completions by status: %v; post error: %v", st, tr.postErr.Load())
				// Tear everything down in the order a careful program would, then
				// carelessly close it all again: closing twice is harmless.
				for _, qp := range []*verbs.QP{p.QA, p.QB} {
					qp.Close()
				}
				for _, h := range []*host{a, b} {
					h.CQ.Close()
					h.RCQ.Close()
				}
				src.Close()
				dst.Close()
				a.Dev.Close()
				b.Dev.Close()
				a.Dev.Close()
			}()
			leaks()
		})
	}
}

// TestCloseWithUndrainedEvents: a program that asked for the async event channel and
// stopped reading it must still be able to close the device without leaving goroutines
// behind, however many events were raised.
func TestCloseWithUndrainedEvents(t *testing.T) {
	leaks := checkGoroutines(t)
	func() {
		a := newHost(t)
		defer a.Dev.Close()
		evs := a.Dev.Events()
		<-evs // PORT_ACTIVE: the forwarding goroutines are running
		src := a.MR(t, 64, allAccess)
		// Each QP fails locally (a bad lkey) and raises one event: more than every buffer
		// between the engine and the user holds.
		for i := 0; i < 400; i++ {
			qp := a.QP(t, verbs.QPTypeRC)
			connect(t, qp, defaultRC(), a.GID, 0x99, 1, 1)
			sge := src.SGE(0, 8)
			sge.LKey ^= 0x100
			if err := qp.PostSend(verbs.SendWR{ID: 1, Opcode: verbs.WRSend, Flags: verbs.SendSignaled, SGL: []verbs.SGE{sge}}); err != nil {
				t.Fatal(err)
			}
			qp.Close()
			for n, _ := a.CQ.Poll(make([]verbs.WC, 4)); n > 0; n, _ = a.CQ.Poll(make([]verbs.WC, 4)) {
			}
		}
		if err := a.Dev.Close(); err != nil {
			t.Fatal(err)
		}
	}()
	leaks()
}

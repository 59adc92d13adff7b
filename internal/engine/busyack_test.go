package engine

import (
	"fmt"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/goverbs/goverbs/netio"
	"github.com/goverbs/goverbs/netio/netiotest"
	"github.com/goverbs/goverbs/verbs/driver"
	"github.com/goverbs/goverbs/wire"
)

// TestBusyAckWaitsForTheReply: a busy poller's ACK waits for the application's reply
// through polls that find nothing, and through turns of a ping-pong. perftest's latency
// tools wait for their send completion (the peer's ACK) between taking a request and
// replying, so they poll once or twice between the request and the ACK riding behind it
// (two datagrams of the peer's one sendmmsg). The owed ACK then must still leave with the
// reply, in one send, not alone first. Before, it left at the poll after an empty one,
// and a QP whose ACK had left with its reply stayed on the device's list with its count
// of polls running into the next turn: on the capi library a quarter of ib_send_lat's
// turns sent the ACK alone, a sendmmsg more on the critical path.
func TestBusyAckWaitsForTheReply(t *testing.T) { retryStalled(t, busyAckTurns) }

// retryStalled runs try until it reports no error, or an error that counts. The
// background goroutine sends what a poller leaves owing once nobody has polled for
// busyIdle; a test goroutine stalled that long (a loaded -race run) sees its ACK leave
// early, so such a try (try reports it stalled) is made again, up to five times.
func retryStalled(t *testing.T, try func(*testing.T) (string, bool)) {
	for attempt := 0; ; attempt++ {
		err, stalled := try(t)
		if err == "" {
			return
		}
		t.Logf("attempt %d: %s (stalled: %v)", attempt, err, stalled)
		if !stalled || attempt == 4 {
			t.Fatal(err)
		}
	}
}

// busyAckTurns runs three turns of a ping-pong against a scripted peer; it returns what
// went wrong, and whether the test goroutine was too slow for the result to count.
func busyAckTurns(t *testing.T) (string, bool) {
	conn := netiotest.NewConn(fuzzLocal)
	conn.KeepWritten()
	dev, qp, scq, rcq, sge := busyRC(t, conn)
	defer dev.Close()
	for i := range 3 {
		must(t, qp.PostRecv([]driver.RecvWR{{ID: uint64(i), SGL: sge}}))
	}
	wcs := make([]driver.WC, 4)
	last := time.Now()
	stalled := false // a gap between polls long enough for the background goroutine
	poll := func(cq *CQ) int {
		if time.Since(last) > busyIdle/2 {
			stalled = true
		}
		n, err := cq.Poll(wcs)
		if err != nil {
			t.Fatal(err)
		}
		last = time.Now()
		return n
	}
	slow := func() bool { return stalled }
	// Poll for a while first: the background goroutine, seeing polls, stays away.
	for warm := time.Now(); time.Since(warm) < 3*busyIdle; {
		poll(scq)
	}
	stalled = false

	for turn := range 3 {
		conn.Inject(sendOnly(qp.QPN(), wire.PSN(turn)))
		if n := poll(rcq); n != 1 {
			// Not what this test is about (the poll found the receive path busy, say):
			// inconclusive, try again.
			return "the request made no receive completion", true
		}
		// Waiting for the send completion of the last reply: the peer's ACK is not
		// there yet, and two polls find nothing.
		poll(scq)
		poll(scq)
		if w := conn.TakeWritten(); len(w) != 0 {
			return "the owed ACK left before the reply, alone", slow()
		}
		// A post within streamGap of the previous one waits for the doorbell; a
		// ping-pong's reply comes a round trip later.
		for wait := time.Now(); time.Since(wait) < 2*streamGap; {
		}
		must(t, qp.PostSend([]driver.SendWR{{ID: 9, Opcode: driver.WRSend, SGL: sge}}))
		w := conn.TakeWritten()
		if len(w) != 2 || opcode(t, w[0]) != wire.RCSendOnly || opcode(t, w[1]) != wire.RCAck {
			return "the reply did not take the owed ACK along", slow()
		}
		// The peer's ACK of the reply, which the next poll reads.
		conn.Inject(ackOf(qp.QPN(), fuzzSQPSN+wire.PSN(turn), uint32(turn+1)))
		for range 10 {
			if poll(scq) > 0 {
				break
			}
		}
	}
	// With no reply to ride with, the ACK leaves at the third poll after the request.
	conn.Inject(sendOnly(qp.QPN(), 3))
	must(t, qp.PostRecv([]driver.RecvWR{{ID: 3, SGL: sge}}))
	if n := poll(rcq); n != 1 {
		return "the last request made no receive completion", true
	}
	poll(rcq)
	poll(rcq)
	if w := conn.TakeWritten(); len(w) != 0 {
		return "the ACK left before the third poll", slow()
	}
	poll(rcq)
	if w := conn.TakeWritten(); len(w) != 1 || opcode(t, w[0]) != wire.RCAck {
		return "the third poll after the request did not send its ACK", slow()
	}
	return "", false
}

// busyRC opens a busy-poll device on conn with an RC QP connected to the scripted
// peer (fuzzPeer) and an 8-byte SGE of registered memory for its work requests.
func busyRC(t *testing.T, conn netio.Conn) (dev *Device, qp *QP, scq, rcq *CQ, sge []driver.SGE) {
	dev, err := New(Config{Name: "busyack", Conn: conn, MTU: wire.MTU1024, BusyPoll: true})
	if err != nil {
		t.Fatal(err)
	}
	pd, _ := dev.allocPD()
	scq, _ = dev.newCQ(64)
	rcq, _ = dev.newCQ(64)
	qp, err = dev.CreateQP(pd, QPInit{Type: driver.QPTypeRC, SendCQ: scq, RecvCQ: rcq,
		Cap: driver.QPCap{MaxSendWR: 16, MaxRecvWR: 16, MaxSendSGE: 1, MaxRecvSGE: 1}})
	if err != nil {
		dev.Close()
		t.Fatal(err)
	}
	rcUp(t, qp, fuzzPeer.Addr(), fuzzPeerQPN, 0, fuzzSQPSN)
	mr, err := pd.regMR(make([]byte, 64), driver.AccessLocalWrite)
	if err != nil {
		dev.Close()
		t.Fatal(err)
	}
	return dev, qp, scq, rcq, []driver.SGE{{Addr: mr.Addr(), Length: 8, LKey: mr.LKey()}}
}

// sendOnly is the peer's 8-byte SEND_ONLY with AckReq.
func sendOnly(qpn uint32, psn wire.PSN) netio.Message {
	h := wire.Headers{BTH: wire.BTHFields{Opcode: wire.RCSendOnly, PKey: 0xffff, DestQP: qpn, PSN: psn, AckReq: true}}
	return peerPacket(&h, 8)
}

// ackOf is the peer's ACK of psn, its responder having taken msn messages.
func ackOf(qpn uint32, psn wire.PSN, msn uint32) netio.Message {
	h := wire.Headers{BTH: wire.BTHFields{Opcode: wire.RCAck, PKey: 0xffff, DestQP: qpn, PSN: psn},
		AETH: wire.AETHFields{Syndrome: wire.ACKSyndrome(wire.CreditsInvalid), MSN: msn}}
	return peerPacket(&h, 0)
}

func peerPacket(h *wire.Headers, payload int) netio.Message {
	b := make([]byte, 128+payload)
	hl := h.Encode(b)
	n := wire.Finish(b, hl, payload)
	ip := wire.IPHeader{Src: fuzzPeer.Addr(), Dst: fuzzLocal.Addr(), SrcPort: fuzzPeer.Port(), DstPort: fuzzLocal.Port(), DF: true}
	wire.PutICRC(&ip, b, n)
	return netio.Message{Buf: b, N: n + 4, Addr: fuzzPeer}
}

func opcode(t *testing.T, d []byte) wire.Opcode {
	var p wire.Packet
	if err := p.Parse(d, 0); err != nil {
		t.Fatal(err)
	}
	return p.BTH.Opcode()
}

// splitConn is a netiotest.Conn that reports Caps.SplitAcks and counts its writes.
type splitConn struct {
	*netiotest.Conn
	mu     sync.Mutex
	writes []int // datagrams per WriteBatch call
}

func (c *splitConn) Caps() netio.Caps {
	caps := c.Conn.Caps()
	caps.SplitAcks = true
	return caps
}

func (c *splitConn) WriteBatch(msgs []netio.Message) (int, error) {
	c.mu.Lock()
	c.writes = append(c.writes, len(msgs))
	c.mu.Unlock()
	return c.Conn.WriteBatch(msgs)
}

func (c *splitConn) takeWrites() []int {
	c.mu.Lock()
	defer c.mu.Unlock()
	w := c.writes
	c.writes = nil
	return w
}

// TestSplitAcks: on a Conn with Caps.SplitAcks a busy poller's reply leaves in a send
// of its own, and the ACK it owes follows at once in another, the reply first (on a
// Conn without it both leave in one send: TestBusyAckWaitsForTheReply).
func TestSplitAcks(t *testing.T) { retryStalled(t, splitAckTurn) }

// splitAckTurn runs one turn of TestSplitAcks; it returns what went wrong, and whether
// the test goroutine was too slow for the result to count.
func splitAckTurn(t *testing.T) (string, bool) {
	conn := &splitConn{Conn: netiotest.NewConn(fuzzLocal)}
	conn.KeepWritten()
	dev, qp, scq, rcq, sge := busyRC(t, conn)
	defer dev.Close()
	must(t, qp.PostRecv([]driver.RecvWR{{ID: 1, SGL: sge}}))
	wcs := make([]driver.WC, 4)
	// Poll for a while first: the background goroutine, seeing polls, stays away (it
	// would answer the request's ACK at once, alone).
	for warm := time.Now(); time.Since(warm) < 3*busyIdle; {
		_, err := scq.Poll(wcs)
		must(t, err)
	}
	conn.Inject(sendOnly(qp.QPN(), 0))
	last := time.Now()
	if n, err := rcq.Poll(wcs); err != nil || n != 1 {
		return fmt.Sprintf("the poll found no request (%d, %v)", n, err), true
	}
	for wait := time.Now(); time.Since(wait) < 2*streamGap; {
	}
	conn.takeWrites()
	early := len(conn.TakeWritten()) != 0
	must(t, qp.PostSend([]driver.SendWR{{ID: 9, Opcode: driver.WRSend, SGL: sge}}))
	stalled := time.Since(last) > busyIdle/2
	w, writes := conn.TakeWritten(), conn.takeWrites()
	switch {
	case early:
		return "the ACK left before the reply, alone", stalled
	case len(w) != 2 || opcode(t, w[0]) != wire.RCSendOnly || opcode(t, w[1]) != wire.RCAck:
		return fmt.Sprintf("%d datagrams after the reply's post, want the reply and the ACK", len(w)), stalled
	case len(writes) != 2 || writes[0] != 1 || writes[1] != 1:
		return fmt.Sprintf("WriteBatch calls of %v datagrams, want [1 1]", writes), stalled
	}
	return "", false
}

// TestBusyLoopStaysAsideWhileAPollerReads: a busy-poll device's background goroutine,
// finding traffic while a poller holds the socket (its thread descheduled mid-poll, on a
// small machine often by this goroutine's own), leaves it to that poller instead of
// spinning round its wait. It used to yield and wait again at once: two busy-poll
// send_lat processes through the same-host rings went round half a million times a
// second each, taking the core the poller needed and setting the rings' sleep flags
// each time (an eventfd write for every send of the peer's).
func TestBusyLoopStaysAsideWhileAPollerReads(t *testing.T) {
	conn := netiotest.NewConn(fuzzLocal)
	dev, qp, _, rcq, sge := busyRC(t, conn)
	defer dev.Close()
	must(t, qp.PostRecv([]driver.RecvWR{{ID: 1, SGL: sge}}))
	time.Sleep(3 * busyIdle) // no polls: the goroutine now waits for traffic
	dev.rxMu.Lock()          // a poller mid-poll
	before := dev.busyWaits.Load()
	conn.Inject(sendOnly(qp.QPN(), 0))
	const hold = 30 * time.Millisecond
	time.Sleep(hold)
	waits := dev.busyWaits.Load() - before
	dev.rxMu.Unlock()
	if most := uint64(2*hold/busyIdle + 10); waits > most {
		t.Fatalf("the background goroutine waited %d times in %v while a poller held the socket, want at most %d", waits, hold, most)
	}
	// The poller, back, takes the SEND.
	wcs := make([]driver.WC, 1)
	for start := time.Now(); ; {
		if n, _ := rcq.Poll(wcs); n == 1 {
			break
		}
		if time.Since(start) > 5*time.Second {
			t.Fatal("no receive completion")
		}
	}
}

// TestBusyLoopSpinsThroughAStream: traffic nobody polls for (a passive target of a WRITE
// stream) keeps a busy-poll device's background goroutine reading while it comes, as the
// default mode's receive goroutine spins (spinRx), instead of going back to its wait after
// every batch of busyBatch: each wait armed the same-host rings' sleep flag and cost the
// sender an eventfd write, and an 8 B WRITE stream to a busy-poll target ran at less than
// half the rate of one to a default-mode target.
func TestBusyLoopSpinsThroughAStream(t *testing.T) {
	retryStalled(t, func(t *testing.T) (string, bool) { return busyStream(t, false, 8) })
}

// TestBusyLoopNoReceiveSpin: on a device whose completions other processes consume
// (NoReceiveSpin: goverbs serve's), the background goroutine does not spin after a batch
// but goes back to its wait, a wait per batch: there it would be a third spinner beside
// the daemon's clients.
func TestBusyLoopNoReceiveSpin(t *testing.T) { busyStream(t, true, 8) }

// TestBusyLoopBulkDoesNotSpin: full-MTU packets are not spun for either, even from the
// same-host rings (which the default mode's spinRx spins for): a batch of them pays for
// its wake-up, and the spin made a bulk stream slower (busyRead).
func TestBusyLoopBulkDoesNotSpin(t *testing.T) { busyStream(t, false, 1024) }

// busyStream injects a burst of small WRITEs, many batches' worth, into a busy-poll device
// nobody polls, and counts the background goroutine's waits until it has read them all;
// it returns what went wrong, and whether the injection took long enough for the
// goroutine to find the socket empty meanwhile (the injecting goroutine descheduled).
func busyStream(t *testing.T, noSpin bool, size int) (string, bool) {
	conn := netiotest.NewConn(fuzzLocal)
	conn.KeepWritten()
	dev, qp, _, _, _ := busyRC(t, conn)
	defer dev.Close()
	if noSpin {
		dev.NoReceiveSpin()
	}
	dev.rings = fakeRings(true) // every batch counts as read from the same-host rings
	const n = 8 * busyBatch
	mr, err := qp.pd.regMR(make([]byte, n*size), driver.AccessLocalWrite|driver.AccessRemoteWrite)
	must(t, err)
	time.Sleep(3 * busyIdle) // no polls: the goroutine now waits for traffic

	msgs := make([]netio.Message, n)
	for i := range msgs {
		h := wire.Headers{BTH: wire.BTHFields{Opcode: wire.RCWriteOnly, PKey: 0xffff, DestQP: qp.QPN(),
			PSN: wire.PSN(i), AckReq: i == n-1},
			RETH: wire.RETHFields{VA: mr.Addr() + uint64(i*size), RKey: mr.RKey(), DMALen: uint32(size)}}
		msgs[i] = peerPacket(&h, size)
	}
	before := dev.busyWaits.Load()
	start := time.Now()
	conn.Inject(msgs...)
	slow := time.Since(start) > rxSpin/2
	// The last WRITE asked for an ACK: when it leaves, the goroutine has read them all.
	deadline := time.Now().Add(5 * time.Second)
	for acked := false; !acked; {
		for _, d := range conn.TakeWritten() {
			var p wire.Packet
			must(t, p.Parse(d, 0))
			acked = acked || p.BTH.Opcode() == wire.RCAck && p.BTH.PSN() == n-1
		}
		if time.Now().After(deadline) {
			return "no ACK of the last WRITE", false
		}
		runtime.Gosched()
	}
	// Once the burst is read the goroutine's wait times out every busyIdle: those
	// until this goroutine saw the ACK count too. The one wait that the burst woke,
	// and at most one more, are the spin's; a wait per batch (busyBatch datagrams)
	// was the loop's before it spun.
	waits := dev.busyWaits.Load() - before
	if noSpin || size > smallPacket {
		if waits < n/busyBatch/2 {
			t.Fatalf("the background goroutine waited %d times for %d batches of %d-byte WRITEs (NoReceiveSpin %v): it spun",
				waits, n/busyBatch, size, noSpin)
		}
		return "", false
	}
	idle := uint64(time.Since(start) / busyIdle)
	if most := 2 + idle; waits > most {
		return fmt.Sprintf("the background goroutine waited %d times for a burst of %d WRITEs (%d batches), want at most %d",
			waits, n, n/busyBatch, most), slow || idle > 0
	}
	return "", false
}

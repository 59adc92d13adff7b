package rdmanet

import (
	"context"
	"fmt"
	"runtime"
	"time"

	"github.com/goverbs/goverbs/verbs"
)

// poll is the connection's completion loop: it reposts each receive as it is used
// (whatever the reader is doing, so a slow reader never leaves the peer without a
// receive: flow control is the credits' job, and RNR never happens), turns
// completions into ring bytes, credits and stream events, and wakes the reader and
// the writer.
//
// When the CQ runs dry it keeps polling for spinBudget before it sleeps on the
// completion channel, as rsockets polls for a while (its polling_time) before it
// blocks: a request/response's answer usually comes within microseconds, and an empty
// poll reads the device's socket itself (engine.Device.PollRx), so the answer reaches
// this goroutine without a wake-up. Sleeping at once made every turn pay the netpoller's
// wake-up, which on a VM is a thread woken on another vCPU: request/response was then
// many times slower than Go TCP's (docs/DESIGN.md, "Request/response").
//
// While a Read spins it polls the CQ itself (Read), and this loop steps aside until a
// goroutine of the connection is about to block (kick): one goroutine spinning per
// connection, and the reader gets its bytes without a hand-off from this one.
func (c *Conn) poll(ctx context.Context) {
	defer close(c.pollDone)
	var spin spinner
	for {
		// Park while a Read polls, unless a goroutine is blocked on what only
		// completions bring: the Read may return with its bytes and stop polling while
		// that goroutine still waits (a Write out of credits would wait for its probe).
		if c.readSpin.Load() > 0 && c.blocked.Load() == 0 && !isClosed(c.done) {
			select {
			case <-c.pollKick:
			case <-ctx.Done():
				return
			}
			continue // and no new spin: whoever kicked has stopped polling
		}
		if !c.pollMu.TryLock() {
			runtime.Gosched() // a Read that is leaving its spin polls once more
			continue
		}
		n, err := c.pollCQ()
		c.pollMu.Unlock()
		if err != nil {
			return
		}
		if n > 0 {
			spin.reset()
			continue
		}
		if spin.more() && ctx.Err() == nil {
			continue
		}
		cq, err := c.ep.ch.Wait(ctx)
		if err != nil {
			if ctx.Err() == nil { // the device closed under the connection
				c.failLocking(err)
			}
			return
		}
		cq.AckEvents(1)
		if err := cq.RequestNotify(false); err != nil {
			c.failLocking(err)
			return
		}
		// No new spin: a wake-up that finds nothing (an event the spin's own polls
		// raised) sleeps again at once; one that finds completions resets the spin.
	}
}

// pollCQ polls the CQ once and handles what it finds; c.pollMu is held (so that
// completions are handled in the order the CQ gives them: a FIN must not overtake the
// data before it). A failed poll fails the connection and is returned.
func (c *Conn) pollCQ() (int, error) {
	n, err := c.ep.cq.Poll(c.wcs)
	if n == 0 && err == nil {
		return 0, nil // most polls of a spin: no lock
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if err != nil {
		c.fail(err)
		return 0, err
	}
	for i := range c.wcs[:n] {
		c.complete(&c.wcs[i])
	}
	c.giveCredit()
	return n, nil
}

// kick hands the CQ back to the completion loop: a goroutine that polled it (Read) has
// stopped, or one is about to block for something only completions bring (a Write
// waiting for credits, Close waiting for acknowledgements). A blocking goroutine counts
// itself in c.blocked first (block), so that the loop does not park again behind a
// spinning Read while it waits.
func (c *Conn) kick() { wake(c.pollKick) }

// block counts a goroutine about to block on completions (the caller uncounts it when
// it stops waiting) and kicks the loop.
func (c *Conn) block() {
	c.blocked.Add(1)
	c.kick()
}

// spinBudget is how long the completion loop, or a Read, polls an empty CQ before it
// sleeps.
const spinBudget = 50 * time.Microsecond

// spinner paces the polls of an empty CQ, the completion loop's and a waiting Read's:
// it yields between them, so that a goroutine a completion woke runs on this thread,
// and ends the spin once spinBudget has passed. It reads no clock for the first polls.
type spinner struct {
	polls int
	start time.Time
}

func (s *spinner) reset() { s.polls, s.start = 0, time.Time{} }

// more yields and reports whether to poll again.
func (s *spinner) more() bool {
	s.polls++
	if s.polls%16 == 0 {
		if s.start.IsZero() {
			s.start = time.Now()
		} else if time.Since(s.start) > spinBudget {
			return false
		}
	}
	runtime.Gosched()
	return true
}

// complete handles one completion. c.mu is held.
func (c *Conn) complete(wc *verbs.WC) {
	kind := wc.ID & wrKind
	if wc.Status != verbs.WCSuccess {
		if kind != wrRecv {
			c.retired++ // posted == retired no more: the failure ends the linger
		}
		c.fail(fmt.Errorf("rdmanet: %v", wc.Status))
		return
	}
	// A send's completion retires the unsignaled data WRITEs before it (and itself).
	msgs, bytes := int(wc.ID&^wrKind>>wrMsgsShift), wc.ID&wrBytesMask
	switch kind {
	case wrData:
		c.retired += msgs
		c.completed += bytes
		c.unacked -= msgs
		wake(c.txReady)
	case wrCtrl:
		c.retired += msgs + 1
		c.completed += bytes
		c.unacked -= msgs
		c.ctrls--
		if msgs > 0 {
			wake(c.txReady)
		}
	case wrProbe: // the peer is there, and the WRITEs before the probe are acknowledged
		c.retired += msgs + 1
		c.completed += bytes
		c.unacked -= msgs
		if msgs > 0 {
			wake(c.txReady)
		}
	case wrRecv:
		c.received(wc)
		return
	}
	if c.posted-c.quietMsgs == c.retired { // as quiet reckons it
		wake(c.drained)
	}
}

// received handles a message from the peer, as rsockets' rs_poll_cq does, except that
// whatever a conforming peer cannot send fails the connection. c.mu is held.
func (c *Conn) received(wc *verbs.WC) {
	if wc.Flags&verbs.WCWithImm == 0 {
		c.fail(fmt.Errorf("%w: a message without immediate", errProtocol))
		return
	}
	if err := c.ep.qp.PostRecv(verbs.RecvWR{ID: wrRecv}); err != nil {
		c.fail(err)
		return
	}
	imm := wc.Imm
	if o := immOp(imm); o != opCtrl && o != opSGL && wc.Opcode != verbs.WCRecvRDMAWithImm {
		c.fail(fmt.Errorf("%w: op %d by SEND", errProtocol, o))
		return
	}
	switch immOp(imm) {
	case opData:
		n := immVal(imm)
		switch {
		case n == 0 || n != wc.ByteLen:
			c.fail(fmt.Errorf("%w: data message of %d bytes says %d", errProtocol, wc.ByteLen, n))
		case c.rxSeq == c.rxComp:
			c.fail(fmt.Errorf("%w: data message beyond the %d credits given", errProtocol, c.ep.credits))
		case c.rxHead+uint64(c.rxAvail)+uint64(n) > c.rxGranted:
			c.fail(fmt.Errorf("%w: %d data bytes beyond the buffers given", errProtocol, n))
		case c.eof:
			c.fail(fmt.Errorf("%w: data after SHUTDOWN", errProtocol))
		default:
			c.rxSeq++
			c.rxAvail += int(n)
			wake(c.rxReady)
		}
	case opSGL:
		// The peer's credit: the sequence up to which this side may send. rsockets
		// sends a 16-bit sum in 29 bits, so only the low 16 count.
		comp := uint16(immVal(imm))
		if comp-c.txSeq > c.peer.credits || comp-c.txComp > c.peer.credits {
			c.fail(fmt.Errorf("%w: credit to message %d, beyond the %d credits after %d", errProtocol,
				comp, c.peer.credits, c.txSeq))
			return
		}
		if wc.ByteLen != 0 && wc.ByteLen != sgeLen {
			c.fail(fmt.Errorf("%w: SGL update of %d bytes", errProtocol, wc.ByteLen))
			return
		}
		c.txComp = comp
		if err := c.adoptTargets(); err != nil {
			c.fail(err)
			return
		}
		wake(c.txReady)
	case opCtrl:
		switch immVal(imm) {
		case ctrlShutdown:
			c.eof = true
			wake(c.rxReady)
		case ctrlDisconnect:
			c.eof = true
			c.peerClosed = true
			wake(c.rxReady)
			wake(c.txReady)
		case ctrlKeepalive:
		default:
			c.fail(fmt.Errorf("%w: control message %d", errProtocol, immVal(imm)))
		}
	case opIOMapSGL:
		c.fail(fmt.Errorf("%w: iomap update, and no iomap was advertised", errProtocol))
	default:
		c.fail(fmt.Errorf("%w: unknown op %d in immediate %#x", errProtocol, immOp(imm), imm))
	}
}

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
// receive: flow control is the credits' job), turns completions into ring bytes,
// credits and stream events, and wakes the reader and the writer.
//
// It never spins. A goroutine that wants what completions bring polls the CQ itself
// for a while (spinFor: a Read waiting for bytes, a Write waiting for room) when its
// spins have been paying off, and this loop steps aside meanwhile (one poller per
// connection, and the bytes reach the goroutine that wants them without a
// hand-off); otherwise it sleeps on the completion channel. A loop that also spun
// after every completion, as an earlier design did, kept a core busy whenever a
// stream flowed, which the two processes' real work (copies, the device's sends and
// receives) needed on a 2-core machine: docs/DESIGN.md, "Waiting".
//
// It steps aside for as long as the connection's waiters spin, not only during a spin:
// a loop asleep on the completion channel is the device's socket reader (the channel's
// Wait serves the device, verbs.CompChannel), so a spinning Read's polls could not read
// the socket, and every message reached the spinner through this goroutine, woken by
// the netpoller on another thread (a wake-up per message, and the spin waiting for
// it). So it parks while any spin has begun since it last looked (c.spins), until a
// goroutine blocks on what only completions bring (kick), the connection closes, or a
// parkCheck period passes with no spin, after which it serves again: the receives and
// credits of a connection whose application stopped reading are then not left for
// long.
func (c *Conn) poll(ctx context.Context) {
	defer close(c.pollDone)
	idle := time.NewTimer(parkCheck)
	idle.Stop()
	defer idle.Stop()
	seen := c.spins.Load()
	for {
		// Park while Reads and Writes poll, unless a goroutine is blocked on what only
		// completions bring: the spinner may return and stop polling while that
		// goroutine still waits (a Write out of credits would wait for its probe).
		if s := c.spins.Load(); (s != seen || c.spinners.Load() > 0) && c.blocked.Load() == 0 && !isClosed(c.done) {
			seen = s
			idle.Reset(parkCheck)
			select {
			case <-c.pollKick:
			case <-idle.C:
			case <-ctx.Done():
				return
			}
			continue // whoever kicked has stopped polling; a quiet period is looked at again
		}
		if !c.pollMu.TryLock() {
			runtime.Gosched() // a spinner that is leaving polls once more
			continue
		}
		n, err := c.pollCQ()
		c.pollMu.Unlock()
		if err != nil {
			return
		}
		if n > 0 {
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
	}
}

// parkCheck is how long the completion loop stays parked behind the connection's
// spinners without a spin before it looks again (poll).
const parkCheck = 10 * time.Millisecond

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

// kick hands the CQ back to the completion loop: a goroutine that polled it has
// stopped, or one is about to block for something only completions bring (a Write
// waiting for credits, Close waiting for acknowledgements). A blocking goroutine counts
// itself in c.blocked first (block), so that the loop does not park again behind a
// spinner while it waits.
func (c *Conn) kick() { wake(c.pollKick) }

// block counts a goroutine about to block on completions (the caller uncounts it when
// it stops waiting) and kicks the loop.
func (c *Conn) block() {
	c.blocked.Add(1)
	c.kick()
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
		if wc.ByteLen == sgeLen {
			if err := c.adoptTarget(); err != nil {
				c.fail(err)
				return
			}
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

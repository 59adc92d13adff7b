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
// wake-up, which on a VM is a thread woken on another vCPU (64 B request/response about
// 44 µs one-way against Go TCP's 6-18 µs; spinning, see README).
func (c *Conn) poll(ctx context.Context) {
	defer close(c.pollDone)
	fail := func(err error) {
		c.mu.Lock()
		c.fail(err)
		c.mu.Unlock()
	}
	wcs := make([]verbs.WC, 64)
	var spin spinner
	for {
		n, err := c.ep.cq.Poll(wcs)
		if err != nil {
			fail(err)
			return
		}
		if n > 0 {
			c.mu.Lock()
			for i := range wcs[:n] {
				c.complete(&wcs[i])
			}
			c.giveCredit()
			c.mu.Unlock()
			spin.reset()
			continue
		}
		if spin.more() && ctx.Err() == nil {
			continue
		}
		cq, err := c.ep.ch.Wait(ctx)
		if err != nil {
			if ctx.Err() == nil { // the device closed under the connection
				fail(err)
			}
			return
		}
		cq.AckEvents(1)
		if err := cq.RequestNotify(false); err != nil {
			fail(err)
			return
		}
		// No new spin: a wake-up that finds nothing (an event the spin's own polls
		// raised) sleeps again at once; one that finds completions resets the spin.
	}
}

// spinBudget is how long the completion loop polls an empty CQ before it sleeps.
const spinBudget = 50 * time.Microsecond

// spinner paces the completion loop's polls of an empty CQ: it yields between them, so
// that a goroutine a completion woke (the reader, the writer) runs on this thread, and
// ends the spin once spinBudget has passed. It reads no clock for the first polls.
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

// received handles a message from the peer. c.mu is held.
func (c *Conn) received(wc *verbs.WC) {
	if wc.Flags&verbs.WCWithImm == 0 {
		c.fail(fmt.Errorf("%w: a message without immediate", errProtocol))
		return
	}
	if err := c.ep.qp.PostRecv(verbs.RecvWR{ID: wrRecv}); err != nil {
		c.fail(err)
		return
	}
	switch imm := wc.Imm; immOp(imm) {
	case opData:
		n := immLen(imm)
		if wc.Opcode != verbs.WCRecvRDMAWithImm || n != int(wc.ByteLen) || n == 0 ||
			c.rxAvail+n > len(c.ep.ring.Buf()) || c.eof {
			c.fail(fmt.Errorf("%w: data message of %d bytes", errProtocol, n))
			return
		}
		c.rxAvail += n
		c.owedMsgs++
		wake(c.rxReady)
	case opCredit:
		msgs, bytes := immCredit(imm)
		if msgs > c.msgs || c.credited+uint64(bytes) > c.sent {
			c.fail(fmt.Errorf("%w: credit for %d messages, %d bytes", errProtocol, msgs, bytes))
			return
		}
		c.msgs -= msgs
		c.credited += uint64(bytes)
		wake(c.txReady)
	case opFin:
		c.eof = true
		wake(c.rxReady)
	case opClose:
		c.eof = true
		c.peerClosed = true
		wake(c.rxReady)
		wake(c.txReady)
	}
}

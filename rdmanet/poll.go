package rdmanet

import (
	"context"
	"fmt"

	"github.com/goverbs/goverbs/verbs"
)

// poll is the connection's completion loop: it reposts each receive as it is used
// (whatever the reader is doing, so a slow reader never leaves the peer without a
// receive: flow control is the credits' job, and RNR never happens), turns
// completions into ring bytes, credits and stream events, and wakes the reader and
// the writer.
func (c *Conn) poll(ctx context.Context) {
	defer close(c.pollDone)
	fail := func(err error) {
		c.mu.Lock()
		c.fail(err)
		c.mu.Unlock()
	}
	wcs := make([]verbs.WC, 64)
	for {
		for {
			n, err := c.ep.cq.Poll(wcs)
			if err != nil {
				fail(err)
				return
			}
			if n == 0 {
				break
			}
			c.mu.Lock()
			for i := range wcs[:n] {
				c.complete(&wcs[i])
			}
			c.giveCredit()
			c.mu.Unlock()
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
	}
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

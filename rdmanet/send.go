package rdmanet

import (
	"fmt"

	"github.com/goverbs/goverbs/verbs"
)

// The sending side of rsockets' protocol: data WRITEs into the buffers the peer gave,
// and the control messages (SGL and credit updates, SHUTDOWN, DISCONNECT,
// keepalive).

// giveCredit is rsockets' credit update, sent when it is due: once half of the ring
// is free again (read, and not yet given back) an SGL update gives that half to the
// peer, written into the next entry of its target SGL in its byte order; once half
// of the credits are used, a credit update alone moves the peer's window (a
// zero-length WRITE WITH IMMEDIATE). Either carries the message sequence up to which
// the peer may send. Message credits follow receives, which the completion loop
// reposts as they complete, not the reader: the ring bounds what a slow reader
// holds. c.mu is held.
func (c *Conn) giveCredit() {
	half := uint64(len(c.ep.ring.Buf()) / 2)
	bufDue := uint64(len(c.ep.ring.Buf()))-(c.rxGranted-c.rxHead) >= half
	if !bufDue && int16(c.rxSeq-c.rxDue) < 0 {
		return
	}
	// Two control slots stay free, for SHUTDOWN and DISCONNECT; the update goes when
	// a slot frees (the poller calls again).
	if c.err != nil || c.closed || c.peerClosed || c.ctrls >= ctrlSlots-2 {
		return
	}
	comp := c.rxSeq + uint16(c.ep.credits)
	imm := msgImm(opSGL, uint32(comp))
	var err error
	if bufDue {
		slot := c.ep.ctrl.Buf()[c.ctrlSeq%ctrlSlots*sgeLen:][:sgeLen]
		off := c.rxGranted % uint64(len(c.ep.ring.Buf()))
		putSGE(slot, sge{addr: c.ep.ring.Addr() + off, key: c.ep.ring.RKey(), length: uint32(half)}, c.order)
		err = c.postCtrlWR(verbs.SendWR{Opcode: verbs.WRRDMAWriteWithImm, Imm: imm,
			SGL:        []verbs.SGE{c.ep.ctrl.SGE(c.ctrlSeq%ctrlSlots*sgeLen, sgeLen)},
			RemoteAddr: c.peer.targetSGL.addr + uint64(c.remoteSGE)*sgeLen, RKey: c.peer.targetSGL.key})
		if err == nil {
			c.rxGranted += half
			c.remoteSGE = (c.remoteSGE + 1) % int(c.peer.targetSGL.length)
		}
	} else {
		err = c.postCtrl(imm)
	}
	if err == nil {
		c.rxComp = comp
		c.rxDue = c.rxSeq + uint16(c.ep.credits/2)
	}
}

// postCtrl sends a control message without payload: a zero-length RDMA WRITE WITH
// IMMEDIATE, which rsockets sends to address 0 with key 0 (a zero-length WRITE
// checks no key, IBTA 9.7.4.1.5). c.mu is held.
func (c *Conn) postCtrl(imm uint32) error {
	return c.postCtrlWR(verbs.SendWR{Opcode: verbs.WRRDMAWriteWithImm, Imm: imm})
}

// postCtrlWR posts a control message, signaled: its completion frees its slot and
// retires the unsignaled data WRITEs before it. c.mu is held.
func (c *Conn) postCtrlWR(wr verbs.SendWR) error {
	wr.ID, wr.Flags = sendID(wrCtrl, c.quietMsgs, c.quietBytes), verbs.SendSignaled
	if err := c.ep.qp.PostSend(wr); err != nil {
		c.fail(err)
		return err
	}
	c.quietMsgs, c.quietBytes = 0, 0 // this completion retires them
	c.ctrls++
	c.ctrlSeq++
	c.posted++
	return nil
}

// probe sends rsockets' keepalive, a zero-length RDMA WRITE without immediate to
// address 0, key 0, which the peer's transport acknowledges without its application
// (it consumes no receive and checks no key, IBTA 9.7.4.1.5): from a peer that is
// gone no ACK comes, the retries run out and the connection fails, as TCP's
// zero-window probes end a connection whose peer went silent. While something else
// awaits its ACK, that serves as the probe.
func (c *Conn) probe() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.err != nil || c.closed || c.peerClosed || c.posted-c.quietMsgs != c.retired {
		return
	}
	// Signaled, it retires the unsignaled WRITEs before it, as a control message does.
	err := c.ep.qp.PostSend(verbs.SendWR{ID: sendID(wrProbe, c.quietMsgs, c.quietBytes),
		Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled})
	if err != nil {
		c.fail(err)
		return
	}
	c.quietMsgs, c.quietBytes = 0, 0
	c.posted++
}

// txSpace is how many of want bytes may be written now, as rsockets' rs_can_send
// reckons: a message credit left, a target buffer from the peer with room (a message
// never spans two), contiguous free staging space, and room in the send queue. c.mu
// is held.
func (c *Conn) txSpace(want int) int {
	// The send queue too: a credit can overtake the ACK of the WRITE it credits
	// (the peer's responder coalesces ACKs; its completion goroutine sends credits),
	// so WRITEs the peer has seen may still hold send queue slots here.
	if c.txSeq == c.txComp || c.unacked >= sendDepth-ctrlSlots-1 {
		return 0
	}
	t := c.target[c.tgt]
	size := uint64(len(c.ep.stage.Buf()))
	free := size - (c.sent - c.completed)
	return int(min(uint64(want), free, size-c.sent%size, maxChunk, uint64(t.length)))
}

// postData copies p to the staging buffer and WRITEs it to the peer. c.mu is held.
func (c *Conn) postData(p []byte) error {
	copy(c.ep.stage.Buf()[c.stageOff():], p)
	return c.postStaged(len(p))
}

// stageOff is the stream position in the staging buffer. c.mu is held.
func (c *Conn) stageOff() int { return int(c.sent % uint64(len(c.ep.stage.Buf()))) }

// postStaged WRITEs the next n staged bytes (txSpace allowed them) to the current
// target buffer, with the length in the immediate, signaled as signalEvery says; a
// target buffer is used up before the next one is taken, as rsockets' peer expects.
// c.mu is held.
func (c *Conn) postStaged(n int) error {
	off := c.stageOff()
	t := &c.target[c.tgt]
	wr := verbs.SendWR{ID: wrData, Opcode: verbs.WRRDMAWriteWithImm,
		SGL: []verbs.SGE{c.ep.stage.SGE(off, n)}, Imm: msgImm(opData, uint32(n)),
		RemoteAddr: t.addr, RKey: t.key}
	saved, savedTgt := *t, c.tgt
	t.addr += uint64(n)
	t.length -= uint32(n)
	if t.length == 0 {
		c.tgt = (c.tgt + 1) % sglEntries
	}
	c.sent += uint64(n)
	c.txSeq++
	c.unacked++
	c.quietMsgs++
	c.quietBytes += n
	if c.quietMsgs >= signalEvery || c.quietBytes >= len(c.ep.stage.Buf())/4 || c.txSpace(1) == 0 {
		wr.ID, wr.Flags = sendID(wrData, c.quietMsgs, c.quietBytes), verbs.SendSignaled
	}
	if err := c.ep.qp.PostSend(wr); err != nil {
		c.target[savedTgt], c.tgt = saved, savedTgt
		c.sent -= uint64(n)
		c.txSeq--
		c.unacked--
		c.quietMsgs--
		c.quietBytes -= n
		c.fail(err)
		return err
	}
	if wr.Flags != 0 {
		c.quietMsgs, c.quietBytes = 0, 0
	}
	c.posted++
	return nil
}

// adoptTarget takes the buffer the peer's SGL update just wrote into this side's
// target SGL. The peer writes the entries in turn, starting with entry 1 (entry 0 was
// its connection data's buffer), so the update is in entry tsglNext: only that entry
// is read, since the peer may be writing the next one meanwhile (its update's
// completion orders its write before this read; nothing orders a later one). The
// entry is cleared as it is taken; the peer writes it again only after the buffer it
// named was filled and read. c.mu is held.
func (c *Conn) adoptTarget() error {
	i := c.tsglNext
	e := c.ep.tsgl.Buf()[i*sgeLen:][:sgeLen]
	s := getSGE(e, nativeOrder)
	switch {
	case c.target[i].length != 0:
		return fmt.Errorf("%w: SGL update into entry %d, whose buffer is in use", errProtocol, i)
	case s.length == 0:
		return fmt.Errorf("%w: SGL update of an empty buffer into entry %d", errProtocol, i)
	case s.addr+uint64(s.length) < s.addr:
		return fmt.Errorf("%w: SGL update of %d bytes at %#x wraps the address space", errProtocol, s.length, s.addr)
	}
	c.target[i] = s
	clear(e)
	c.tsglNext = (i + 1) % sglEntries
	return nil
}

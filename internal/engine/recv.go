package engine

import (
	"encoding/binary"
	"net/netip"
	"runtime"
	"time"

	"github.com/goverbs/goverbs/netio"
	"github.com/goverbs/goverbs/wire"
)

// rxBufSize is a receive buffer: a whole GRO run when the socket coalesces, otherwise the
// largest RoCEv2 packet with room to spare (a longer datagram is truncated and then fails
// its length or ICRC check, which is what it deserves).
func rxBufSize(c netio.Caps) int {
	if c.GRO {
		return 1 << 16
	}
	return 2 * txBufSize
}

// newRxMsgs allocates the receive batch.
func newRxMsgs(caps netio.Caps) []netio.Message {
	msgs := make([]netio.Message, min(max(caps.BatchSize, 1), 64))
	size := rxBufSize(caps)
	for i := range msgs {
		msgs[i].Buf = make([]byte, size)
	}
	return msgs
}

// rxLoop is the device's receive path in the default mode: it sleeps in the netpoller
// until a batch arrives and processes each packet to completion (responder or completer)
// before reading the next batch, then sends the ACKs the batch earned, one per QP.
func (d *Device) rxLoop() {
	defer close(d.rxDone)
	if d.poller != nil {
		d.busyLoop()
		return
	}
	for {
		n, err := d.conn.ReadBatch(d.rxMsgs)
		raceAcquireWire()
		if err != nil {
			if isClosed(err) || d.closed.Load() {
				return
			}
			if d.debug {
				d.log.Debug("receive error", "dev", d.name, "err", err)
			}
			time.Sleep(time.Millisecond) // a persistent socket error must not spin a core
			continue
		}
		d.processRx(n)
	}
}

// busyLoop serves a busy-poll device: the application's CQ polls read the socket
// themselves (PollRx); this goroutine only parks until traffic arrives that nobody is
// polling for, such as one-sided WRITEs to a passive target.
func (d *Device) busyLoop() {
	seen := d.polls.Load()
	for {
		if d.closed.Load() {
			return
		}
		// While the application polls, stay out of its way: a goroutine woken by every
		// packet takes the core from the thread that is spinning for that packet (on a
		// small machine, one core per process). Look again a while later.
		if n := d.polls.Load(); n != seen {
			seen = n
			time.Sleep(busyIdle)
			continue
		}
		// No poll for a while: the ACKs the pollers left owing are this goroutine's.
		if d.rxMu.TryLock() {
			d.flushAcks()
			d.rxMu.Unlock()
		}
		ready, err := d.poller.WaitReadable(busyIdle)
		if err != nil {
			if isClosed(err) || d.closed.Load() {
				return
			}
			time.Sleep(time.Millisecond)
			continue
		}
		if !ready || d.polls.Load() != seen {
			continue // nothing came, or a poller is back and takes it
		}
		if !d.rxMu.TryLock() {
			runtime.Gosched()
			continue
		}
		d.pollLocked(min(len(d.rxMsgs), busyBatch))
		d.flushAcks() // no application thread to spare here: answer at once
		d.rxMu.Unlock()
	}
}

// busyBatch is how many datagrams (GRO runs, when the socket coalesces) the background
// goroutine's poll reads at most; an application's poll (PollRx) reads one. recvmmsg
// returns only after it has failed to read one datagram more than it found, a second
// pass through the socket layer, and an application that spins for a completion mostly
// finds one datagram: in a busy ping-pong, 8 slots instead of 1 cost 0.2 µs one-way
// (4.68 against 4.48 µs, 8 interleaved rounds). Traffic nobody polls for (a passive
// WRITE target) is the background goroutine's, and a stream: it reads in batches.
// (Switching an application's poll to 8 slots while datagrams kept coming lost the
// latency gain, the peer's ACK arriving just before its next request.)
const busyBatch = 8

// busyIdle is how long the background goroutine leaves a busy-poll device to its
// pollers once it has seen them poll.
const busyIdle = time.Millisecond

// PollRx reads and processes what the socket holds now, if no one else is doing so.
// It reports whether it ran. Busy-poll devices call it from CQ polls.
func (d *Device) PollRx() bool {
	d.polls.Add(1)
	if !d.rxMu.TryLock() {
		return false
	}
	d.pollLocked(1)
	d.rxMu.Unlock()
	return true
}

// pollLocked reads and processes one batch of up to slots datagrams; d.rxMu is held.
//
// The poller is the application's thread, so ACKs wait: an ACK's send is a syscall, and
// it should stand neither between a packet and the completion the application spins for
// nor between that completion and the application's next post. An owed ACK leaves with
// the QP's next requests (ackAlong), which a ping-pong posts at once; otherwise at a
// poll that follows an empty one (the application is idle, waiting), or after two polls
// at most while traffic keeps arriving. A poller that stops polling leaves them to the
// background goroutine (busyLoop), within two busyIdle periods.
func (d *Device) pollLocked(slots int) {
	if len(d.ackQueue) > 0 {
		if d.pollIdle || d.ackAge >= 2 {
			d.flushAcks()
		} else {
			d.ackAge++
		}
	}
	n, err := d.poller.PollBatch(d.rxMsgs[:slots])
	raceAcquireWire()
	d.pollIdle = n == 0
	if err == nil && n > 0 {
		d.inputBatch(n)
	}
}

// processRx runs the first n messages of the receive batch through the device and sends
// the ACKs they earned.
func (d *Device) processRx(n int) {
	d.inputBatch(n)
	d.flushAcks()
}

func (d *Device) inputBatch(n int) {
	for i := range d.rxMsgs[:n] {
		m := &d.rxMsgs[i]
		b := m.Buf[:m.N]
		if m.SegSize > 0 {
			for seg := 0; len(b) > 0; seg++ {
				k := min(m.SegSize, len(b))
				d.input(b[:k], m.Addr, seg)
				b = b[k:]
			}
		} else {
			d.input(b, m.Addr, 0)
		}
	}
}

func (d *Device) flushAcks() {
	for i, qp := range d.ackQueue {
		qp.mu.Lock()
		qp.flushAck()
		qp.mu.Unlock()
		d.ackQueue[i] = nil
	}
	d.ackQueue = d.ackQueue[:0]
	d.ackAge = 0
}

// input checks one datagram and routes it (IBTA 9.6 and Annex A17.4: the receive checks of
// a RoCEv2 port, in the order Linux rxe applies them).
//
// seg is the packet's position in a GRO run (0 for a lone datagram): a run coalesced from a
// goverbs GSO send carries IPv4 Identifications numbered from 0, which the ICRC covers.
func (d *Device) input(b []byte, from netip.AddrPort, seg int) {
	d.counters.RxPackets.Add(1)
	d.counters.RxBytes.Add(uint64(len(b)))
	p := &d.rxPkt
	if perr, ok := p.TryParse(b, wire.MTU4096.Bytes()); !ok {
		d.counters.Malformed.Add(1)
		if d.debug {
			d.logMalformed(from, perr)
		}
		return
	}
	qp := d.rxLookupQP(p.BTH.DestQP())
	if !d.checkICRC(b, from, qp, seg) {
		d.counters.ICRCErrors.Add(1)
		return
	}
	// P_Key: the default partition, full (0xFFFF) or limited (0x7FFF) member (IBTA 10.9.3).
	if pk := p.BTH.PKey(); pk&0x7fff != 0x7fff {
		d.counters.BadPKey.Add(1)
		return
	}
	if p.Op.Transport == wire.TransportCNP {
		d.counters.CNPReceived.Add(1)
		return
	}
	if qp == nil {
		d.counters.NoQP.Add(1)
		return
	}
	qp.mu.Lock()
	qp.receive(p, from)
	qp.mu.Unlock()
}

// logMalformed logs a parse failure (debug only). A function of its own: taking the
// error's address in input would move it to the heap for every packet.
func (d *Device) logMalformed(from netip.AddrPort, perr wire.ParseError) {
	d.log.Debug("malformed packet", "dev", d.name, "from", from, "err", &perr)
}

// checkICRC verifies the packet's ICRC for the IP header it arrived in (Annex A17.3.3).
// goverbs peers send IPv4 with DF and Identification 0, or, in a GSO run, the segment's
// number (0…63). Other peers (Linux rxe) number their packets with a counter, and a UDP
// socket cannot see the number: for those the Identification that makes the ICRC match
// is solved for, and a packet for which none exists is corrupt (a 2^-15 chance of a
// corrupted packet passing). A QP whose peer has sent strictSafeRun packets in a row with
// goverbs-style Identifications and never another kind is held to those: a corrupted
// packet then passes with a chance near 2^-25. A counting peer can never qualify: its
// counter leaves 0…63 within 64 packets (it does pass through 0 every 65536).
func (d *Device) checkICRC(b []byte, from netip.AddrPort, qp *QP, seg int) bool {
	n := len(b) - wire.ICRCLen
	if n < 0 {
		return false
	}
	icrc := binary.LittleEndian.Uint32(b[n:])
	f := d.rxFlowFrom(qp, from)
	if seg > 0 && seg < maxGSOSegments && f.Sum(netio.GSOSegmentID(0, seg), b[:n], nil, 0) == icrc ||
		f.Sum(0, b[:n], nil, 0) == icrc {
		qp.sawGoverbsID()
		return true
	}
	ip := d.rxIP(from)
	if !ip.Src.Unmap().Is4() {
		return false
	}
	id, df, ok := wire.RecoverIPv4ID(&ip, b)
	if !ok {
		return false
	}
	goverbsStyle := df && id < maxGSOSegments
	if qp != nil {
		if !goverbsStyle {
			if qp.strictICRC() {
				return false
			}
			qp.icrcForeign.Store(true)
		} else {
			qp.sawGoverbsID()
		}
	}
	d.counters.ICRCRecovered.Add(1)
	return true
}

// rxFlowFrom returns the ICRC's share for packets from a peer, as goverbs peers send
// them (DF set), kept on the QP they are for: its peer rarely changes. Only the receive
// path (rxLoop, or the holder of rxMu) calls it.
func (d *Device) rxFlowFrom(qp *QP, from netip.AddrPort) wire.ICRCFlow {
	if qp == nil {
		return d.newRxFlow(from)
	}
	if from != qp.rxFlowFrom || !from.IsValid() {
		qp.rxFlowFrom, qp.rxFlow = from, d.newRxFlow(from)
	}
	return qp.rxFlow
}

func (d *Device) newRxFlow(from netip.AddrPort) wire.ICRCFlow {
	ip := d.rxIP(from)
	return wire.NewICRCFlow(&ip)
}

// rxIP is the IP header of a packet from a peer as a goverbs peer sends it (DF set); its
// Identification is the caller's to add or recover.
func (d *Device) rxIP(from netip.AddrPort) wire.IPHeader {
	return wire.IPHeader{Src: from.Addr(), Dst: d.local.Addr(), SrcPort: from.Port(), DstPort: d.local.Port(), DF: true}
}

// strictSafeRun is how many goverbs-style packets in a row make a QP verify strictly.
const strictSafeRun = 2 * maxGSOSegments

// sawGoverbsID counts a packet whose Identification a goverbs peer would use.
func (qp *QP) sawGoverbsID() {
	if qp != nil && qp.icrcRun.Load() < strictSafeRun {
		qp.icrcRun.Add(1)
	}
}

// strictICRC reports whether the QP's peer is known to be a goverbs peer.
func (qp *QP) strictICRC() bool {
	return !qp.icrcForeign.Load() && qp.icrcRun.Load() >= strictSafeRun
}

// maxGSOSegments bounds the Identifications a goverbs sender uses (netio: 64 per send).
const maxGSOSegments = 64

var transportOf = [...]wire.Transport{QPTypeRC: wire.TransportRC, QPTypeUC: wire.TransportUC, QPTypeUD: wire.TransportUD}

// receive applies the per-QP checks and hands the packet to the responder or completer.
// qp.mu is held.
func (qp *QP) receive(p *wire.Packet, from netip.AddrPort) {
	d := qp.dev
	if qp.closed {
		d.counters.NoQP.Add(1)
		return
	}
	if p.Op.Transport != transportOf[qp.typ] {
		d.counters.BadTransport.Add(1)
		return
	}
	// State (IBTA 10.3.1): requests need RTR or later; responses need RTS or SQD.
	req := p.Op.Flags.Has(wire.Request)
	switch qp.state {
	case QPStateRTR:
		if !req {
			d.counters.BadQPState.Add(1)
			return
		}
	case QPStateRTS, QPStateSQD, QPStateSQE:
	default:
		d.counters.BadQPState.Add(1)
		return
	}
	if qp.typ != QPTypeUD && from.Addr().Unmap() != qp.remote.Addr().Unmap() {
		d.counters.BadAddress.Add(1) // a connected QP talks only to its peer's GID
		return
	}
	qp.Stats.RxPackets++
	if qp.state == QPStateRTR && !qp.commEst {
		// The first packet received in RTR: communication established (IBTA 11.6.3.1),
		// the cue for a passive side to move to RTS.
		qp.commEst = true
		d.raise(AsyncEvent{Type: EventCommEst, QP: qp})
	}
	switch qp.typ {
	case QPTypeRC:
		if req {
			qp.respond(p)
		} else {
			qp.complete(p)
		}
	case QPTypeUC:
		qp.respondUC(p)
	case QPTypeUD:
		qp.respondUD(p, from)
	}
}

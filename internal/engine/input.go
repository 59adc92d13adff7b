// Packet input: the checks each received datagram passes (parse, ICRC, P_Key, QP lookup,
// QP state, peer address; IBTA 9.6 and Annex A17.4) before it goes to the responder or
// the completer.

package engine

import (
	"net/netip"

	"github.com/goverbs/goverbs/netio"
	"github.com/goverbs/goverbs/verbs/driver"
	"github.com/goverbs/goverbs/wire"
)

// input checks one datagram and routes it (IBTA 9.6 and Annex A17.4: the receive checks of
// a RoCEv2 port, in the order Linux rxe applies them).
//
// seg is the packet's position in a GRO run (0 for a lone datagram): a run coalesced from a
// goverbs GSO send carries IPv4 Identifications numbered from 0, which the ICRC covers.
//
// The datagram was counted (RxPackets, RxBytes) with its batch (inputBatch). One that
// crossed a same-host ring (rxIntact) has no ICRC checked: nothing on that way corrupts
// it (netio.Message.SameHost), and every other check stands.
func (d *Device) input(b []byte, from netip.AddrPort, seg int) {
	p := &d.rxPkt
	if !d.parse(p, b, from) {
		return
	}
	if h := d.rxHeld; h != nil && (h.qpn != p.BTH.DestQP() || d.rxQP != h || d.qpGone.Load() != d.rxQPGone) {
		d.releaseRx() // the lookup below may take qpMu: never with a QP's lock held
	}
	qp := d.rxLookupQP(p.BTH.DestQP())
	if !d.rxIntact && !d.checkICRC(b, from, d.local, qp, seg) {
		d.counters.ICRCErrors.Add(1)
		return
	}
	if !d.checkPKey(p) {
		return
	}
	d.route(p, qp, from)
}

// viewWhole is the longest datagram lent in place (inputView) that is copied whole
// before it is read, as one from the socket is: headers and payload together cost no
// more to copy than the headers alone, and small packets (ACKs, MADs, short SENDs) are
// the ones read by code that looks at their payload's contents.
const viewWhole = 512

// inputView is input for a datagram that lies in shared memory a same-host peer may
// write while it is read (netio.Message.View), into which priv, a buffer of the
// device's own, was not read. A small datagram is copied into priv and goes through
// input. A larger one has its headers and ICRC copied into priv first: every check and
// every decision is made on that copy, so that a peer changing the ring's bytes
// meanwhile cannot get past them, and only the payload is read in place, to be copied
// once, where the checked headers say (into the MR for a WRITE). A peer that changes the
// payload under the copy gets into the MR what it could have sent: bytes of its own,
// where it was allowed to write them.
func (d *Device) inputView(b, priv []byte, from netip.AddrPort, seg int) {
	if len(b) <= viewWhole {
		d.input(priv[:copy(priv, b)], from, seg)
		return
	}
	head := priv[:copy(priv[:wire.MaxHeaderLen], b)]
	if len(head) >= wire.BTHLen && wire.BTH(head).DestQP() == GSIQPN {
		// A MAD is read by code that looks at its contents (the CM): a private copy, as
		// of a small datagram, whatever its size.
		d.input(priv[:copy(priv, b)], from, seg)
		return
	}
	p := &d.rxPkt
	perr, ok := p.TryParseView(head, b, wire.MTU4096.Bytes())
	if !ok {
		d.counters.Malformed.Add(1)
		if d.debug {
			d.logMalformed(from, perr)
		}
		return
	}
	qp := d.rxLookupQP(p.BTH.DestQP())
	if !d.rxIntact && !d.checkICRCView(p, from, qp, seg) {
		d.counters.ICRCErrors.Add(1)
		return
	}
	if !d.checkPKey(p) {
		return
	}
	d.route(p, qp, from)
}

// inputLent is input for a datagram whose payload was lent from the memory of a device
// of this process that sent it (netio.Message.Lent): rest, a private copy, holds its
// headers, pad and ICRC, and payload lies in the sender's registered memory, pinned
// until the batch's ReleaseViews. Only the same-host rings between devices of one
// process lend (rxIntact), so there is no ICRC to check; every other check stands, and
// the payload is copied once, to where the checked headers say.
func (d *Device) inputLent(rest, payload []byte, from netip.AddrPort) {
	p := &d.rxPkt
	perr, ok := p.TryParseLent(rest, payload, wire.MTU4096.Bytes())
	if !ok || !d.rxIntact {
		d.counters.Malformed.Add(1)
		if d.debug {
			d.logMalformed(from, perr)
		}
		return
	}
	qp := d.rxLookupQP(p.BTH.DestQP())
	if !d.checkPKey(p) {
		return
	}
	d.route(p, qp, from)
}

// checkICRCView is checkICRC for a packet parsed by TryParseView: the ICRC as read once,
// over the private copy of the headers and the payload where it lies. A same-host peer
// is a goverbs device, whose Identifications are 0 or a GSO run's numbers: no other is
// solved for.
func (d *Device) checkICRCView(p *wire.Packet, from netip.AddrPort, qp *QP, seg int) bool {
	var f wire.ICRCFlow
	if qp != nil {
		f = d.rxFlowFrom(qp, from)
	} else {
		ip := rxIP(from, d.local)
		f = wire.NewICRCFlow(&ip)
	}
	body := [][]byte{p.Buf[len(p.Head) : len(p.Buf)-wire.ICRCLen]} // payload and pad
	if seg > 0 && seg < netio.MaxGSOSegments && f.Sum(netio.GSOSegmentID(0, seg), p.Head, body, 0) == p.ICRC ||
		f.Sum(0, p.Head, body, 0) == p.ICRC {
		qp.sawGoverbsID()
		return true
	}
	return false
}

// route hands a checked packet to its QP (or the GSI, or the congestion control).
func (d *Device) route(p *wire.Packet, qp *QP, from netip.AddrPort) {
	if p.Op.Transport == wire.TransportCNP {
		d.releaseRx()
		d.inputCNP(qp) // congestion.go: the QP's rate is cut; never an error
		return
	}
	if qp == nil {
		d.releaseRx()
		if p.BTH.DestQP() == GSIQPN {
			d.inputGSI(p, from)
			return
		}
		d.counters.NoQP.Add(1)
		return
	}
	if d.rxHeld != qp {
		d.releaseRx()
		qp.mu.Lock()
	}
	if qp.resp.pinned != nil && !writeContinues(p) {
		qp.resp.dropPin() // before anything that may invalidate a region (bind, LOCAL_INV)
	}
	qp.receive(p, from, d.local)
	if d.rxECN == netio.ECNCE {
		qp.ceMarked(p) // congestion.go: the notification point
	}
	if d.rxRun {
		d.rxHeld = qp // the run's next packet is most likely for qp too
		return
	}
	qp.resp.dropPin()
	qp.mu.Unlock()
}

// releaseRx ends a hold of a QP's lock across a GRO run's packets (route): the WRITE's
// pin first, then the lock.
//
// Held across packets, the lock and the pin cost one locked instruction each per run
// instead of four per packet: at MTU 1024 the pin's release after each packet's copy
// waited for the copy's stores, and with qp.mu was about a tenth of a receiving
// process's CPU. The hold never outlives the run, a pin is never held while a lock is
// taken (the QP table's, another QP's: releaseRx comes first), and a packet that does
// not continue the pinned WRITE drops the pin before it is handled, so that a bind or
// LOCAL_INV its ACK starts (or a SEND with invalidate) never waits for a pin of its
// own goroutine. MR.Close waits for at most the rest of the run.
func (d *Device) releaseRx() {
	if qp := d.rxHeld; qp != nil {
		d.rxHeld = nil
		qp.resp.dropPin()
		qp.mu.Unlock()
	}
}

// writeContinues reports whether p is a MIDDLE or LAST packet of an RDMA WRITE: the
// packets that may keep the pin of the WRITE in progress.
func writeContinues(p *wire.Packet) bool {
	fl := p.Op.Flags
	return fl.Has(wire.OpWrite) && (fl.Has(wire.Middle) || fl.Has(wire.Last))
}

// parseRx counts a datagram and parses it into p; a malformed one is counted and
// dropped (false). The first receive step for a multicast group's socket (inputMcast).
func (d *Device) parseRx(p *wire.Packet, b []byte, from netip.AddrPort) bool {
	d.counters.RxPackets.Add(1)
	d.counters.RxBytes.Add(uint64(len(b)))
	return d.parse(p, b, from)
}

// parse parses a counted datagram into p; a malformed one is counted and dropped
// (false). The first receive step for the device's own socket (input).
//
// A good packet's parse error is discarded unread: kept, the 40-byte struct that comes
// back in registers is stored and copied with 16-byte loads that straddle its 1-byte
// fields' stores, a store-forwarding stall per packet (the receive path's hottest
// instruction in an 8 B WRITE stream's profile). The rare malformed packet is parsed
// again for its error.
func (d *Device) parse(p *wire.Packet, b []byte, from netip.AddrPort) bool {
	if _, ok := p.TryParse(b, wire.MTU4096.Bytes()); ok {
		return true
	}
	d.counters.Malformed.Add(1)
	if d.debug {
		perr, _ := p.TryParse(b, wire.MTU4096.Bytes())
		d.logMalformed(from, perr)
	}
	return false
}

// checkRx checks a parsed packet's ICRC, for the IP header it arrived in (from the peer
// to to), and its P_Key; a packet that fails either is counted and dropped (false).
func (d *Device) checkRx(p *wire.Packet, b []byte, from, to netip.AddrPort, qp *QP, seg int) bool {
	if !d.checkICRC(b, from, to, qp, seg) {
		d.counters.ICRCErrors.Add(1)
		return false
	}
	return d.checkPKey(p)
}

// checkPKey checks a parsed packet's P_Key: the default partition, full (0xFFFF) or
// limited (0x7FFF) member (IBTA 10.9.3). A packet of another partition is counted and
// dropped (false).
func (d *Device) checkPKey(p *wire.Packet) bool {
	if pk := p.BTH.PKey(); pk&0x7fff != 0x7fff {
		d.counters.BadPKey.Add(1)
		return false
	}
	return true
}

// logMalformed logs a parse failure (debug only). A function of its own: taking the
// error's address in input would move it to the heap for every packet.
func (d *Device) logMalformed(from netip.AddrPort, perr wire.ParseError) {
	d.log.Debug("malformed packet", "dev", d.name, "from", from, "err", &perr)
}

// checkICRC verifies the packet's ICRC for the IP header it arrived in (Annex A17.3.3),
// from the peer to the device (to is its own address) or to a multicast group it joined.
// goverbs peers send IPv4 with DF and Identification 0, or, in a GSO run, the segment's
// number (0…63). Other peers (Linux rxe) number their packets with a counter, and a UDP
// socket cannot see the number: for those the Identification that makes the ICRC match
// is solved for, and a packet for which none exists is corrupt (a 2^-15 chance of a
// corrupted packet passing). A QP whose peer has sent strictSafeRun packets in a row with
// goverbs-style Identifications and never another kind is held to those: a corrupted
// packet then passes with a chance near 2^-25. A counting peer can never qualify: its
// counter leaves 0…63 within 64 packets (it does pass through 0 every 65536).
func (d *Device) checkICRC(b []byte, from, to netip.AddrPort, qp *QP, seg int) bool {
	n := len(b) - wire.ICRCLen
	if n < 0 {
		return false
	}
	var f wire.ICRCFlow
	if qp != nil {
		f = d.rxFlowFrom(qp, from)
	} else {
		ip := rxIP(from, to)
		f = wire.NewICRCFlow(&ip)
	}
	if seg > 0 && seg < netio.MaxGSOSegments && f.Verify(netio.GSOSegmentID(0, seg), b) || f.Verify(0, b) {
		qp.sawGoverbsID()
		return true
	}
	ip := rxIP(from, to)
	if !ip.Src.Unmap().Is4() {
		return false
	}
	id, df, ok := wire.RecoverIPv4ID(&ip, b)
	if !ok {
		return false
	}
	goverbsStyle := df && id < netio.MaxGSOSegments
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

// rxFlowFrom returns the ICRC's share for packets from a peer to the device, as goverbs
// peers send them (DF set), kept on the QP they are for: its peer rarely changes. Only
// the receive path (rxLoop, or the holder of rxMu) calls it.
func (d *Device) rxFlowFrom(qp *QP, from netip.AddrPort) wire.ICRCFlow {
	if from != qp.rxFlowFrom || !from.IsValid() {
		qp.rxFlowFrom, qp.rxFlow = from, d.newRxFlow(from)
	}
	return qp.rxFlow
}

func (d *Device) newRxFlow(from netip.AddrPort) wire.ICRCFlow {
	ip := rxIP(from, d.local)
	return wire.NewICRCFlow(&ip)
}

// rxIP is the IP header of a packet from a peer to an address of the device's (its own,
// or a group's) as a goverbs peer sends it (DF set); its Identification is the caller's
// to add or recover.
func rxIP(from, to netip.AddrPort) wire.IPHeader {
	return wire.IPHeader{Src: from.Addr(), Dst: to.Addr(), SrcPort: from.Port(), DstPort: to.Port(), DF: true}
}

// strictSafeRun is how many goverbs-style packets in a row make a QP verify strictly.
const strictSafeRun = 2 * netio.MaxGSOSegments

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

var transportOf = [...]wire.Transport{driver.QPTypeRC: wire.TransportRC, driver.QPTypeUC: wire.TransportUC,
	driver.QPTypeUD: wire.TransportUD, driver.QPTypeXRCSend: wire.TransportXRC, driver.QPTypeXRCRecv: wire.TransportXRC}

// receive applies the per-QP checks and hands the packet to the responder or completer;
// to is where it was sent (the device, or a multicast group). qp.mu is held.
func (qp *QP) receive(p *wire.Packet, from, to netip.AddrPort) {
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
	case driver.QPStateRTR:
		if !req {
			d.counters.BadQPState.Add(1)
			return
		}
	case driver.QPStateRTS, driver.QPStateSQD, driver.QPStateSQE:
	default:
		d.counters.BadQPState.Add(1)
		return
	}
	if qp.typ != driver.QPTypeUD && from.Addr().Unmap() != qp.remote.Addr().Unmap() {
		d.counters.BadAddress.Add(1) // a connected QP talks only to its peer's GID
		return
	}
	qp.Stats.RxPackets++
	if qp.state == driver.QPStateRTR && !qp.commEst {
		// The first packet received in RTR: communication established (IBTA 11.6.3.1),
		// the cue for a passive side to move to RTS.
		qp.commEst = true
		d.raise(driver.AsyncEvent{Type: driver.EventCommEst, QP: qp})
	}
	switch qp.typ {
	case driver.QPTypeRC:
		if req && qp.sr != nil {
			qp.respondSR(p) // selective.go
		} else if req {
			qp.respond(p)
		} else {
			qp.complete(p)
		}
	case driver.QPTypeXRCSend:
		// An initiator only sends requests: a request for it has no receive queue to go
		// to, and a target sends no requests (Annex A14).
		if req {
			d.counters.BadTransport.Add(1)
			return
		}
		qp.complete(p)
	case driver.QPTypeXRCRecv:
		if !req {
			d.counters.BadTransport.Add(1)
			return
		}
		qp.respond(p)
	case driver.QPTypeUC:
		qp.respondUC(p)
	case driver.QPTypeUD:
		qp.respondUD(p, from, to)
	}
}

// rxLookupQP is lookupQP for the receive path, which owns the one-entry cache.
func (d *Device) rxLookupQP(qpn uint32) *QP {
	gone := d.qpGone.Load()
	if qp := d.rxQP; qp != nil && qp.qpn == qpn && d.rxQPGone == gone {
		return qp
	}
	qp := d.lookupQP(qpn)
	if qp != nil {
		d.rxQP, d.rxQPGone = qp, gone
	}
	return qp
}

// Transmit: the one path of every packet goverbs sends, and the batches it goes out in.
// emit takes the packet's place in the device's transmit batch (a UDP GSO run to one
// destination when it can join one), encodes the headers, copies or gathers the payload,
// pads it and seals it with the ICRC; flushTx sends the batch (one sendmmsg). A WRITE's
// walk goes back and forth between the two halves, so they are one file.

package engine

import (
	"encoding/binary"
	"net/netip"

	"github.com/goverbs/goverbs/netio"
	"github.com/goverbs/goverbs/wire"
)

// txBufSize holds the largest RoCEv2 packet: the longest header set (BTH+RETH+ImmDt is
// the longest with payload; BTH+AtomicETH without) plus a 4096-byte payload, pad and ICRC.
const txBufSize = 128 + 4096 + 4

// txBatch collects outgoing packets so that one WriteBatch call (sendmmsg) carries many.
// With UDP GSO, consecutive packets of equal length to one destination are laid out back
// to back in one message as a run that the kernel segments: a 64 KiB RDMA WRITE leaves
// in two sends instead of sixteen. Batches are pooled per device; the kernel copies the
// bytes before WriteBatch returns, so the buffers are reused at once.
//
// A packet with a large payload from registered memory is gathered rather than copied
// (commitGather): its headers and its pad and ICRC go into the message's buffer, and the
// message's Iov points at those and at the payload where it lies, so the kernel's copy
// is the only one. The regions stay pinned until the batch is sent (held).
type txBatch struct {
	msgs   []netio.Message
	used   []int          // bytes of msgs[i].Buf in use; below N once the message gathers
	iovs   [][][]byte     // msgs[i].Iov's backing array, kept across sends
	loans  [][]netio.Loan // msgs[i].Loans's backing array, kept across sends
	held   []*region      // regions a gathered payload lies in, released after the send
	pieces [][]byte       // one packet's payload slices (scratch)
	n      int
	// GSO runs, and the Conn's limits on one GSO send (netio.Caps). A run never exceeds
	// them, so each run is exactly one GSO send and its segments carry IPv4
	// Identifications 0, 1, 2, … (netio.GSOSegmentID).
	gso      bool
	maxSeg   int
	maxBytes int
	// The packet being built: where emit placed it, its ECN codepoint and its path's
	// traffic class (a GSO run has one of each: the kernel writes one TOS for all its
	// segments).
	appendRun bool // it extends the run in msgs[n-1]
	// The run in msgs[n-1]: its segments, and whether a shorter last one closed it.
	// Kept, not derived from N and SegSize: that is a division for every packet emit
	// places.
	lastSegs  int
	lastShort bool
	ecn       netio.ECN
	tc        uint8
	// The ICRC's share for the last destination (a batch mostly goes to one peer).
	flowDst netip.AddrPort
	flow    wire.ICRCFlow
	// Which datagrams to offDst may leave unsealed, as the Conn answered at its
	// generation offGen (unsealedTo).
	offDst netip.AddrPort
	offGen uint64
	off    netio.ICRCOffload
}

// gatherMin is the smallest payload sent from registered memory in place; smaller ones
// are copied. Gathering costs per packet (two more iovecs for the kernel to walk, a
// region pin) and saves per byte, so against copying it pays only on full 4 KiB packets
// (DESIGN.md, "Payload sent in place", has the measurement).
const gatherMin = 4096

func newTxBatch(c netio.Caps) *txBatch {
	size := min(max(c.BatchSize, 1), 64)
	b := &txBatch{gso: c.GSO && c.MaxSegments > 1 && c.MaxGSOBytes > txBufSize,
		maxSeg: c.MaxSegments, maxBytes: c.MaxGSOBytes}
	bufSize := txBufSize
	if b.gso {
		size = min(size, 16)
		bufSize = c.MaxGSOBytes
	}
	b.msgs = make([]netio.Message, size)
	b.used = make([]int, size)
	b.iovs = make([][][]byte, size)
	b.loans = make([][]netio.Loan, size)
	for i := range b.msgs {
		b.msgs[i].Buf = make([]byte, bufSize)
	}
	return b
}

func (d *Device) getTx() *txBatch { return d.txPool.Get().(*txBatch) }

// putTx sends what is left in b and returns it to the pool.
func (d *Device) putTx(b *txBatch) {
	d.flushTx(b)
	d.txPool.Put(b)
}

// payload is where a packet's payload comes from: bytes copied from b, or n bytes at
// off of a resolved scatter/gather list (copied, its regions pinned by the caller:
// sendPackets; gathered in place from registered memory when a full gatherMin bytes,
// see txBatch). The zero payload is none.
type payload struct {
	b      []byte
	sgl    *sgl
	off, n int
}

// bytesPayload is a payload copied from b.
func bytesPayload(b []byte) payload { return payload{b: b, n: len(b)} }

// emit adds a packet with headers h and payload pl for dst to tx, with traffic class tc
// (the path's: the QP's address vector or the UD request's AH; its DSCP goes into the IP
// header, the ECN bits are congestion control's, ecnFor), sealed with pad and
// ICRC for the IP header it will travel in (commit, commitGather). It reports false,
// having sealed nothing, when a gathered payload's memory is no longer registered.
//
// The packet goes at the end of the batch's open GSO run when it can join it, otherwise
// into a fresh message (the batch is sent first when it is full). A packet joins a run
// of its own size. With endRun (a request) it may also end a run of larger packets as
// its shorter last segment, which UDP GSO allows: a two-packet message (a FIRST with its
// RETH, then a LAST 16 bytes shorter) then leaves in one GSO send instead of two
// datagrams (write_bw at 8 KiB was below its 4 KiB rate). A run whose last segment is
// short is closed: its N is no longer a multiple of SegSize. ACKs and responses do not
// end runs: measured, an ACK folded into the requests' GSO send costs a busy-poll
// ping-pong more (the peer processes it before returning the request's completion) than
// a datagram of its own in the same sendmmsg. A run never gathers from more than
// netio.MaxIov slices.
//
// A run carries datagrams for QPNs of one top byte: goverbs serve's address steers by
// it (the kernel per segment, the same-host rings per message, netio's qpnSteered),
// and a run's first header starts its Buf.
//
// One function, not a placement helper and a build: this is every packet's path, and
// the placement is inlined here rather than paid as a call. pl comes by pointer: by value
// it goes on the stack (the arguments outnumber the registers), copied there with 16-byte
// loads from the caller's just-stored fields, a store-forwarding stall per packet.
func (d *Device) emit(tx *txBatch, dst netip.AddrPort, tc uint8, h *wire.Headers, pl *payload, endRun bool) bool {
	n := pl.n
	size := wireLen(h.Len(), n)
	gather := pl.sgl != nil && n >= gatherMin
	pieces := 0
	if gather {
		pieces = len(pl.sgl.segs)
	}
	var buf []byte
	tx.appendRun = false
	tx.ecn, tx.tc = d.ecnFor(h.BTH.Opcode), tc&^netio.ECNMask
	if tx.gso && tx.n > 0 {
		last := &tx.msgs[tx.n-1]
		if last.Addr == dst && !tx.lastShort && last.ECN == tx.ecn && last.TrafficClass == tx.tc &&
			last.Buf[bthQPNHi] == uint8(h.BTH.DestQP>>16) &&
			(last.SegSize == size || endRun && size < last.SegSize) &&
			last.N+size <= tx.maxBytes && tx.lastSegs < tx.maxSeg &&
			len(last.Iov)+pieces+3 <= netio.MaxIov && !dst.Addr().IsMulticast() {
			// (A multicast group's members read its socket without GRO, so a segment's
			// number, its IPv4 Identification, would be lost to them: every multicast
			// packet leaves on its own, with Identification 0.)
			tx.appendRun = true
			buf = last.Buf[tx.used[tx.n-1]:]
		}
	}
	if !tx.appendRun {
		if tx.n == len(tx.msgs) {
			d.flushTx(tx)
		}
		buf = tx.msgs[tx.n].Buf
	}
	hlen := h.Encode(buf)
	if gather {
		// Sent from registered memory in place (see txBatch), pinned until the send:
		// once per batch for a run of packets from one region (a WRITE's), whose pin
		// is a locked instruction on a line a same-host reader of this process pins
		// too when it copies the payload from there (netio.Message.Loans).
		if k := len(tx.held); len(pl.sgl.regs) != 1 || k == 0 || tx.held[k-1] != pl.sgl.regs[0] || !pl.sgl.regs[0].valid.Load() {
			if !pl.sgl.acquire() {
				return false
			}
			tx.held = append(tx.held, pl.sgl.regs...)
		}
		tx.pieces = pl.sgl.slices(pl.off, n, tx.pieces[:0])
		var from *region // the one region the payload lies in, which a loan names
		if len(tx.pieces) == 1 {
			if i, _ := pl.sgl.at(pl.off); i < len(pl.sgl.regs) {
				from = pl.sgl.regs[i] // an MR: resolveSGL takes no window's key
			}
		}
		d.commitGather(tx, hlen, tx.pieces, n, dst, from)
		return true
	}
	if pl.sgl != nil {
		pl.sgl.copyOut(buf[hlen:hlen+n], pl.off)
	} else {
		copy(buf[hlen:hlen+n], pl.b)
	}
	d.commit(tx, hlen, n, dst)
	return true
}

// wireLen is the size of a packet with hlen header bytes and n payload bytes.
func wireLen(hlen, n int) int { return hlen + n + wire.PadLen(n) + wire.ICRCLen }

// commit seals the packet emit built at the batch's open position: hlen header bytes, payloadLen
// payload bytes after them. It pads, and computes the ICRC for the IP header the packet
// will travel in: DF set, Identification 0, or the segment's number within a GSO run.
//
// A message to a destination the Conn reaches through a same-host ring whose reader takes
// datagrams unsealed (netio.ICRCOffloader) leaves without ICRCs (Message.SameHost): the
// Conn seals it if it must send it by UDP after all.
func (d *Device) commit(b *txBatch, hlen, payloadLen int, dst netip.AddrPort) {
	i, seg := b.place(d, dst)
	m := &b.msgs[i]
	pkt := m.Buf[b.used[i]:]
	n := wire.Finish(pkt, hlen, payloadLen)
	if m.SameHost {
		binary.LittleEndian.PutUint32(pkt[n:], 0)
	} else {
		f := b.flowTo(d, dst)
		binary.LittleEndian.PutUint32(pkt[n:], f.SumInPlace(netio.GSOSegmentID(0, seg), pkt, n))
	}
	size := n + wire.ICRCLen
	if m.Iov != nil {
		m.Iov = append(m.Iov, pkt[:size])
	}
	b.grow(i, size, size)
}

// commitGather seals a packet whose hlen header bytes are at the batch's open position and
// whose payload is pieces (in registered memory, pinned until the batch is sent): the
// pad and ICRC go after the headers in the buffer, and the message gathers headers,
// payload and trailer.
//
// When the payload is one piece of from's memory and the message leaves unsealed, the
// message also says where that piece lies (netio.Message.Loans): a same-host ring to a
// device of this process then carries a reference, and the receiver copies the payload
// once, straight from from's memory into the target's, pinning it again as it reads.
func (d *Device) commitGather(b *txBatch, hlen int, pieces [][]byte, payloadLen int, dst netip.AddrPort, from *region) {
	i, seg := b.place(d, dst)
	m := &b.msgs[i]
	start := b.used[i]
	hdr := m.Buf[start : start+hlen]
	pad := wire.PadLen(payloadLen)
	wire.BTH(hdr).SetPadCnt(pad)
	tail := m.Buf[start+hlen : start+hlen+pad+wire.ICRCLen]
	clear(tail[:pad])
	if m.SameHost {
		binary.LittleEndian.PutUint32(tail[pad:], 0) // unsealed, as in commit
	} else {
		f := b.flowTo(d, dst)
		binary.LittleEndian.PutUint32(tail[pad:], f.Sum(netio.GSOSegmentID(0, seg), hdr, pieces, pad))
	}
	if m.Iov == nil {
		m.Iov = b.iovs[i][:0]
		if start > 0 {
			m.Iov = append(m.Iov, m.Buf[:start]) // the run's copied packets so far
		}
	}
	m.Iov = append(m.Iov, hdr)
	if from != nil && m.SameHost {
		if m.Loans == nil {
			m.Loans = b.loans[i][:0]
		}
		for len(m.Loans) < seg {
			m.Loans = append(m.Loans, netio.Loan{}) // copied datagrams of the run: none
		}
		m.Loans = append(m.Loans, netio.Loan{From: from, Off: from.offsetOf(pieces[0]), Iov: len(m.Iov)})
	}
	m.Iov = append(m.Iov, pieces...)
	m.Iov = append(m.Iov, tail)
	b.grow(i, hlen+payloadLen+pad+wire.ICRCLen, hlen+len(tail))
}

// place returns the message the packet emit built belongs to, and its
// segment number in that message's run; a packet that starts a message sets it up.
func (b *txBatch) place(d *Device, dst netip.AddrPort) (i, seg int) {
	if b.appendRun {
		return b.n - 1, b.lastSegs
	}
	i = b.n
	b.msgs[i].N, b.msgs[i].SegSize, b.msgs[i].Addr, b.msgs[i].ECN, b.msgs[i].TrafficClass = 0, 0, dst, b.ecn, b.tc
	// The packet's BTH is at the start of Buf (emit), and a run keeps its QPN's top byte.
	b.msgs[i].SameHost = b.unsealedTo(d, dst, b.msgs[i].Buf[bthQPNHi])
	b.used[i] = 0
	b.lastSegs, b.lastShort = 0, false
	b.n++
	return i, 0
}

// grow accounts for a packet of size wire bytes, bufBytes of them in the buffer.
func (b *txBatch) grow(i, size, bufBytes int) {
	m := &b.msgs[i]
	if !b.appendRun {
		m.SegSize = size // a run of one; it may grow
	} else if size != m.SegSize {
		b.lastShort = true // a shorter last segment (emit's endRun) closes the run
	}
	b.lastSegs++
	m.N += size
	b.used[i] += bufBytes
	b.appendRun = false
}

// flowTo returns the ICRC's share for packets to dst, which travel with DF set; the
// caller adds the Identification (0, or a GSO segment's number).
func (b *txBatch) flowTo(d *Device, dst netip.AddrPort) *wire.ICRCFlow {
	if dst != b.flowDst || !b.flowDst.IsValid() {
		b.flowDst = dst
		b.flow = wire.NewICRCFlow(&wire.IPHeader{
			Src: d.src.Addr(), Dst: dst.Addr(), SrcPort: d.src.Port(), DstPort: dst.Port(), DF: true,
		})
	}
	return &b.flow
}

// unsealedTo reports whether a message to dst whose BTH destination QPN has top byte
// qpnHi may leave without ICRCs: the Conn said such datagrams reach dst through a ring
// whose reader does not check them (netio.ICRCOffloader; to a steered peer, goverbs
// serve's device, only its own engine's QPNs, top byte 0, take the ring). The answer is
// kept until the destination or the Conn's generation changes, so that a remote peer's
// messages cost a compare, not a lookup. Inlined where the Conn offloads nothing (every
// Conn but the same-host one): a compare.
func (b *txBatch) unsealedTo(d *Device, dst netip.AddrPort, qpnHi byte) bool {
	return d.icrcOff != nil && b.askUnsealed(d.icrcOff, dst, qpnHi)
}

func (b *txBatch) askUnsealed(o netio.ICRCOffloader, dst netip.AddrPort, qpnHi byte) bool {
	if gen := o.ICRCOffloadGen(); dst != b.offDst || gen != b.offGen || !b.offDst.IsValid() {
		b.offDst, b.offGen, b.off = dst, gen, o.OffloadsICRC(dst)
	}
	return b.off.Unsealed(qpnHi)
}

func (d *Device) flushTx(b *txBatch) {
	msgs := b.msgs[:b.n]
	for i := range msgs {
		if msgs[i].N <= msgs[i].SegSize {
			msgs[i].SegSize = 0 // a single datagram: no GSO
		}
	}
	raceReleaseWire()
	for len(msgs) > 0 {
		n, err := d.conn.WriteBatch(msgs)
		// Counted once per send, not per message: each Add is a locked instruction,
		// and a ping-pong's reply and the ACK riding along with it are two messages.
		var segs, bytes uint64
		for i := 0; i < n && i < len(msgs); i++ {
			segs += uint64(msgs[i].NumSegments())
			bytes += uint64(msgs[i].N)
		}
		if segs > 0 {
			d.counters.TxPackets.Add(segs)
			d.counters.TxBytes.Add(bytes)
		}
		if err != nil {
			// A datagram the socket refuses is a lost packet: the transport's retry
			// recovers it, exactly as from loss in the network. Skip it and go on.
			d.counters.SendErrors.Add(1)
			if isClosed(err) {
				break
			}
			if n < len(msgs) {
				n++
			}
		}
		if n <= 0 {
			n = 1
		}
		msgs = msgs[min(n, len(msgs)):]
	}
	for _, r := range b.held {
		r.release()
	}
	clear(b.held) // no pointers into registered memory outlive the send
	b.held = b.held[:0]
	for i := range b.msgs[:b.n] {
		if m := &b.msgs[i]; m.Iov != nil {
			clear(m.Iov)
			b.iovs[i] = m.Iov[:0]
			m.Iov = nil
			if m.Loans != nil {
				clear(m.Loans)
				b.loans[i] = m.Loans[:0]
				m.Loans = nil
			}
		}
	}
	b.n = 0
	b.appendRun = false
}

// bthQPNHi is the offset of the BTH destination QPN's top byte in a datagram.
const bthQPNHi = 5

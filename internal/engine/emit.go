// Emitting a packet: the one sequence every packet goverbs sends goes through — take
// its place in the transmit batch, encode the headers, copy or gather the payload, pad
// and seal it with the ICRC (tx.go lays out and sends the batch).

package engine

import (
	"encoding/binary"
	"net/netip"

	"github.com/goverbs/goverbs/netio"
	"github.com/goverbs/goverbs/wire"
)

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

// emit adds a packet with headers h and payload pl for dst to tx, sealed with pad and
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
// One function, not a placement helper and a build: this is every packet's path, and
// the placement is inlined here rather than paid as a call.
func (d *Device) emit(tx *txBatch, dst netip.AddrPort, h *wire.Headers, pl payload, endRun bool) bool {
	n := pl.n
	size := wireLen(h.Len(), n)
	gather := pl.sgl != nil && n >= gatherMin
	pieces := 0
	if gather {
		pieces = len(pl.sgl.segs)
	}
	var buf []byte
	tx.appendRun = false
	if tx.gso && tx.n > 0 {
		last := &tx.msgs[tx.n-1]
		if last.Addr == dst && last.N%last.SegSize == 0 &&
			(last.SegSize == size || endRun && size < last.SegSize) &&
			last.N+size <= tx.maxBytes && last.N/last.SegSize < tx.maxSeg &&
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
		// Sent from registered memory in place (see txBatch), pinned until the send.
		if !pl.sgl.acquire() {
			return false
		}
		tx.held = append(tx.held, pl.sgl.regs...)
		tx.pieces = pl.sgl.slices(pl.off, n, tx.pieces[:0])
		d.commitGather(tx, hlen, tx.pieces, n, dst)
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
func (d *Device) commit(b *txBatch, hlen, payloadLen int, dst netip.AddrPort) {
	i, seg := b.place(dst)
	m := &b.msgs[i]
	pkt := m.Buf[b.used[i]:]
	n := wire.Finish(pkt, hlen, payloadLen)
	f := b.flowTo(d, dst)
	binary.LittleEndian.PutUint32(pkt[n:], f.Sum(netio.GSOSegmentID(0, seg), pkt[:n], nil, 0))
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
func (d *Device) commitGather(b *txBatch, hlen int, pieces [][]byte, payloadLen int, dst netip.AddrPort) {
	i, seg := b.place(dst)
	m := &b.msgs[i]
	start := b.used[i]
	hdr := m.Buf[start : start+hlen]
	pad := wire.PadLen(payloadLen)
	wire.BTH(hdr).SetPadCnt(pad)
	tail := m.Buf[start+hlen : start+hlen+pad+wire.ICRCLen]
	clear(tail[:pad])
	f := b.flowTo(d, dst)
	binary.LittleEndian.PutUint32(tail[pad:], f.Sum(netio.GSOSegmentID(0, seg), hdr, pieces, pad))
	if m.Iov == nil {
		m.Iov = b.iovs[i][:0]
		if start > 0 {
			m.Iov = append(m.Iov, m.Buf[:start]) // the run's copied packets so far
		}
	}
	m.Iov = append(m.Iov, hdr)
	m.Iov = append(m.Iov, pieces...)
	m.Iov = append(m.Iov, tail)
	b.grow(i, hlen+payloadLen+pad+wire.ICRCLen, hlen+len(tail))
}

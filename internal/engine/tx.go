package engine

import (
	"net/netip"

	"github.com/goverbs/goverbs/netio"
	"github.com/goverbs/goverbs/wire"
)

// txBufSize holds the largest RoCEv2 packet: the longest header set (BTH+RETH+ImmDt is
// the longest with payload; BTH+AtomicETH without) plus a 4096-byte payload, pad and ICRC.
const txBufSize = 128 + 4096 + 4

// gsoRunBytes is the most one GSO send carries (the UDP length limit less IP and UDP
// headers, as netio counts it). A run never exceeds it, so each run is exactly one GSO
// send and its segments carry IPv4 Identifications 0, 1, 2, … (netio.GSOSegmentID).
const gsoRunBytes = 65535 - 48

// txBatch collects outgoing packets so that one WriteBatch call (sendmmsg) carries many.
// With UDP GSO, consecutive packets of equal length to one destination are laid out back
// to back in one message as a run that the kernel segments: a 64 KiB RDMA WRITE leaves
// in two sends instead of sixteen. Batches are pooled per device; the kernel copies the
// bytes before WriteBatch returns, so the buffers are reused at once.
type txBatch struct {
	msgs   []netio.Message
	n      int
	gso    bool
	maxSeg int
	// The packet being built: where nextBuf placed it.
	appendRun bool // it extends the run in msgs[n-1]
}

func newTxBatch(c netio.Caps) *txBatch {
	size := min(max(c.BatchSize, 1), 64)
	b := &txBatch{gso: c.GSO && c.MaxSegments > 1, maxSeg: c.MaxSegments}
	bufSize := txBufSize
	if b.gso {
		size = min(size, 16)
		bufSize = gsoRunBytes
	}
	b.msgs = make([]netio.Message, size)
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

// nextBuf returns where to build the next packet, of size bytes (ICRC included) for dst:
// at the end of the open run when it can join it, otherwise in a fresh message (sending
// the batch first when it is full).
//
// A packet joins a run of its own size. With endRun it may also end a run of larger
// packets as its shorter last segment, which UDP GSO allows: a two-packet message (a
// FIRST with its RETH, then a LAST 16 bytes shorter) then leaves in one GSO send instead
// of two datagrams (write_bw at 8 KiB was below its 4 KiB rate). A run whose last segment
// is short is closed: its N is no longer a multiple of SegSize. ACKs do not end runs:
// measured, an ACK folded into the requests' GSO send costs a busy-poll ping-pong more
// (the peer processes it before returning the request's completion) than a datagram of
// its own in the same sendmmsg.
func (d *Device) nextBuf(b *txBatch, dst netip.AddrPort, size int, endRun bool) []byte {
	if b.gso && b.n > 0 {
		last := &b.msgs[b.n-1]
		if last.Addr == dst && last.N%last.SegSize == 0 &&
			(last.SegSize == size || endRun && size < last.SegSize) &&
			last.N+size <= gsoRunBytes && last.N/last.SegSize < b.maxSeg {
			b.appendRun = true
			return last.Buf[last.N:]
		}
	}
	b.appendRun = false
	if b.n == len(b.msgs) {
		d.flushTx(b)
	}
	return b.msgs[b.n].Buf
}

// wireLen is the size of a packet with hlen header bytes and n payload bytes.
func wireLen(hlen, n int) int { return hlen + n + wire.PadLen(n) + wire.ICRCLen }

// commit seals the packet built at nextBuf's position: hlen header bytes, payloadLen
// payload bytes after them. It pads, and computes the ICRC for the IP header the packet
// will travel in: DF set, Identification 0, or the segment's number within a GSO run.
func (d *Device) commit(b *txBatch, hlen, payloadLen int, dst netip.AddrPort) {
	var m *netio.Message
	var pkt []byte
	seg := 0
	if b.appendRun {
		m = &b.msgs[b.n-1]
		pkt = m.Buf[m.N:]
		seg = m.N / m.SegSize
	} else {
		m = &b.msgs[b.n]
		pkt = m.Buf
		m.N, m.SegSize, m.Addr = 0, 0, dst
		b.n++
	}
	n := wire.Finish(pkt, hlen, payloadLen)
	ip := wire.IPHeader{
		Src: d.src.Addr(), Dst: dst.Addr(),
		SrcPort: d.src.Port(), DstPort: dst.Port(),
		DF: true, ID: netio.GSOSegmentID(0, seg),
	}
	wire.PutICRC(&ip, pkt, n)
	size := n + wire.ICRCLen
	if !b.appendRun {
		m.SegSize = size // a run of one; it may grow
	}
	m.N += size
	b.appendRun = false
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
		for i := 0; i < n && i < len(msgs); i++ {
			segs := uint64(msgs[i].NumSegments())
			d.counters.TxPackets.Add(segs)
			d.counters.TxBytes.Add(uint64(msgs[i].N))
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
	b.n = 0
	b.appendRun = false
}

// Transmit batching: a device's pooled batches of outgoing packets, laid out as UDP GSO
// runs to one destination, and their send (one sendmmsg per batch). emit.go builds the
// packets into them.

package engine

import (
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
	used   []int      // bytes of msgs[i].Buf in use; below N once the message gathers
	iovs   [][][]byte // msgs[i].Iov's backing array, kept across sends
	held   []*region  // regions a gathered payload lies in, released after the send
	pieces [][]byte   // one packet's payload slices (scratch)
	n      int
	// GSO runs, and the Conn's limits on one GSO send (netio.Caps). A run never exceeds
	// them, so each run is exactly one GSO send and its segments carry IPv4
	// Identifications 0, 1, 2, … (netio.GSOSegmentID).
	gso      bool
	maxSeg   int
	maxBytes int
	// The packet being built: where emit placed it.
	appendRun bool // it extends the run in msgs[n-1]
	// The ICRC's share for the last destination (a batch mostly goes to one peer).
	flowDst netip.AddrPort
	flow    wire.ICRCFlow
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

// place returns the message the packet emit built belongs to, and its
// segment number in that message's run; a packet that starts a message sets it up.
func (b *txBatch) place(dst netip.AddrPort) (i, seg int) {
	if b.appendRun {
		i = b.n - 1
		return i, b.msgs[i].N / b.msgs[i].SegSize
	}
	i = b.n
	b.msgs[i].N, b.msgs[i].SegSize, b.msgs[i].Addr = 0, 0, dst
	b.used[i] = 0
	b.n++
	return i, 0
}

// grow accounts for a packet of size wire bytes, bufBytes of them in the buffer.
func (b *txBatch) grow(i, size, bufBytes int) {
	m := &b.msgs[i]
	if !b.appendRun {
		m.SegSize = size // a run of one; it may grow
	}
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
		}
	}
	b.n = 0
	b.appendRun = false
}

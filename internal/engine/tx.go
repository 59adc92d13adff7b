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
// Batches are pooled per device; a packet's bytes are copied by the kernel before
// WriteBatch returns, so the buffers are reused at once.
type txBatch struct {
	msgs []netio.Message
	n    int
}

func newTxBatch(size int) *txBatch {
	if size < 1 {
		size = 1
	}
	if size > 64 {
		size = 64
	}
	b := &txBatch{msgs: make([]netio.Message, size)}
	for i := range b.msgs {
		b.msgs[i].Buf = make([]byte, txBufSize)
	}
	return b
}

func (d *Device) getTx() *txBatch { return d.txPool.Get().(*txBatch) }

// putTx sends what is left in b and returns it to the pool.
func (d *Device) putTx(b *txBatch) {
	d.flushTx(b)
	d.txPool.Put(b)
}

// buf returns the buffer for the next packet, sending the batch first when it is full.
func (d *Device) nextBuf(b *txBatch) []byte {
	if b.n == len(b.msgs) {
		d.flushTx(b)
	}
	return b.msgs[b.n].Buf
}

// commit queues the packet built in the current buffer: hdr bytes of headers already
// encoded, payloadLen bytes of payload after them. It pads, seals the ICRC for the IP
// header the packet will travel in, and records the destination.
func (d *Device) commit(b *txBatch, hlen, payloadLen int, dst netip.AddrPort) {
	m := &b.msgs[b.n]
	n := wire.Finish(m.Buf, hlen, payloadLen)
	ip := wire.IPHeader{
		Src: d.local.Addr(), Dst: dst.Addr(),
		SrcPort: d.local.Port(), DstPort: dst.Port(),
		DF: true, // netio sends IPv4 with DF and Identification 0 (Caps.IPv4IDZero)
	}
	wire.PutICRC(&ip, m.Buf, n)
	m.N = n + wire.ICRCLen
	m.Addr = dst
	m.SegSize = 0
	b.n++
}

func (d *Device) flushTx(b *txBatch) {
	msgs := b.msgs[:b.n]
	raceReleaseWire()
	for len(msgs) > 0 {
		n, err := d.conn.WriteBatch(msgs)
		for i := 0; i < n; i++ {
			d.counters.TxPackets.Add(1)
			d.counters.TxBytes.Add(uint64(msgs[i].N))
		}
		if err != nil {
			// A datagram the socket refuses is a lost packet: the transport's retry
			// recovers it, exactly as from loss in the network. Skip it and go on.
			d.counters.SendErrors.Add(1)
			if isClosed(err) {
				break
			}
			n++
		}
		if n <= 0 {
			n = 1
		}
		if n > len(msgs) {
			n = len(msgs)
		}
		msgs = msgs[n:]
	}
	b.n = 0
}

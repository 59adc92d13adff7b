// The ICRC a Conn completes for datagrams whose sender left it out (Message.SameHost on
// write, ICRCOffloader) when they go by a wire after all.

package netio

import (
	"encoding/binary"
	"net/netip"

	"github.com/goverbs/goverbs/wire"
)

// sealICRC computes the ICRC of each of m's datagrams, written from src to m.Addr by the
// UDP backend, into its last 4 bytes, and clears m.SameHost (Message.SameHost on write).
// Each datagram is summed from a copy (the path is the rare one: a pair torn down, or a
// peer that checks), and only its 4 ICRC bytes are written back: in a message that
// gathers, into the Iov slice that holds them, which the sender owns (its trailer, never
// registered memory). A datagram shorter than an ICRC is left as it is: it is nobody's
// packet.
func sealICRC(m *Message, src netip.AddrPort) {
	m.SameHost = false
	f := wire.NewICRCFlow(&wire.IPHeader{Src: src.Addr(), Dst: m.Addr.Addr(),
		SrcPort: src.Port(), DstPort: m.Addr.Port(), DF: true})
	seg := m.N
	if m.SegSize > 0 && m.N > m.SegSize {
		seg = m.SegSize
	}
	pkt := make([]byte, seg)
	var icrc [wire.ICRCLen]byte
	for i, off := 0, 0; off < m.N; i, off = i+1, off+seg {
		n := min(seg, m.N-off)
		if n < wire.ICRCLen {
			continue
		}
		m.CopyData(pkt[:n], off)
		binary.LittleEndian.PutUint32(icrc[:], f.SumInPlace(GSOSegmentID(0, i), pkt, n-wire.ICRCLen))
		m.writeData(icrc[:], off+n-wire.ICRCLen)
	}
}

// sealCapture gives dgram, a datagram from src to dst with IPv4 Identification id that
// crossed a same-host ring, the ICRC a capture of it needs, if its sender left it out:
// a ring carries datagrams unsealed, and a Tee records them as a wire would have carried
// them. A datagram whose sender sealed it is left as it came, a wrong ICRC included. (An
// ICRC that is 0 by chance is recomputed as itself.)
func sealCapture(dgram []byte, src, dst netip.AddrPort, id uint16) {
	n := len(dgram) - wire.ICRCLen
	if n < wire.BTHLen || binary.LittleEndian.Uint32(dgram[n:]) != 0 {
		return
	}
	f := wire.NewICRCFlow(&wire.IPHeader{Src: src.Addr(), Dst: dst.Addr(), SrcPort: src.Port(), DstPort: dst.Port(), DF: true})
	binary.LittleEndian.PutUint32(dgram[n:], f.SumInPlace(id, dgram, n))
}

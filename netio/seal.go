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
// It writes only those bytes: in a message that gathers, through the Iov slice that
// holds them, which the sender owns (its trailer, never registered memory). A datagram
// shorter than an ICRC is left as it is: it is nobody's packet.
func sealICRC(m *Message, src netip.AddrPort) {
	m.SameHost = false
	f := wire.NewICRCFlow(&wire.IPHeader{Src: src.Addr(), Dst: m.Addr.Addr(),
		SrcPort: src.Port(), DstPort: m.Addr.Port(), DF: true})
	seg := m.N
	if m.SegSize > 0 && m.N > m.SegSize {
		seg = m.SegSize
	}
	var parts [][]byte // a gathered datagram's slices, reused from one to the next
	for i, off := 0, 0; off < m.N; i, off = i+1, off+seg {
		n := min(seg, m.N-off)
		if n < wire.ICRCLen {
			continue
		}
		id := GSOSegmentID(0, i)
		if m.Iov == nil {
			pkt := m.Buf[off : off+n]
			binary.LittleEndian.PutUint32(pkt[n-wire.ICRCLen:], f.SumInPlace(id, pkt, n-wire.ICRCLen))
			continue
		}
		parts = iovRange(parts[:0], m.Iov, off, n-wire.ICRCLen)
		var sum uint32
		if len(parts) > 0 && len(parts[0]) >= wire.BTHLen {
			sum = f.Sum(id, parts[0], parts[1:], 0)
		} else {
			// A BTH split across slices: the engine never gathers one so. Summed from a copy.
			b := make([]byte, 0, n)
			for _, p := range parts {
				b = append(b, p...)
			}
			sum = f.Sum(id, b, nil, 0)
		}
		var icrc [wire.ICRCLen]byte
		binary.LittleEndian.PutUint32(icrc[:], sum)
		iovWrite(m.Iov, off+n-wire.ICRCLen, icrc[:])
	}
}

// iovRange appends to dst the pieces of iov that hold bytes [off, off+n) of their
// concatenation.
func iovRange(dst, iov [][]byte, off, n int) [][]byte {
	for _, v := range iov {
		if n == 0 {
			break
		}
		if off >= len(v) {
			off -= len(v)
			continue
		}
		k := min(len(v)-off, n)
		dst = append(dst, v[off:off+k])
		off, n = 0, n-k
	}
	return dst
}

// iovWrite copies b into the bytes of iov's concatenation that start at off.
func iovWrite(iov [][]byte, off int, b []byte) {
	for _, v := range iov {
		if len(b) == 0 {
			return
		}
		if off >= len(v) {
			off -= len(v)
			continue
		}
		k := copy(v[off:], b)
		b, off = b[k:], 0
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

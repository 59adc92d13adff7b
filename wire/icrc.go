package wire

import (
	"encoding/binary"
	"hash/crc32"
	"net/netip"
)

// The ICRC (IBTA Vol. 1 7.8.1 and Annex A17.3.3) is CRC-32 with the
// Ethernet polynomial, computed over
//
//	8 bytes of 0xFF (stand-in for the LRH)
//	IP header  with IPv4 TOS, TTL, header checksum / IPv6 traffic class,
//	           flow label, hop limit replaced by ones
//	UDP header with the checksum replaced by ones
//	BTH        with resv8a (byte 4: FECN, BECN) replaced by ones
//	extended headers, payload and pad
//
// and sent least significant byte first, like the Ethernet FCS. The mutable
// fields are masked because routers may change them.
//
// For a small packet the 28 (IPv4) or 48 (IPv6) bytes of IP and UDP header
// are most of that work, and along one flow only their lengths and the IPv4
// Identification change. CRC-32 is linear over GF(2), so the header's share
// splits into a part computed once per flow (ICRCFlow: addresses, ports, DF
// and the masked fields, with the changing fields zero) and one table lookup
// per byte of each changing field. Go's hash/crc32 (SIMD for 64 bytes and
// more) takes the long pieces; short ones, and anything on the stack (whose
// slice would escape through hash/crc32), go through the slicing-by-8 tables
// here.

const crcPoly = 0xedb88320 // reflected 0x04C11DB7

var crcTab [8][256]uint32

// crcSeed is the CRC register after the eight 0xFF bytes: 0xDEBB20E3, the
// seed Linux rxe starts from.
var crcSeed uint32

func init() {
	for i := range 256 {
		c := uint32(i)
		for range 8 {
			if c&1 != 0 {
				c = c>>1 ^ crcPoly
			} else {
				c >>= 1
			}
		}
		crcTab[0][i] = c
	}
	for i := range 256 {
		for k := 1; k < 8; k++ {
			c := crcTab[k-1][i]
			crcTab[k][i] = c>>8 ^ crcTab[0][byte(c)]
		}
	}
	crcSeed = crcRaw(0xffffffff, []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff})
	initFieldTabs()
	initRecover()
	initWholeTabs()
	initFold()
}

// crcRaw advances the CRC register (no pre/post inversion) over p.
func crcRaw(crc uint32, p []byte) uint32 {
	for len(p) >= 8 {
		crc = crcWord8(crc, binary.LittleEndian.Uint64(p))
		p = p[8:]
	}
	for _, c := range p {
		crc = crcTab[0][byte(crc)^c] ^ crc>>8
	}
	return crc
}

// crcWord8 advances the register over eight bytes, w read little endian.
func crcWord8(crc uint32, w uint64) uint32 {
	lo, hi := crc^uint32(w), uint32(w>>32)
	return crcTab[7][byte(lo)] ^ crcTab[6][byte(lo>>8)] ^ crcTab[5][byte(lo>>16)] ^ crcTab[4][lo>>24] ^
		crcTab[3][byte(hi)] ^ crcTab[2][byte(hi>>8)] ^ crcTab[1][byte(hi>>16)] ^ crcTab[0][hi>>24]
}

// crcWord4 advances the register over four bytes, w read little endian.
func crcWord4(crc uint32, w uint32) uint32 {
	x := crc ^ w
	return crcTab[3][byte(x)] ^ crcTab[2][byte(x>>8)] ^ crcTab[1][byte(x>>16)] ^ crcTab[0][x>>24]
}

// crcAppend advances the register over p: crcLong for long p, hash/crc32 (which works on
// the inverted register) for middling, the tables here for short p.
func crcAppend(crc uint32, p []byte) uint32 {
	if len(p) >= foldMin {
		return crcLong(crc, p)
	}
	if len(p) >= 64 {
		return crcHash(crc, p)
	}
	return crcRaw(crc, p)
}

// foldMin is the shortest p crcLong takes.
const foldMin = 256

// crcHash advances the register over p with hash/crc32.
func crcHash(crc uint32, p []byte) uint32 { return ^crc32.Update(^crc, crc32.IEEETable, p) }

// xPowMod returns x^e modulo the CRC polynomial, bit-reflected (bit 31 is x^0).
func xPowMod(e int) uint32 {
	r := uint32(1 << 31)
	for range e {
		r = mulMod(r, 1<<30)
	}
	return r
}

// IPHeader is the IP and UDP context of a RoCEv2 packet: what the ICRC
// covers besides the packet itself, and what AppendIPUDP needs to build a
// real header. An IPv4 or IPv4-mapped IPv6 (::ffff:a.b.c.d) Src means IPv4.
type IPHeader struct {
	Src, Dst         netip.Addr
	SrcPort, DstPort uint16 // UDP
	ID               uint16 // IPv4 Identification: covered by the ICRC
	DF               bool   // IPv4 Don't Fragment: covered by the ICRC
	TTL              uint8  // IPv4 TTL / IPv6 hop limit; masked in the ICRC; 0 means 64
	TOS              uint8  // IPv4 TOS / IPv6 traffic class; masked in the ICRC
	FlowLabel        uint32 // IPv6 only; masked in the ICRC
}

// Is4 reports whether the header is IPv4: Src (or Dst when Src is unset) is
// an IPv4 or IPv4-mapped address.
func (ip *IPHeader) Is4() bool {
	if ip.Src.IsValid() {
		return ip.Src.Unmap().Is4()
	}
	return ip.Dst.Unmap().Is4()
}

func addr4(a netip.Addr) [4]byte {
	a = a.Unmap()
	if a.Is4() {
		return a.As4()
	}
	return [4]byte{}
}

func addr16(a netip.Addr) [16]byte {
	if !a.IsValid() {
		return [16]byte{}
	}
	return a.As16()
}

const (
	ipv4HeaderLen = 20
	ipv6HeaderLen = 40
	udpHeaderLen  = 8
	protoUDP      = 17
	ipv4DF        = 0x40 // in byte 6 of the IPv4 header
)

// The fields of the IP and UDP headers that change along a flow, as offsets into the
// pseudo-header's IP+UDP part (ipv4HeaderLen+udpHeaderLen or ipv6HeaderLen+udpHeaderLen
// bytes). Each table holds the CRC register contribution of one byte value at one
// offset, carried to the end of that part: crc(T ^ V) = crc(T) ^ crc0(V).
var (
	v4LenTab [4][256]uint32 // IPv4 total length (offsets 2, 3), UDP length (24, 25)
	v4IDTab  [2][256]uint32 // IPv4 Identification (4, 5)
	v6LenTab [2][256]uint32 // IPv6 payload length (4, 5) and UDP length (44, 45): equal
)

func initFieldTabs() {
	const v4, v6 = ipv4HeaderLen + udpHeaderLen, ipv6HeaderLen + udpHeaderLen
	fill := func(t *[256]uint32, size int, offsets ...int) {
		var m [v6]byte
		for bit := range 8 {
			clear(m[:])
			for _, o := range offsets {
				m[o] = 1 << bit
			}
			v := crcRaw(0, m[:size])
			for b := range 256 {
				if b>>bit&1 != 0 {
					t[b] ^= v
				}
			}
		}
	}
	fill(&v4LenTab[0], v4, 2)
	fill(&v4LenTab[1], v4, 3)
	fill(&v4LenTab[2], v4, 24)
	fill(&v4LenTab[3], v4, 25)
	fill(&v4IDTab[0], v4, 4)
	fill(&v4IDTab[1], v4, 5)
	fill(&v6LenTab[0], v6, 4, 44)
	fill(&v6LenTab[1], v6, 5, 45)
}

// ICRCFlow is the share of the ICRC that one direction of one flow fixes: the
// addresses, the UDP ports and DF, with the masked fields. A sender or receiver that
// keeps it for its peer computes each packet's ICRC from the packet's own bytes and a
// few lookups (ICRCFlow.Sum), instead of from a 40- to 60-byte pseudo-header.
type ICRCFlow struct {
	base uint32 // CRC register after the IP and UDP headers, lengths and ID zero
	v6   bool
}

// NewICRCFlow returns the flow of packets travelling in ip; ip.ID and the masked
// fields are ignored.
func NewICRCFlow(ip *IPHeader) ICRCFlow {
	var h [ipv6HeaderLen + udpHeaderLen]byte
	var n int
	if ip.Is4() {
		// 0x45, TOS (masked), total length, ID, flags, frag 0,
		// TTL (masked), protocol, checksum (masked), addresses.
		h[0] = 0x45
		h[1] = 0xff
		if ip.DF {
			h[6] = ipv4DF
		}
		h[8] = 0xff
		h[9] = protoUDP
		h[10], h[11] = 0xff, 0xff
		s, d := addr4(ip.Src), addr4(ip.Dst)
		copy(h[12:16], s[:])
		copy(h[16:20], d[:])
		n = ipv4HeaderLen
	} else {
		// version 6, traffic class and flow label (masked), payload
		// length, next header, hop limit (masked), addresses.
		h[0], h[1], h[2], h[3] = 0x6f, 0xff, 0xff, 0xff
		h[6] = protoUDP
		h[7] = 0xff
		s, d := addr16(ip.Src), addr16(ip.Dst)
		copy(h[8:24], s[:])
		copy(h[24:40], d[:])
		n = ipv6HeaderLen
	}
	// Ports, length (a changing field), checksum (masked).
	binary.BigEndian.PutUint16(h[n:], ip.SrcPort)
	binary.BigEndian.PutUint16(h[n+2:], ip.DstPort)
	h[n+6], h[n+7] = 0xff, 0xff
	n += udpHeaderLen
	return ICRCFlow{base: crcRaw(crcSeed, h[:n]), v6: n > ipv4HeaderLen+udpHeaderLen}
}

// Sum is the ICRC of a packet in this flow with IPv4 Identification id (ignored for
// IPv6), whose bytes are hdr (BTH and extended headers), then each slice of payload,
// then pad zero bytes (at most 3, PadLen). The payload is read where it lies.
func (f *ICRCFlow) Sum(id uint16, hdr []byte, payload [][]byte, pad int) uint32 {
	total := len(hdr) + pad
	for _, p := range payload {
		total += len(p)
	}
	crc := f.start(id, total)
	if len(hdr) >= BTHLen {
		// The BTH with resv8a (byte 4) masked.
		crc = crcWord8(crc, binary.LittleEndian.Uint64(hdr)|0xff<<32)
		crc = crcWord4(crc, binary.LittleEndian.Uint32(hdr[8:]))
		crc = crcAppend(crc, hdr[BTHLen:])
	} else {
		for i, c := range hdr { // shorter than a BTH: only ever a corrupt packet
			if i == 4 {
				c = 0xff
			}
			crc = crcTab[0][byte(crc)^c] ^ crc>>8
		}
	}
	for _, p := range payload {
		crc = crcAppend(crc, p)
	}
	if pad > 0 {
		crc = crcRaw(crc, zeroPad[:pad])
	}
	return ^crc
}

// start is the CRC register after the IP and UDP headers of a packet in this flow whose
// BTH through pad is total bytes long, with IPv4 Identification id.
func (f *ICRCFlow) start(id uint16, total int) uint32 {
	udpLen := udpHeaderLen + total + ICRCLen
	crc := f.base
	if f.v6 {
		crc ^= v6LenTab[0][byte(udpLen>>8)] ^ v6LenTab[1][byte(udpLen)]
	} else {
		ipLen := ipv4HeaderLen + udpLen
		crc ^= v4LenTab[0][byte(ipLen>>8)] ^ v4LenTab[1][byte(ipLen)] ^
			v4LenTab[2][byte(udpLen>>8)] ^ v4LenTab[3][byte(udpLen)]
		if id != 0 {
			crc ^= v4IDTab[0][byte(id>>8)] ^ v4IDTab[1][byte(id)]
		}
	}
	return crc
}

// A packet of some size is summed in one pass of hash/crc32 (carry-less multiply, 16
// bytes a step) over the bytes as they lie, BTH to ICRC, instead of the BTH through
// the slicing-by-8 tables and the rest through hash/crc32 (Sum). Two facts make that
// right, both from the CRC's linearity over GF(2):
//
//   - The BTH's resv8a byte (offset 4) is 0 in nearly every packet but counts as 0xff
//     in the ICRC. Summing the byte as it is changes the register after the packet's L
//     bytes by a constant that depends on L alone: wholeDelta[L], the register after
//     0xff and L-5 zero bytes. A packet with another resv8a (FECN, BECN) takes Sum.
//   - A check sums the ICRC's four bytes too: data followed by its own ICRC leaves the
//     register at icrcResidue whatever the data. A sender sums its packet with four zero
//     bytes where the ICRC goes (so a full 4 KiB or 1 KiB packet is a multiple of 16
//     bytes, which hash/crc32 takes without a byte-by-byte tail) and undoes those four
//     bytes' step with zeroStep4Inv.
//
// Measured on the 2-core VM (DESIGN.md, "The 1 KiB-packet path"), at MTU 1024 this
// saves the BTH's two dependent rounds of table lookups, whose tables the payload
// streaming through the cache keeps evicting.
const (
	wholeMin = 256            // below it, Sum (hash/crc32 takes short slices byte by byte)
	wholeMax = 8192 + 256 + 1 // longer packets take Sum
)

var (
	wholeDelta   [wholeMax]uint32
	zeroStepInv  [4][256]uint32 // by byte position: the register before four zero bytes
	icrcResidue  uint32
	crcTopToByte [256]byte // crcTab[0][b]>>24 -> b (a permutation)
)

func initWholeTabs() {
	for b := range 256 {
		crcTopToByte[crcTab[0][b]>>24] = byte(b)
	}
	d := crcTab[0][0xff] // 0xff from register 0: the pattern at offset 4 of a 5-byte packet
	for l := 5; l < wholeMax; l++ {
		wholeDelta[l] = d
		d = crcTab[0][byte(d)] ^ d>>8
	}
	for k := range 4 {
		for b := range 256 {
			zeroStepInv[k][b] = unstepZero4(uint32(b) << (8 * k))
		}
	}
	icrcResidue = crcWord4(0xffffffff, 0)
}

// unstepZero4 returns the register r with crcWord4(r, 0) == y: the step over four zero
// bytes, undone a byte at a time. A step over a zero byte is c' = crcTab[0][byte(c)] ^
// c>>8, whose top byte is crcTab[0][byte(c)]'s, and those are all different.
func unstepZero4(y uint32) uint32 {
	for range 4 {
		b := crcTopToByte[y>>24]
		y = (y^crcTab[0][b])<<8 | uint32(b)
	}
	return y
}

// SumInPlace is Sum(id, pkt[:n], nil, 0) for a packet laid out whole in pkt, its BTH
// through pad in pkt[:n] and room for the ICRC at pkt[n:n+ICRCLen], which it
// overwrites (the caller stores the ICRC there). One pass over the packet.
func (f *ICRCFlow) SumInPlace(id uint16, pkt []byte, n int) uint32 {
	l := n + ICRCLen
	if l < wholeMin || l >= wholeMax || pkt[4] != 0 {
		return f.Sum(id, pkt[:n], nil, 0)
	}
	binary.LittleEndian.PutUint32(pkt[n:l], 0)
	y := crcAppend(f.start(id, n), pkt[:l]) ^ wholeDelta[l]
	return ^(zeroStepInv[0][byte(y)] ^ zeroStepInv[1][byte(y>>8)] ^
		zeroStepInv[2][byte(y>>16)] ^ zeroStepInv[3][y>>24])
}

// Verify reports whether full, a packet's BTH through ICRC, carries the ICRC of a
// packet in this flow with IPv4 Identification id: Sum's answer, in one pass over the
// packet for one of some size. full is only read.
func (f *ICRCFlow) Verify(id uint16, full []byte) bool {
	n := len(full) - ICRCLen
	if n < 0 {
		return false
	}
	if len(full) < wholeMin || len(full) >= wholeMax || full[4] != 0 {
		return f.Sum(id, full[:n], nil, 0) == binary.LittleEndian.Uint32(full[n:])
	}
	return crcAppend(f.start(id, n), full)^wholeDelta[len(full)] == icrcResidue
}

// ICRC computes the ICRC of a packet travelling in ip. pkt is BTH through
// pad, without the four ICRC bytes; the UDP length and IP length are derived
// from len(pkt)+ICRCLen. No allocation. A sender or receiver that handles many
// packets of one flow, or payload in pieces, keeps an ICRCFlow instead.
func ICRC(ip *IPHeader, pkt []byte) uint32 {
	f := NewICRCFlow(ip)
	return f.Sum(ip.ID, pkt, nil, 0)
}

// zeroPad is the pad bytes' value.
var zeroPad [3]byte

// PutICRC computes the ICRC over pkt[:n] and stores it little endian at
// pkt[n:n+4].
func PutICRC(ip *IPHeader, pkt []byte, n int) {
	binary.LittleEndian.PutUint32(pkt[n:n+ICRCLen], ICRC(ip, pkt[:n]))
}

// CheckICRC reports whether the last four bytes of full are the ICRC of the
// rest for a packet travelling in ip.
func CheckICRC(ip *IPHeader, full []byte) bool {
	n := len(full) - ICRCLen
	if n < 0 {
		return false
	}
	return ICRC(ip, full[:n]) == binary.LittleEndian.Uint32(full[n:])
}

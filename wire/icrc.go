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
// Go's hash/crc32 is fast (SIMD) but its slice argument escapes, so a
// pseudo-header on the stack would be moved to the heap. The short
// pseudo-header (IP + UDP + BTH, at most 60 bytes) is therefore run through
// a small slicing-by-8 implementation here, and only the packet body
// (already on the heap) goes through hash/crc32.

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
	initRecover()
}

// crcRaw advances the CRC register (no pre/post inversion) over p.
func crcRaw(crc uint32, p []byte) uint32 {
	for len(p) >= 8 {
		crc ^= binary.LittleEndian.Uint32(p)
		crc = crcTab[7][byte(crc)] ^ crcTab[6][byte(crc>>8)] ^
			crcTab[5][byte(crc>>16)] ^ crcTab[4][crc>>24] ^
			crcTab[3][p[4]] ^ crcTab[2][p[5]] ^ crcTab[1][p[6]] ^ crcTab[0][p[7]]
		p = p[8:]
	}
	for _, c := range p {
		crc = crcTab[0][byte(crc)^c] ^ crc>>8
	}
	return crc
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

// icrcPseudo fills h with the masked IP, UDP and BTH headers for a packet
// that starts with pkt and is pktLen bytes long from BTH to pad, and returns
// how many bytes of h are used.
func icrcPseudo(h *[ipv6HeaderLen + udpHeaderLen + BTHLen]byte, ip *IPHeader, pkt []byte, pktLen int) int {
	udpLen := udpHeaderLen + pktLen + ICRCLen
	var n int
	if ip.Is4() {
		// 0x45, TOS (masked), total length, ID, flags, frag 0,
		// TTL (masked), protocol, checksum (masked), addresses.
		h[0] = 0x45
		h[1] = 0xff
		binary.BigEndian.PutUint16(h[2:], uint16(ipv4HeaderLen+udpLen))
		binary.BigEndian.PutUint16(h[4:], ip.ID)
		h[6] = 0
		if ip.DF {
			h[6] = ipv4DF
		}
		h[7] = 0
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
		binary.BigEndian.PutUint16(h[4:], uint16(udpLen))
		h[6] = protoUDP
		h[7] = 0xff
		s, d := addr16(ip.Src), addr16(ip.Dst)
		copy(h[8:24], s[:])
		copy(h[24:40], d[:])
		n = ipv6HeaderLen
	}
	binary.BigEndian.PutUint16(h[n:], ip.SrcPort)
	binary.BigEndian.PutUint16(h[n+2:], ip.DstPort)
	binary.BigEndian.PutUint16(h[n+4:], uint16(udpLen))
	h[n+6], h[n+7] = 0xff, 0xff
	n += udpHeaderLen
	m := copy(h[n:n+BTHLen], pkt)
	if m > 4 {
		h[n+4] = 0xff // resv8a
	}
	return n + m
}

// ICRC computes the ICRC of a packet travelling in ip. pkt is BTH through
// pad, without the four ICRC bytes; the UDP length and IP length are derived
// from len(pkt)+ICRCLen. One pass, no allocation.
func ICRC(ip *IPHeader, pkt []byte) uint32 { return ICRCGather(ip, pkt, nil, 0) }

// ICRCGather is ICRC for a packet whose bytes are not in one slice: hdr (BTH
// and extended headers), then each slice of payload, then pad zero bytes. It
// lets a sender compute the ICRC of payload where it lies in memory. pad is
// at most 3 (PadLen).
func ICRCGather(ip *IPHeader, hdr []byte, payload [][]byte, pad int) uint32 {
	total := len(hdr) + pad
	for _, p := range payload {
		total += len(p)
	}
	var h [ipv6HeaderLen + udpHeaderLen + BTHLen]byte
	n := icrcPseudo(&h, ip, hdr, total)
	crc := ^crcRaw(crcSeed, h[:n]) // crc32.Update's form: inverted on entry and exit
	if len(hdr) > BTHLen {
		crc = crc32.Update(crc, crc32.IEEETable, hdr[BTHLen:])
	}
	for _, p := range payload {
		crc = crc32.Update(crc, crc32.IEEETable, p)
	}
	if pad > 0 {
		crc = crc32.Update(crc, crc32.IEEETable, zeroPad[:pad])
	}
	return crc
}

// zeroPad is the pad bytes' value. Package level: a local array passed to crc32 would
// escape, an allocation per packet.
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

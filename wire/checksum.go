package wire

import "encoding/binary"

// Checksum adds b to the one's-complement sum s of the Internet checksum (RFC 1071),
// as if b started at an even offset of the checksummed data, 32 bits at a time into a
// 64-bit accumulator, which holds any datagram's sum without folding; fold the total
// with ChecksumFold. Sums of pieces add: the IPv4 header checksum and the UDP checksum
// (its pseudo-header, header and payload) are each one sum, and a sender that keeps the
// share of what stays fixed along a flow adds only what changes (RFC 1624). AppendIPUDP
// and AppendIPUDPPacket compute theirs with it, and so does netio/afxdp, which writes
// the headers of every datagram it sends.
func Checksum(s uint64, b []byte) uint64 {
	for len(b) >= 32 {
		s += uint64(binary.BigEndian.Uint32(b[0:]))
		s += uint64(binary.BigEndian.Uint32(b[4:]))
		s += uint64(binary.BigEndian.Uint32(b[8:]))
		s += uint64(binary.BigEndian.Uint32(b[12:]))
		s += uint64(binary.BigEndian.Uint32(b[16:]))
		s += uint64(binary.BigEndian.Uint32(b[20:]))
		s += uint64(binary.BigEndian.Uint32(b[24:]))
		s += uint64(binary.BigEndian.Uint32(b[28:]))
		b = b[32:]
	}
	for len(b) >= 4 {
		s += uint64(binary.BigEndian.Uint32(b))
		b = b[4:]
	}
	if len(b) >= 2 {
		s += uint64(binary.BigEndian.Uint16(b))
		b = b[2:]
	}
	if len(b) == 1 {
		s += uint64(b[0]) << 8
	}
	return s
}

// ChecksumFold folds a Checksum sum to 16 bits (not inverted: the checksum field is its
// complement).
func ChecksumFold(s uint64) uint16 {
	for s>>16 != 0 {
		s = s&0xffff + s>>16
	}
	return uint16(s)
}

// UDPChecksum is the value of a UDP checksum field whose sum (pseudo-header, header
// with the field 0, payload) is s: its complement, with a computed 0 sent as all ones
// (RFC 768: 0 means no checksum).
func UDPChecksum(s uint64) uint16 {
	c := ^ChecksumFold(s)
	if c == 0 {
		c = 0xffff
	}
	return c
}

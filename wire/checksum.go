package wire

import (
	"encoding/binary"
	"math/bits"
)

// Checksum adds b to the one's-complement sum s of the Internet checksum (RFC 1071),
// as if b started at an even offset of the checksummed data; s holds any datagram's sum
// without folding, in network byte order; fold the total with ChecksumFold. Sums of
// pieces add: the IPv4 header checksum and the UDP checksum (its pseudo-header, header
// and payload) are each one sum, and a sender that keeps the share of what stays fixed
// along a flow adds only what changes (RFC 1624). AppendIPUDP and AppendIPUDPPacket
// compute theirs with it, and so does netio/afxdp, which sums every payload it sends.
//
// It adds little-endian 64-bit words with end-around carry (RFC 1071 section 2: the sum
// is independent of byte order but for a final swap, and 2^64−1 is a multiple of
// 2^16−1, so a 64-bit end-around sum folds to the 16-bit one): a plain 8-byte load and
// an add-with-carry per 8 bytes, chained through the carry flag, where summing big-endian 32-bit words cost a byte swap
// and an add per 4 (the 64 KiB AF_XDP sender spent 8.7% of its CPU in it).
func Checksum(s uint64, b []byte) uint64 {
	var acc, carries, c uint64
	for len(b) >= 64 {
		acc, c = bits.Add64(acc, binary.LittleEndian.Uint64(b[0:]), 0)
		acc, c = bits.Add64(acc, binary.LittleEndian.Uint64(b[8:]), c)
		acc, c = bits.Add64(acc, binary.LittleEndian.Uint64(b[16:]), c)
		acc, c = bits.Add64(acc, binary.LittleEndian.Uint64(b[24:]), c)
		acc, c = bits.Add64(acc, binary.LittleEndian.Uint64(b[32:]), c)
		acc, c = bits.Add64(acc, binary.LittleEndian.Uint64(b[40:]), c)
		acc, c = bits.Add64(acc, binary.LittleEndian.Uint64(b[48:]), c)
		acc, c = bits.Add64(acc, binary.LittleEndian.Uint64(b[56:]), c)
		carries += c
		b = b[64:]
	}
	for len(b) >= 32 {
		acc, c = bits.Add64(acc, binary.LittleEndian.Uint64(b[0:]), 0)
		acc, c = bits.Add64(acc, binary.LittleEndian.Uint64(b[8:]), c)
		acc, c = bits.Add64(acc, binary.LittleEndian.Uint64(b[16:]), c)
		acc, c = bits.Add64(acc, binary.LittleEndian.Uint64(b[24:]), c)
		carries += c
		b = b[32:]
	}
	for len(b) >= 8 {
		acc, c = bits.Add64(acc, binary.LittleEndian.Uint64(b), 0)
		carries += c
		b = b[8:]
	}
	if len(b) > 0 {
		// The tail as one zero-padded little-endian word, built without a copy (a
		// memmove call would cost a 20-byte IPv4 header more than its sum): an odd last
		// byte is the high byte of its 16-bit word (RFC 1071), the low one here,
		// swapped below.
		var w uint64
		shift := uint(0)
		if len(b) >= 4 {
			w, shift, b = uint64(binary.LittleEndian.Uint32(b)), 32, b[4:]
		}
		if len(b) >= 2 {
			w |= uint64(binary.LittleEndian.Uint16(b)) << shift
			shift, b = shift+16, b[2:]
		}
		if len(b) == 1 {
			w |= uint64(b[0]) << shift
		}
		acc, c = bits.Add64(acc, w, 0)
		carries += c
	}
	acc, c = bits.Add64(acc, carries, 0) // 2^64 ≡ 1: each carry out is worth 1
	acc += c
	x := acc>>32 + acc&0xffffffff
	for x > 0xffff {
		x = x>>16 + x&0xffff
	}
	return s + (x>>8 | x&0xff<<8) // to network byte order
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

package wire

import "encoding/binary"

// Recovering the IPv4 Identification from the ICRC.
//
// CRC-32 is affine over GF(2): for messages of equal length,
// crc(m ^ d) = crc(m) ^ raw(d), where raw is the CRC with zero initial value
// and no final inversion, i.e. raw(d) = d(x)·x^32 mod P. The bits we do not
// know sit in bytes 4..6 of the IPv4 header (16 ID bits and DF), followed by
// N = 13 (rest of IPv4) + 8 (UDP) + len(pkt) bytes, so
//
//	ICRC(id, df) ^ ICRC(0, 0) = raw(delta over bytes 4..6) · x^(8N) mod P.
//
// Multiplying the observed difference by x^(-8N) gives a value that depends
// only on the 17 unknown bits, through a fixed 32x17 matrix whose columns
// are independent (a non-zero polynomial of degree < 32 is never a multiple
// of P). Gaussian elimination on those columns is done once at init; per
// packet the work is one ICRC, at most 19 multiplications mod P and 32 XOR
// steps. Polynomials are in the reflected representation of hash/crc32:
// bit 31 is x^0.

const recTrail = ipv4HeaderLen - 7 + udpHeaderLen // bytes after byte 6 of the IPv4 header, before the BTH

// xInv is x^-1 mod P: P = x·Q + 1, so x·Q ≡ 1. In reflected form Q is the
// polynomial shifted down one power (<<1) with x^31 (bit 0) set.
const xInv = crcPoly<<1&0xffffffff | 1

var (
	xInvPow [64]uint32 // x^(-2^k) mod P, enough for any uint64 exponent
	recSlot [32]struct{ v, combo uint32 }
)

// mulMod returns a·b mod P.
func mulMod(a, b uint32) uint32 {
	var p uint32
	for m := uint32(1) << 31; m != 0; m >>= 1 {
		if a&m != 0 {
			p ^= b
		}
		if b&1 != 0 {
			b = b>>1 ^ crcPoly
		} else {
			b >>= 1
		}
	}
	return p
}

func initRecover() {
	xInvPow[0] = xInv
	for k := 1; k < len(xInvPow); k++ {
		xInvPow[k] = mulMod(xInvPow[k-1], xInvPow[k-1])
	}
	// Unknown i < 16 is ID bit i; unknown 16 is DF.
	for i := range 17 {
		var d [3]byte
		if i < 16 {
			binary.BigEndian.PutUint16(d[:], 1<<i)
		} else {
			d[2] = ipv4DF
		}
		v, combo := crcRaw(0, d[:]), uint32(1)<<i
		for b := 31; b >= 0 && v != 0; b-- {
			if v>>b&1 == 0 {
				continue
			}
			if recSlot[b].v == 0 {
				recSlot[b].v, recSlot[b].combo = v, combo
				break
			}
			v ^= recSlot[b].v
			combo ^= recSlot[b].combo
		}
	}
}

// RecoverIPv4ID finds the IPv4 Identification and DF bit that make the ICRC
// at the end of full (BTH..ICRC) match, for a packet received in ip (whose
// ID and DF are ignored). A UDP socket does not show the sender's ID, yet the
// ICRC covers it, and Linux rxe numbers its packets. ok is false when no ID
// and DF produce the transmitted ICRC: the packet is corrupt. For IPv6 there
// is nothing to recover and ok is CheckICRC. It does not allocate.
//
// 16 ID bits and DF leave 15 of the 32 CRC bits as a check, so a corrupt
// packet is accepted with probability 2^-15 — a much weaker check than the
// full ICRC; callers that can see the IP header should use CheckICRC.
func RecoverIPv4ID(ip *IPHeader, full []byte) (id uint16, df bool, ok bool) {
	n := len(full) - ICRCLen
	if n < 0 {
		return 0, false, false
	}
	if !ip.Is4() {
		return 0, false, CheckICRC(ip, full)
	}
	h := *ip
	h.ID, h.DF = 0, false
	diff := ICRC(&h, full[:n]) ^ binary.LittleEndian.Uint32(full[n:])
	// Divide by x^(8N).
	e := uint64(8 * (recTrail + n))
	for k := 0; e != 0; k, e = k+1, e>>1 {
		if e&1 != 0 {
			diff = mulMod(diff, xInvPow[k])
		}
	}
	var combo uint32
	for b := 31; b >= 0; b-- {
		if diff>>b&1 != 0 && recSlot[b].v != 0 {
			diff ^= recSlot[b].v
			combo ^= recSlot[b].combo
		}
	}
	if diff != 0 {
		return 0, false, false
	}
	return uint16(combo), combo>>16&1 != 0, true
}

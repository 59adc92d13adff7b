package afxdp

import (
	"encoding/binary"
	"net/netip"
)

// Frame layout. goverbs builds every header of what it sends (the kernel's stack is
// bypassed) and checks every header of what it receives (a frame from the network is
// hostile: nothing below trusts a length before it is checked against the frame).
const (
	ethHeaderLen  = 14
	ipv4HeaderLen = 20 // no options: RoCEv2's ICRC covers the IPv4 header, and rxe sends none
	ipv6HeaderLen = 40 // no extension headers, likewise
	udpHeaderLen  = 8

	etherTypeIPv4 = 0x0800
	etherTypeIPv6 = 0x86dd
	protoUDP      = 17

	ipv4DF = 0x4000 // in the flags/fragment-offset word

	// DefaultTTL is the IPv4 TTL / IPv6 hop limit of sent datagrams: what Linux rxe and
	// the kernel's UDP sockets send. The ICRC does not cover it.
	DefaultTTL = 64
)

// headerLen is the length of the Ethernet, IP and UDP headers before a datagram's payload.
func headerLen(v6 bool) int {
	if v6 {
		return ethHeaderLen + ipv6HeaderLen + udpHeaderLen
	}
	return ethHeaderLen + ipv4HeaderLen + udpHeaderLen
}

// flowHeader is what every datagram from one source to one destination shares.
type flowHeader struct {
	srcMAC, dstMAC [6]byte
	src, dst       netip.AddrPort
	ttl            uint8
}

// putHeaders writes the Ethernet, IP and UDP headers for a datagram of payloadLen bytes
// into f (headerLen(v6) bytes; the payload already follows them in f). IPv4 goes as the
// kernel sends an unconnected IP_PMTUDISC_DO socket's datagrams, which is what the
// engine computes the ICRC for (netio's IPv4 Identification contract): DF set,
// Identification 0, no options, header checksum filled in. The UDP checksum is computed
// over the pseudo-header and the payload for both families (IPv6 requires it, RFC 8200
// 8.1; for IPv4 it is what the kernel's UDP sockets send, and any receiver, rxe among
// them, accepts it).
func putHeaders(f []byte, h *flowHeader, payloadLen int) {
	v6 := h.dst.Addr().Is6() && !h.dst.Addr().Is4In6()
	copy(f[0:6], h.dstMAC[:])
	copy(f[6:12], h.srcMAC[:])
	udpLen := udpHeaderLen + payloadLen
	var ip, udp []byte
	var sum uint64
	if v6 {
		binary.BigEndian.PutUint16(f[12:], etherTypeIPv6)
		ip = f[ethHeaderLen : ethHeaderLen+ipv6HeaderLen]
		binary.BigEndian.PutUint32(ip[0:], 6<<28)
		binary.BigEndian.PutUint16(ip[4:], uint16(udpLen))
		ip[6] = protoUDP
		ip[7] = h.ttl
		s, d := h.src.Addr().As16(), h.dst.Addr().As16()
		copy(ip[8:24], s[:])
		copy(ip[24:40], d[:])
		sum = checksumAdd(0, ip[8:40])
		udp = f[ethHeaderLen+ipv6HeaderLen:]
	} else {
		binary.BigEndian.PutUint16(f[12:], etherTypeIPv4)
		ip = f[ethHeaderLen : ethHeaderLen+ipv4HeaderLen]
		ip[0] = 0x45
		ip[1] = 0
		binary.BigEndian.PutUint16(ip[2:], uint16(ipv4HeaderLen+udpLen))
		binary.BigEndian.PutUint16(ip[4:], 0) // Identification 0: see netio's IPv4 contract
		binary.BigEndian.PutUint16(ip[6:], ipv4DF)
		ip[8] = h.ttl
		ip[9] = protoUDP
		ip[10], ip[11] = 0, 0
		s, d := h.src.Addr().Unmap().As4(), h.dst.Addr().Unmap().As4()
		copy(ip[12:16], s[:])
		copy(ip[16:20], d[:])
		binary.BigEndian.PutUint16(ip[10:], ^checksumFold(checksumAdd(0, ip)))
		sum = checksumAdd(0, ip[12:20])
		udp = f[ethHeaderLen+ipv4HeaderLen:]
	}
	binary.BigEndian.PutUint16(udp[0:], h.src.Port())
	binary.BigEndian.PutUint16(udp[2:], h.dst.Port())
	binary.BigEndian.PutUint16(udp[4:], uint16(udpLen))
	udp[6], udp[7] = 0, 0
	sum += protoUDP + uint64(udpLen)
	sum = checksumAdd(sum, udp[:udpLen])
	c := ^checksumFold(sum)
	if c == 0 {
		c = 0xffff // 0 means "no checksum" (RFC 768)
	}
	binary.BigEndian.PutUint16(udp[6:], c)
}

// parsed is one received datagram, located in its frame.
type parsed struct {
	src, dst netip.AddrPort
	payload  []byte // a sub-slice of the frame
}

// dropReason says why parseFrame refused a frame; each has a counter (Stats).
type dropReason int

const (
	dropNone      dropReason = iota
	dropMalformed            // too short, lengths inconsistent, bad IPv4 header checksum
	dropNotOurs              // another EtherType, protocol, family, address or port, or a fragment
)

// parseFrame checks an Ethernet frame holding an IPv4 or IPv6 UDP datagram for local
// (the address and port the Conn owns) and locates its payload. It trusts nothing in
// the frame: every length is checked against the frame and against each other. The XDP
// program lets through only what it judged to be for local, but it looks at fewer
// fields, and a later program or a bug must not make this read out of bounds.
//
// The UDP checksum is not verified: RoCEv2's ICRC covers the payload and every UDP
// field but the checksum, and the engine checks it; a datagram from a local veth peer
// also carries only the partial (pseudo-header) sum, the kernel having left the rest to
// an offload that XDP never runs.
func parseFrame(f []byte, local netip.AddrPort) (parsed, dropReason) {
	var p parsed
	if len(f) < ethHeaderLen {
		return p, dropMalformed
	}
	et := binary.BigEndian.Uint16(f[12:])
	ip := f[ethHeaderLen:]
	var udp []byte
	v6 := local.Addr().Is6() && !local.Addr().Is4In6()
	switch {
	case et == etherTypeIPv4 && !v6:
		if len(ip) < ipv4HeaderLen {
			return p, dropMalformed
		}
		if ip[0]>>4 != 4 {
			return p, dropMalformed
		}
		ihl := int(ip[0]&0x0f) * 4
		total := int(binary.BigEndian.Uint16(ip[2:]))
		if ihl < ipv4HeaderLen || total < ihl || total > len(ip) {
			return p, dropMalformed
		}
		if checksumFold(checksumAdd(0, ip[:ihl])) != 0xffff {
			return p, dropMalformed
		}
		if ip[9] != protoUDP || binary.BigEndian.Uint16(ip[6:])&0x3fff != 0 {
			return p, dropNotOurs // another protocol, or a fragment (the kernel reassembles those)
		}
		dst := netip.AddrFrom4([4]byte(ip[16:20]))
		if dst != local.Addr().Unmap() {
			return p, dropNotOurs
		}
		p.src = netip.AddrPortFrom(netip.AddrFrom4([4]byte(ip[12:16])), 0)
		p.dst = netip.AddrPortFrom(dst, 0)
		udp = ip[ihl:total] // Ethernet padding after total is not the datagram's
	case et == etherTypeIPv6 && v6:
		if len(ip) < ipv6HeaderLen {
			return p, dropMalformed
		}
		if ip[0]>>4 != 6 {
			return p, dropMalformed
		}
		plen := int(binary.BigEndian.Uint16(ip[4:]))
		if ipv6HeaderLen+plen > len(ip) {
			return p, dropMalformed
		}
		if ip[6] != protoUDP {
			return p, dropNotOurs // extension headers included: goverbs sends none
		}
		dst := netip.AddrFrom16([16]byte(ip[24:40]))
		if dst != local.Addr().WithZone("") {
			return p, dropNotOurs
		}
		p.src = netip.AddrPortFrom(netip.AddrFrom16([16]byte(ip[8:24])), 0)
		p.dst = netip.AddrPortFrom(dst, 0)
		udp = ip[ipv6HeaderLen : ipv6HeaderLen+plen]
	default:
		return p, dropNotOurs
	}
	if len(udp) < udpHeaderLen {
		return p, dropMalformed
	}
	ulen := int(binary.BigEndian.Uint16(udp[4:]))
	if ulen < udpHeaderLen || ulen > len(udp) {
		return p, dropMalformed
	}
	dport := binary.BigEndian.Uint16(udp[2:])
	if dport != local.Port() {
		return p, dropNotOurs
	}
	p.src = netip.AddrPortFrom(p.src.Addr(), binary.BigEndian.Uint16(udp[0:]))
	p.dst = netip.AddrPortFrom(p.dst.Addr(), dport)
	p.payload = udp[udpHeaderLen:ulen]
	return p, dropNone
}

// checksumAdd adds b to the one's-complement sum s (RFC 1071), 32 bits at a time into a
// 64-bit accumulator; fold the result with checksumFold.
func checksumAdd(s uint64, b []byte) uint64 {
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

// checksumFold folds a checksumAdd sum to 16 bits (not inverted).
func checksumFold(s uint64) uint16 {
	for s>>16 != 0 {
		s = s&0xffff + s>>16
	}
	return uint16(s)
}

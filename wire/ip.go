package wire

import (
	"encoding/binary"
	"errors"
	"net/netip"
)

// Errors from ParseIPUDP.
var (
	ErrIPTruncated = errors.New("wire: IP/UDP datagram truncated")
	ErrIPVersion   = errors.New("wire: not an IPv4 or IPv6 packet")
	ErrIPOptions   = errors.New("wire: IPv4 options not supported by RoCEv2 ICRC")
	ErrIPFragment  = errors.New("wire: IP fragment")
	ErrNotUDP      = errors.New("wire: not a UDP datagram")
	ErrUDPLength   = errors.New("wire: UDP length inconsistent with IP length")
	// ErrMappedAddr: an IPv6 packet with an IPv4-mapped address. Such
	// addresses must not appear on the wire (RFC 4291 2.5.5.2, RFC 5156
	// 2.2), and IPHeader reads them as IPv4, so the ICRC would be
	// computed over the wrong pseudo-header.
	ErrMappedAddr = errors.New("wire: IPv4-mapped address in an IPv6 header")
)

// AppendIPUDP appends a real IPv4 (20 bytes) or IPv6 (40 bytes) header and a
// UDP header for a datagram carrying udpPayloadLen bytes, as Linux rxe sends
// them: IPv4 with its header checksum, TTL ip.TTL (0 means 64), ID and DF as
// given; UDP checksum 0 for IPv4. IPv6 forbids a zero UDP checksum
// (RFC 8200 8.1) and the checksum covers the payload, which this function
// does not see: it writes 0 there, so use AppendIPUDPPacket for IPv6.
func AppendIPUDP(b []byte, ip *IPHeader, udpPayloadLen int) []byte {
	udpLen := udpHeaderLen + udpPayloadLen
	ttl := ip.TTL
	if ttl == 0 {
		ttl = 64
	}
	if ip.Is4() {
		var h [ipv4HeaderLen + udpHeaderLen]byte
		h[0] = 0x45
		h[1] = ip.TOS
		binary.BigEndian.PutUint16(h[2:], uint16(ipv4HeaderLen+udpLen))
		binary.BigEndian.PutUint16(h[4:], ip.ID)
		if ip.DF {
			h[6] = ipv4DF
		}
		h[8] = ttl
		h[9] = protoUDP
		s, d := addr4(ip.Src), addr4(ip.Dst)
		copy(h[12:16], s[:])
		copy(h[16:20], d[:])
		binary.BigEndian.PutUint16(h[10:], ^ChecksumFold(Checksum(0, h[:ipv4HeaderLen])))
		binary.BigEndian.PutUint16(h[20:], ip.SrcPort)
		binary.BigEndian.PutUint16(h[22:], ip.DstPort)
		binary.BigEndian.PutUint16(h[24:], uint16(udpLen))
		return append(b, h[:]...)
	}
	var h [ipv6HeaderLen + udpHeaderLen]byte
	binary.BigEndian.PutUint32(h[0:], 6<<28|uint32(ip.TOS)<<20|ip.FlowLabel&0xfffff)
	binary.BigEndian.PutUint16(h[4:], uint16(udpLen))
	h[6] = protoUDP
	h[7] = ttl
	s, d := addr16(ip.Src), addr16(ip.Dst)
	copy(h[8:24], s[:])
	copy(h[24:40], d[:])
	binary.BigEndian.PutUint16(h[40:], ip.SrcPort)
	binary.BigEndian.PutUint16(h[42:], ip.DstPort)
	binary.BigEndian.PutUint16(h[44:], uint16(udpLen))
	return append(b, h[:]...)
}

// AppendIPUDPPacket appends the IP and UDP headers (see AppendIPUDP) and
// payload, and for IPv6 fills in the UDP checksum (RFC 8200 8.1).
func AppendIPUDPPacket(b []byte, ip *IPHeader, payload []byte) []byte {
	start := len(b)
	b = AppendIPUDP(b, ip, len(payload))
	b = append(b, payload...)
	if !ip.Is4() {
		d := b[start:]
		udp := d[ipv6HeaderLen:]
		// Pseudo-header: addresses, upper-layer length, next header.
		s := Checksum(0, d[8:40])
		s += uint64(len(udp)) + protoUDP
		s = Checksum(s, udp)
		binary.BigEndian.PutUint16(udp[6:], UDPChecksum(s))
	}
	return b
}

// ParseIPUDP reads an IPv4 or IPv6 header and a UDP header from the start of
// a raw IP datagram and returns them with the UDP payload (aliasing b).
// Trailing bytes beyond the IP length (Ethernet padding) are ignored. IPv4
// options, fragments, IPv6 extension headers and IPv4-mapped addresses in
// an IPv6 header are rejected: RoCEv2 never
// uses them and the ICRC could not be computed from an IPHeader. Header
// checksums are not verified (a capture on the sending host often holds a
// checksum the NIC has yet to fill in).
func ParseIPUDP(b []byte) (IPHeader, []byte, error) {
	var ip IPHeader
	if len(b) < 1 {
		return ip, nil, ErrIPTruncated
	}
	var udp []byte
	switch b[0] >> 4 {
	case 4:
		if len(b) < ipv4HeaderLen {
			return ip, nil, ErrIPTruncated
		}
		if b[0]&0x0f != 5 {
			return ip, nil, ErrIPOptions
		}
		tot := int(binary.BigEndian.Uint16(b[2:]))
		if tot < ipv4HeaderLen || tot > len(b) {
			return ip, nil, ErrIPTruncated
		}
		if binary.BigEndian.Uint16(b[6:])&0x3fff != 0 { // MF or offset
			return ip, nil, ErrIPFragment
		}
		if b[9] != protoUDP {
			return ip, nil, ErrNotUDP
		}
		ip.TOS = b[1]
		ip.ID = binary.BigEndian.Uint16(b[4:])
		ip.DF = b[6]&ipv4DF != 0
		ip.TTL = b[8]
		ip.Src = netip.AddrFrom4([4]byte(b[12:16]))
		ip.Dst = netip.AddrFrom4([4]byte(b[16:20]))
		udp = b[ipv4HeaderLen:tot]
	case 6:
		if len(b) < ipv6HeaderLen {
			return ip, nil, ErrIPTruncated
		}
		w := binary.BigEndian.Uint32(b)
		ip.TOS = uint8(w >> 20)
		ip.FlowLabel = w & 0xfffff
		pl := int(binary.BigEndian.Uint16(b[4:]))
		if ipv6HeaderLen+pl > len(b) {
			return ip, nil, ErrIPTruncated
		}
		if b[6] != protoUDP {
			return ip, nil, ErrNotUDP
		}
		ip.TTL = b[7]
		ip.Src = netip.AddrFrom16([16]byte(b[8:24]))
		ip.Dst = netip.AddrFrom16([16]byte(b[24:40]))
		if ip.Src.Is4In6() || ip.Dst.Is4In6() {
			return IPHeader{}, nil, ErrMappedAddr
		}
		udp = b[ipv6HeaderLen : ipv6HeaderLen+pl]
	default:
		return ip, nil, ErrIPVersion
	}
	if len(udp) < udpHeaderLen {
		return ip, nil, ErrIPTruncated
	}
	ul := int(binary.BigEndian.Uint16(udp[4:]))
	if ul < udpHeaderLen || ul > len(udp) {
		return ip, nil, ErrUDPLength
	}
	ip.SrcPort = binary.BigEndian.Uint16(udp[0:])
	ip.DstPort = binary.BigEndian.Uint16(udp[2:])
	return ip, udp[udpHeaderLen:ul:ul], nil
}

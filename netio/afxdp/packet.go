package afxdp

import (
	"encoding/binary"
	"net/netip"

	"github.com/goverbs/goverbs/netio"
	"github.com/goverbs/goverbs/wire"
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

// txTemplate is the Ethernet, IP and UDP headers every datagram to one destination
// shares, built once for it: the IP and UDP part by wire.AppendIPUDP (the one
// implementation of the headers goverbs sends; the UDP backend's kernel writes the same
// fields), with the one's-complement sums of the fields that stay put. A datagram copies
// it and patches what is its own: the lengths, the ECN bits and the two checksums, which
// it completes from the kept sums (RFC 1624), summing only its payload.
//
// IPv4 goes as the kernel sends an unconnected IP_PMTUDISC_DO socket's datagrams, which
// is what the engine computes the ICRC for (netio's IPv4 Identification contract): DF
// set, Identification 0, no options, header checksum filled in. The UDP checksum is
// computed for both families (IPv6 requires it, RFC 8200 8.1; for IPv4 it is what the
// kernel's UDP sockets send, and any receiver, rxe among them, accepts it).
type txTemplate struct {
	dst    netip.AddrPort
	dstMAC [6]byte
	v6     bool
	n      int // header bytes: headerLen(v6)
	hdr    [ethHeaderLen + ipv6HeaderLen + udpHeaderLen]byte
	ipSum  uint64 // IPv4: the header's sum with total length, TOS and checksum 0
	udpSum uint64 // the pseudo-header's addresses and protocol and the UDP ports
}

// build makes t the template for datagrams from src (srcMAC) to dst (dstMAC).
func (t *txTemplate) build(srcMAC, dstMAC [6]byte, src, dst netip.AddrPort, ttl uint8) {
	a := dst.Addr()
	t.v6 = a.Is6() && !a.Is4In6()
	t.dst, t.dstMAC = dst, dstMAC
	b := append(t.hdr[:0], dstMAC[:]...)
	b = append(b, srcMAC[:]...)
	et := uint16(etherTypeIPv4)
	if t.v6 {
		et = etherTypeIPv6
	}
	b = binary.BigEndian.AppendUint16(b, et)
	ip := wire.IPHeader{Src: src.Addr(), Dst: a, SrcPort: src.Port(), DstPort: dst.Port(), DF: !t.v6, TTL: ttl}
	b = wire.AppendIPUDP(b, &ip, 0)
	t.n = len(b)
	h := t.hdr[ethHeaderLen:t.n]
	var udp []byte
	if t.v6 {
		binary.BigEndian.PutUint16(h[4:], 0) // payload length: per datagram
		t.udpSum = wire.Checksum(0, h[8:40])
		udp = h[ipv6HeaderLen:]
	} else {
		binary.BigEndian.PutUint16(h[2:], 0)  // total length: per datagram
		binary.BigEndian.PutUint16(h[10:], 0) // header checksum: per datagram
		t.ipSum = wire.Checksum(0, h[:ipv4HeaderLen])
		t.udpSum = wire.Checksum(0, h[12:20])
		udp = h[ipv4HeaderLen:]
	}
	binary.BigEndian.PutUint16(udp[4:], 0) // length: per datagram
	binary.BigEndian.PutUint16(udp[6:], 0)
	t.udpSum = wire.Checksum(t.udpSum+protoUDP, udp[:4])
}

// put writes the headers for a datagram of payloadLen bytes leaving with DS field ds
// (netio.DSField: the traffic class's DSCP and the ECN codepoint) into f, whose payload
// already follows the t.n header bytes: the template, then the lengths, the DS field
// (the IPv4 TOS byte, or the IPv6 traffic class, RFC 8200 section 3; the ECN bits are
// its low two, RFC 3168 section 5) and the checksums, from the kept sums and the
// payload's.
func (t *txTemplate) put(f []byte, payloadLen int, ds uint8) {
	copy(f, t.hdr[:t.n])
	udpLen := udpHeaderLen + payloadLen
	ip := f[ethHeaderLen:]
	var udp []byte
	if t.v6 {
		ip[0] |= ds >> 4 // the traffic class is bits 4-11 of the first word
		ip[1] |= ds << 4
		binary.BigEndian.PutUint16(ip[4:], uint16(udpLen))
		udp = ip[ipv6HeaderLen:]
	} else {
		total := ipv4HeaderLen + udpLen
		ip[1] = ds
		binary.BigEndian.PutUint16(ip[2:], uint16(total))
		binary.BigEndian.PutUint16(ip[10:], ^wire.ChecksumFold(t.ipSum+uint64(total)+uint64(ds)))
		udp = ip[ipv4HeaderLen:]
	}
	binary.BigEndian.PutUint16(udp[4:], uint16(udpLen))
	// The UDP length counts twice: in the pseudo-header and in the header.
	sum := wire.Checksum(t.udpSum+2*uint64(udpLen), udp[udpHeaderLen:udpLen])
	binary.BigEndian.PutUint16(udp[6:], wire.UDPChecksum(sum))
}

// parsed is one received datagram, located in its frame.
type parsed struct {
	src, dst netip.AddrPort
	payload  []byte // a sub-slice of the frame
	ecn      netio.ECN
	tc       uint8 // the DS field's DSCP (its ECN bits cleared)
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
		if wire.ChecksumFold(wire.Checksum(0, ip[:ihl])) != 0xffff {
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
		p.ecn = netio.ECN(ip[1]) & netio.ECNMask // the TOS byte's low bits (RFC 3168 section 5)
		p.tc = ip[1] &^ netio.ECNMask
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
		ds := ip[0]<<4 | ip[1]>>4 // the traffic class: bits 4-11 (RFC 8200 section 3)
		p.ecn, p.tc = netio.ECN(ds)&netio.ECNMask, ds&^netio.ECNMask
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

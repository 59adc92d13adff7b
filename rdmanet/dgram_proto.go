package rdmanet

import (
	"encoding/binary"
	"net/netip"
)

// rsockets' datagram headers (rdma-core's librdmacm/docs/rsocket, "UDP Message Format";
// docs/guide/cm-rdmanet.md, "Datagram rsockets"). Every field is big-endian.
//
// Before a peer's QPN is known, a datagram goes over the UDP socket behind a UDP header:
//
//	0..3   tag 0x55555555
//	4      IP version: 4 or 6
//	5      op: 0 data (user data follows; the receiver answers with a control
//	       message), 7 control (no data: the sender's QPN, for the receiver's replies)
//	6      the header's length: 16 (IPv4) or 28 (IPv6)
//	7      reserved
//	8..11  the sender's UD QPN (its low 24 bits)
//	12..   the sender's IP address (4 or 16 bytes)
//
// The sender's UDP address is the datagram's source. Once the QPN is known, a datagram
// is a UD SEND (Q_Key 0x01234567) behind a UD header naming the sender's socket:
//
//	0      IP version: 4 or 6
//	1      the header's length: 8 (IPv4) or 24 (IPv6)
//	2..3   the sender's UDP port
//	4..    IPv4: its address; IPv6: its flow label (4), then its address (16)
const (
	udpTag     = 0x55555555
	udpHdrLen4 = 16
	udpHdrLen6 = 28
	udHdrLen4  = 8
	udHdrLen6  = 24
	dgOpData   = 0
	dgOpCtrl   = 7
	// dgSlot is the most a datagram may be with its header: rsockets' receive buffers
	// (RS_SNDLOWAT), over UDP and UD alike.
	dgSlot = 2048
	// grhLen is the GRH area before every UD receive.
	grhLen = 40
	// udpQKey is the Q_Key of rdma_cm's UDP port space (RDMA_UDP_QKEY).
	udpQKey = 0x01234567
)

// udpHdrLen is the UDP header's length for a socket of addr's family.
func udpHdrLen(addr netip.Addr) int {
	if addr.Is4() {
		return udpHdrLen4
	}
	return udpHdrLen6
}

// putUDPHeader writes the UDP header of op from the socket at local, QP qpn, into b
// (long enough) and returns its length.
func putUDPHeader(b []byte, op uint8, qpn uint32, local netip.Addr) int {
	n := udpHdrLen(local)
	binary.BigEndian.PutUint32(b[0:], udpTag)
	b[4], b[5], b[6], b[7] = 6, op, byte(n), 0
	if local.Is4() {
		b[4] = 4
	}
	binary.BigEndian.PutUint32(b[8:], qpn&0xFFFFFF)
	if local.Is4() {
		a := local.As4()
		copy(b[12:16], a[:])
	} else {
		a := local.As16()
		copy(b[12:28], a[:])
	}
	return n
}

// parseUDPHeader checks a datagram from the UDP socket of a socket of family v4 (or
// not): the op, the sender's QPN and the header's length, or ok false for anything
// that is not a well-formed header (dropped).
func parseUDPHeader(b []byte, v4 bool) (op uint8, qpn uint32, n int, ok bool) {
	want, ver := udpHdrLen6, byte(6)
	if v4 {
		want, ver = udpHdrLen4, 4
	}
	if len(b) < want || binary.BigEndian.Uint32(b) != udpTag || b[4] != ver || int(b[6]) != want {
		return 0, 0, 0, false
	}
	if b[5] != dgOpData && b[5] != dgOpCtrl {
		return 0, 0, 0, false
	}
	return b[5], binary.BigEndian.Uint32(b[8:]) & 0xFFFFFF, want, true
}

// putUDHeader writes the UD header naming from into b and returns its length.
func putUDHeader(b []byte, from netip.AddrPort) int {
	binary.BigEndian.PutUint16(b[2:], from.Port())
	if from.Addr().Is4() {
		a := from.Addr().As4()
		b[0], b[1] = 4, udHdrLen4
		copy(b[4:8], a[:])
		return udHdrLen4
	}
	a := from.Addr().As16()
	b[0], b[1] = 6, udHdrLen6
	binary.BigEndian.PutUint32(b[4:], 0) // flow label
	copy(b[8:24], a[:])
	return udHdrLen6
}

// parseUDHeader checks the UD header of a received datagram for a socket of family v4
// (or not): the sender and the header's length, or ok false (dropped).
func parseUDHeader(b []byte, v4 bool) (from netip.AddrPort, n int, ok bool) {
	if len(b) < udHdrLen4 {
		return netip.AddrPort{}, 0, false
	}
	port := binary.BigEndian.Uint16(b[2:])
	switch {
	case v4 && b[0] == 4 && b[1] == udHdrLen4:
		return netip.AddrPortFrom(netip.AddrFrom4([4]byte(b[4:8])), port), udHdrLen4, true
	case !v4 && b[0] == 6 && b[1] == udHdrLen6 && len(b) >= udHdrLen6:
		return netip.AddrPortFrom(netip.AddrFrom16([16]byte(b[8:24])), port), udHdrLen6, true
	}
	return netip.AddrPort{}, 0, false
}

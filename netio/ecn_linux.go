package netio

import "golang.org/x/sys/unix"

// The ECN codepoint through a kernel UDP socket's control messages, for backends that
// keep a kernel socket beside their own path (netio/afxdp's local path and multicast
// groups) and read and write them as the UDP backend does.

// SetRecvECN asks the kernel for the ECN bits of each datagram the UDP socket fd
// receives (IP_RECVTOS, or IPV6_RECVTCLASS on an IPv6 socket), delivered as a control
// message that ECNFromCmsgs reads. It reports whether the kernel agreed.
func SetRecvECN(fd int, v6 bool) bool { return recvECN(fd, v6) }

// ECNFromCmsgs returns the ECN codepoint in a received datagram's control messages
// (IP_TOS or IPV6_TCLASS), or ECNNotECT when there is none. A malformed list ends the
// parse; nothing in it is trusted.
func ECNFromCmsgs(oob []byte) ECN {
	_, ds := parseRecvCmsgs(oob)
	return ECN(ds) & ECNMask
}

// DSFromCmsgs returns the whole DS field (DSCP and ECN bits) in a received datagram's
// control messages, or 0 when there is none.
func DSFromCmsgs(oob []byte) uint8 {
	_, ds := parseRecvCmsgs(oob)
	return ds
}

// ECNCmsgSpace is the control buffer space PutECNCmsg writes.
func ECNCmsgSpace() int { return unix.CmsgSpace(4) }

// PutECNCmsg writes into b (at least ECNCmsgSpace bytes) the control message that sends
// a datagram with ECN codepoint ecn and DSCP 0: IP_TOS on an IPv4 socket, IPV6_TCLASS
// on an IPv6 one. It returns the space used.
func PutECNCmsg(b []byte, v6 bool, ecn ECN) int { return PutDSCmsg(b, v6, DSField(0, ecn)) }

// PutDSCmsg is PutECNCmsg for a whole DS field (DSField: a traffic class's DSCP and an
// ECN codepoint).
func PutDSCmsg(b []byte, v6 bool, ds uint8) int {
	c := udpConn{v6: v6}
	return c.putTOSCmsg(b, ds)
}

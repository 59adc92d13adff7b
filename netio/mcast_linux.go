//go:build linux

// Multicast on the Linux UDP backend: a group's own receive socket, bound to the group's
// address and the Conn's port and joined on the interface of the Conn's address, read
// like the Conn's own (recvmmsg, in the netpoller); and the send socket's multicast
// options.

package netio

import (
	"fmt"
	"net"
	"net/netip"

	"golang.org/x/sys/unix"
)

// mcastTTL is the IPv4 TTL (IPv6 hop limit) of multicast datagrams: rdma_cm's hop limit
// for a RoCEv2 group (IPV6_DEFAULT_HOPLIMIT in the kernel's cma_iboe_join_multicast),
// and what unicast datagrams carry. The kernel's default for multicast is 1. The ICRC
// does not cover it.
const mcastTTL = 64

// setMulticastSend makes the send socket send multicast out of the interface of its
// own address and loop it back to this host's members (the default, said outright):
// local receivers, other devices of this process among them, are members like any.
// Linux would route an IPv4 group out of the source address's interface anyway; the
// option makes it explicit. Best effort: a socket that refuses still sends unicast.
func setMulticastSend(fd int, local netip.Addr, v6 bool) {
	if v6 {
		if ifi := interfaceOf(local); ifi != 0 {
			_ = unix.SetsockoptInt(fd, unix.IPPROTO_IPV6, unix.IPV6_MULTICAST_IF, ifi)
		}
		_ = unix.SetsockoptInt(fd, unix.IPPROTO_IPV6, unix.IPV6_MULTICAST_HOPS, mcastTTL)
		_ = unix.SetsockoptInt(fd, unix.IPPROTO_IPV6, unix.IPV6_MULTICAST_LOOP, 1)
		return
	}
	if !local.IsUnspecified() {
		_ = unix.SetsockoptIPMreqn(fd, unix.IPPROTO_IP, unix.IP_MULTICAST_IF, &unix.IPMreqn{Address: local.As4()})
	}
	_ = unix.SetsockoptInt(fd, unix.IPPROTO_IP, unix.IP_MULTICAST_TTL, mcastTTL)
	_ = unix.SetsockoptInt(fd, unix.IPPROTO_IP, unix.IP_MULTICAST_LOOP, 1)
}

// interfaceOf is the index of the interface that holds addr, 0 if none does.
func interfaceOf(addr netip.Addr) int {
	ifi, _ := InterfaceOf(addr)
	return ifi.Index
}

// JoinGroup joins the IP multicast group on the interface of c's address and returns a
// Conn that reads the datagrams sent to the group at c's port (Multicaster).
//
// A socket bound to a unicast address never sees a multicast datagram (Linux delivers
// one to the sockets bound to its group address or to the wildcard), so the group gets a
// socket of its own, bound to group:port with SO_REUSEADDR (every member on this host
// binds the same address: each gets a copy), IP_MULTICAST_ALL off (only the groups this
// socket joined), and the membership (IP_ADD_MEMBERSHIP or IPV6_JOIN_GROUP) on c's
// interface. Closing the socket leaves the group. No privilege is needed, and on
// loopback no interface change either.
func (c *udpConn) JoinGroup(group netip.Addr) (Conn, error) {
	group = group.Unmap()
	if !group.IsMulticast() || group.Is4() == c.v6 {
		return nil, fmt.Errorf("netio: join %v: not a multicast group of the socket's family", group)
	}
	if c.closed.Load() {
		return nil, net.ErrClosed
	}
	g := &groupConn{udpConn: &udpConn{v6: c.v6}, parent: c}
	local := c.local.Addr()
	ifindex := 0
	if c.v6 {
		if ifindex = interfaceOf(local); ifindex == 0 && !local.IsUnspecified() {
			return nil, fmt.Errorf("netio: join %v: no interface holds %v", group, local)
		}
	}
	setup := func(fd int) error {
		if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_REUSEADDR, 1); err != nil {
			return fmt.Errorf("SO_REUSEADDR: %w", err)
		}
		g.rcvBuf = setBuf(fd, unix.SO_RCVBUFFORCE, unix.SO_RCVBUF, c.rcvWant)
		if c.ecn {
			g.ecn = recvECN(fd, c.v6) // as the parent was opened: only where something reads ECN
		}
		if c.v6 {
			acceptZeroChecksum6(fd)
			_ = unix.SetsockoptInt(fd, unix.IPPROTO_IPV6, unix.IPV6_MULTICAST_ALL, 0)
			mreq := &unix.IPv6Mreq{Multiaddr: group.As16(), Interface: uint32(ifindex)}
			if err := unix.SetsockoptIPv6Mreq(fd, unix.IPPROTO_IPV6, unix.IPV6_JOIN_GROUP, mreq); err != nil {
				return fmt.Errorf("IPV6_JOIN_GROUP: %w", err)
			}
			return nil
		}
		_ = unix.SetsockoptInt(fd, unix.IPPROTO_IP, unix.IP_MULTICAST_ALL, 0)
		mreq := &unix.IPMreqn{Multiaddr: group.As4()}
		if !local.IsUnspecified() {
			mreq.Address = local.As4()
		}
		if err := unix.SetsockoptIPMreqn(fd, unix.IPPROTO_IP, unix.IP_ADD_MEMBERSHIP, mreq); err != nil {
			return fmt.Errorf("IP_ADD_MEMBERSHIP: %w", err)
		}
		return nil
	}
	// Bound here, not by package net: it binds a multicast address's port on the
	// wildcard address instead, which collides with c's own socket.
	fd, _, err := openRaw(netip.AddrPortFrom(group, c.local.Port()), c.v6, setup)
	if err != nil {
		return nil, fmt.Errorf("netio: join %v on %v: %w", group, local, err)
	}
	if g.er, err = newEpollRecv(fd); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("netio: join %v on %v: %w", group, local, err)
	}
	g.rc = g.er
	g.local = netip.AddrPortFrom(group, c.local.Port())
	g.src = c.src
	g.rcvWant = c.rcvWant
	g.initRecv()
	g.r.fn = g.recvFn
	g.r.onceFn = g.recvOnceFn
	return g, nil
}

// groupConn reads one multicast group's datagrams (udpConn's receive side, without a
// send socket of its own); it sends through the Conn that joined.
type groupConn struct {
	*udpConn
	parent *udpConn
}

// WriteBatch sends through the parent's send socket.
func (g *groupConn) WriteBatch(msgs []Message) (int, error) { return g.parent.WriteBatch(msgs) }

// Caps are the receive side's: no GRO on a group socket (its datagrams are UD
// messages, one MTU each at most), ECN only if both sockets do it, and the
// parent's sending.
func (g *groupConn) Caps() Caps {
	caps := g.parent.Caps()
	caps.GRO, caps.GROBufSize = false, 0
	caps.RecvBuf, caps.RecvBufWanted = g.rcvBuf, 2*g.rcvWant
	caps.ECN = caps.ECN && g.ecn // sent by the parent, reported by the group's socket
	return caps
}

// Close leaves the group: the kernel drops a socket's memberships with it.
func (g *groupConn) Close() error {
	if g.closed.Swap(true) {
		return net.ErrClosed
	}
	return g.closeRecv()
}

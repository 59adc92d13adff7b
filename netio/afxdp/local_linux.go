//go:build linux

package afxdp

import (
	"fmt"
	"net/netip"
	"strconv"
	"unsafe"

	"github.com/goverbs/goverbs/netio"
	"golang.org/x/sys/unix"
)

// The local path: a kernel UDP socket bound to the Conn's own address and port, beside
// the AF_XDP socket. A NIC never hands a packet back to its own host, so a datagram to
// an address of this host (another device here, or the device itself: a QP connected to
// its own GID) goes through the kernel's stack instead, and this socket receives what
// the kernel's stack delivers to the address and port: datagrams from this host, and
// those the program passed up (ones that arrived on another queue of a multi-queue NIC,
// fragments the kernel reassembled). It sends with IP_PMTUDISC_DO on an unconnected
// socket, so IPv4 datagrams carry DF and Identification 0, and from the Conn's own port:
// exactly what the ICRC was computed for (netio's contract, as the UDP backend keeps
// it). It is the slow path: read when the ring is empty (see Conn.receive).
type localPath struct {
	fd     int
	v6     bool
	name   unix.RawSockaddrInet6 // recvfrom's sender; the receive lock guards it
	dst    unix.RawSockaddrInet6 // sendto's destination; the send lock guards it and buf
	buf    []byte                // a gathered datagram (Message.Iov)
	roob   [64]byte              // recvmsg's control messages (the ECN bits); the receive lock guards it
	soob   [64]byte              // sendmsg's (the ECN codepoint to send); the send lock guards it
	local  netip.AddrPort
	polled uint32 // empty busy polls since the socket was last read
}

// localRecvBuf is the local path's receive buffer.
const localRecvBuf = 4 << 20

// mcastTTL is the IPv4 TTL (IPv6 hop limit) of multicast datagrams: what unicast ones
// carry, and rdma_cm's hop limit for a RoCEv2 group (the kernel's default is 1).
const mcastTTL = 64

// openLocalPath binds a UDP socket to local on interface ifindex. It fails where another
// socket holds the address and port (a kernel rxe device binds port 4791 on every
// address, for one). Multicast leaves through it too (see Conn.JoinGroup): out of the
// interface, and looped back to this host's members.
func openLocalPath(local netip.AddrPort, ifindex int) (*localPath, error) {
	v6 := local.Addr().Is6()
	domain := unix.AF_INET
	if v6 {
		domain = unix.AF_INET6
	}
	fd, err := unix.Socket(domain, unix.SOCK_DGRAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, unix.IPPROTO_UDP)
	if err != nil {
		return nil, err
	}
	l := &localPath{fd: fd, v6: v6, local: local}
	fail := func(what string, err error) (*localPath, error) {
		unix.Close(fd)
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	var sa unix.Sockaddr
	if v6 {
		_ = unix.SetsockoptInt(fd, unix.IPPROTO_IPV6, unix.IPV6_V6ONLY, 1)
		_ = unix.SetsockoptInt(fd, unix.IPPROTO_UDP, unix.UDP_NO_CHECK6_RX, 1) // rxe sends checksum 0
		if err := unix.SetsockoptInt(fd, unix.IPPROTO_IPV6, unix.IPV6_MTU_DISCOVER, unix.IPV6_PMTUDISC_DO); err != nil {
			return fail("IPV6_MTU_DISCOVER", err)
		}
		sa6 := &unix.SockaddrInet6{Port: int(local.Port()), Addr: local.Addr().As16()}
		if z := local.Addr().Zone(); z != "" {
			if id, err := strconv.Atoi(z); err == nil {
				sa6.ZoneId = uint32(id)
			}
		}
		sa = sa6
	} else {
		if err := unix.SetsockoptInt(fd, unix.IPPROTO_IP, unix.IP_MTU_DISCOVER, unix.IP_PMTUDISC_DO); err != nil {
			return fail("IP_MTU_DISCOVER", err)
		}
		sa = &unix.SockaddrInet4{Port: int(local.Port()), Addr: local.Addr().As4()}
	}
	if v6 {
		_ = unix.SetsockoptInt(fd, unix.IPPROTO_IPV6, unix.IPV6_MULTICAST_IF, ifindex)
		_ = unix.SetsockoptInt(fd, unix.IPPROTO_IPV6, unix.IPV6_MULTICAST_HOPS, mcastTTL)
		_ = unix.SetsockoptInt(fd, unix.IPPROTO_IPV6, unix.IPV6_MULTICAST_LOOP, 1)
	} else {
		_ = unix.SetsockoptIPMreqn(fd, unix.IPPROTO_IP, unix.IP_MULTICAST_IF, &unix.IPMreqn{Address: local.Addr().As4(), Ifindex: int32(ifindex)})
		_ = unix.SetsockoptInt(fd, unix.IPPROTO_IP, unix.IP_MULTICAST_TTL, mcastTTL)
		_ = unix.SetsockoptInt(fd, unix.IPPROTO_IP, unix.IP_MULTICAST_LOOP, 1)
	}
	if unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, localRecvBuf) != nil {
		_ = unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUF, localRecvBuf)
	}
	// The ECN bits of what arrives, for Message.ECN (Caps.ECN): this is the slow path,
	// and a TOS control message per datagram is the price of honest Caps.
	netio.SetRecvECN(fd, v6)
	if err := unix.Bind(fd, sa); err != nil {
		return fail("bind", err)
	}
	return l, nil
}

func (l *localPath) close() { unix.Close(l.fd) }

// recv reads queued datagrams into msgs without waiting and reports how many it read,
// with the ECN codepoint each arrived with. A datagram longer than its buffer is cut to
// it.
func (l *localPath) recv(msgs []netio.Message) int {
	n := 0
	var iov unix.Iovec
	var h unix.Msghdr
	for n < len(msgs) {
		m := &msgs[n]
		iov.Base, iov.Len = nil, 0
		if len(m.Buf) > 0 {
			iov.Base = &m.Buf[0]
			iov.SetLen(len(m.Buf))
		}
		h = unix.Msghdr{Name: (*byte)(unsafe.Pointer(&l.name)), Namelen: unix.SizeofSockaddrInet6,
			Iov: &iov, Iovlen: 1, Control: &l.roob[0]}
		h.SetControllen(len(l.roob))
		got, _, e := unix.RawSyscall(unix.SYS_RECVMSG, uintptr(l.fd), uintptr(unsafe.Pointer(&h)),
			unix.MSG_DONTWAIT|unix.MSG_TRUNC)
		if e == unix.EINTR {
			continue
		}
		if e != 0 {
			break // EAGAIN: nothing more; any other error: the next read will say it again
		}
		m.N = min(int(got), len(m.Buf))
		m.SegSize = 0
		m.Addr = l.from()
		m.ECN = netio.ECNFromCmsgs(l.roob[:min(int(h.Controllen), len(l.roob))])
		n++
	}
	return n
}

// from decodes recvfrom's sender address.
func (l *localPath) from() netip.AddrPort {
	p := (*[2]byte)(unsafe.Pointer(&l.name.Port))
	port := uint16(p[0])<<8 | uint16(p[1])
	if l.name.Family == unix.AF_INET {
		s4 := (*unix.RawSockaddrInet4)(unsafe.Pointer(&l.name))
		return netip.AddrPortFrom(netip.AddrFrom4(s4.Addr), port)
	}
	return netip.AddrPortFrom(netip.AddrFrom16(l.name.Addr), port)
}

// send sends bytes [off, off+size) of m to dst through the kernel. On a full socket
// buffer it waits for room a little (10 ms), then gives up on the datagram.
func (l *localPath) send(m *netio.Message, off, size int, dst netip.AddrPort) error {
	var data []byte
	if m.Iov == nil {
		data = m.Buf[off : off+size]
	} else {
		if cap(l.buf) < size {
			l.buf = make([]byte, size)
		}
		data = l.buf[:size]
		m.CopyData(data, off)
	}
	salen := l.putDst(dst)
	var p uintptr
	if len(data) > 0 {
		p = uintptr(unsafe.Pointer(&data[0]))
	}
	// A codepoint other than Not-ECT goes in a control message (sendmsg), as the UDP
	// backend sends it; Not-ECT, the socket's default, needs none (sendto).
	var iov unix.Iovec
	var h unix.Msghdr
	ecn := m.ECN & netio.ECNMask
	if ecn != netio.ECNNotECT {
		if len(data) > 0 {
			iov.Base = &data[0]
			iov.SetLen(len(data))
		}
		h = unix.Msghdr{Name: (*byte)(unsafe.Pointer(&l.dst)), Namelen: salen, Iov: &iov, Iovlen: 1, Control: &l.soob[0]}
		h.SetControllen(netio.PutECNCmsg(l.soob[:], l.v6, ecn))
	}
	for tries := 0; ; tries++ {
		var e unix.Errno
		if ecn != netio.ECNNotECT {
			_, _, e = unix.RawSyscall(unix.SYS_SENDMSG, uintptr(l.fd), uintptr(unsafe.Pointer(&h)), unix.MSG_DONTWAIT)
		} else {
			_, _, e = unix.RawSyscall6(unix.SYS_SENDTO, uintptr(l.fd), p, uintptr(len(data)), unix.MSG_DONTWAIT,
				uintptr(unsafe.Pointer(&l.dst)), uintptr(salen))
		}
		switch {
		case e == 0:
			return nil
		case e == unix.EINTR:
			continue
		case e == unix.EAGAIN && tries == 0:
			pfd := [1]unix.PollFd{{Fd: int32(l.fd), Events: unix.POLLOUT}}
			_, _ = unix.Poll(pfd[:], 10)
			continue
		}
		return e
	}
}

// putDst encodes dst into the send scratch address and returns its length.
func (l *localPath) putDst(dst netip.AddrPort) uint32 {
	port := dst.Port()
	if !l.v6 {
		s4 := (*unix.RawSockaddrInet4)(unsafe.Pointer(&l.dst))
		s4.Family = unix.AF_INET
		p := (*[2]byte)(unsafe.Pointer(&s4.Port))
		p[0], p[1] = byte(port>>8), byte(port)
		s4.Addr = dst.Addr().Unmap().As4()
		s4.Zero = [8]byte{}
		return unix.SizeofSockaddrInet4
	}
	l.dst.Family = unix.AF_INET6
	p := (*[2]byte)(unsafe.Pointer(&l.dst.Port))
	p[0], p[1] = byte(port>>8), byte(port)
	l.dst.Flowinfo = 0
	l.dst.Addr = dst.Addr().As16()
	l.dst.Scope_id = 0
	return unix.SizeofSockaddrInet6
}

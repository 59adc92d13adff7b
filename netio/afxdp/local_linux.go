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
	roob   [64]byte              // recvmsg's control messages (the ECN bits); the receive lock guards it
	batch  localBatch            // what WriteBatch sends (flush); the send lock guards it
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
		ds := netio.DSFromCmsgs(l.roob[:min(int(h.Controllen), len(l.roob))])
		m.ECN, m.TrafficClass = netio.ECN(ds)&netio.ECNMask, ds&^netio.ECNMask
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

// localBatch is the datagrams a WriteBatch sends through the local path, gathered for
// one sendmmsg: a sendto per datagram made host-local traffic a syscall per packet
// where the UDP backend makes one per batch. The send lock guards it.
type localBatch struct {
	hdrs  [batchSize]unix.Mmsghdr
	iovs  [batchSize]unix.Iovec
	addrs [batchSize]unix.RawSockaddrInet6
	oob   [batchSize][32]byte // an IP_TOS / IPV6_TCLASS control message (netio.PutDSCmsg)
	gath  [batchSize][]byte   // a gathered datagram's bytes (Message.Iov), kept to be reused
	mi    [batchSize]int      // the message each datagram is part of, for its error
	n     int
}

// add queues bytes [off, off+size) of m, message mi of the batch, for dst, with m's
// traffic class and ECN codepoint (a control message unless both are 0, the socket's
// default). It reports whether
// the batch is full: then flush it before adding more. m's bytes must stay put until the
// flush (WriteBatch's caller holds them until it returns).
func (l *localPath) add(m *netio.Message, off, size int, dst netip.AddrPort, mi int) bool {
	b := &l.batch
	i := b.n
	var data []byte
	if m.Iov == nil {
		data = m.Buf[off : off+size]
	} else {
		if cap(b.gath[i]) < size {
			b.gath[i] = make([]byte, size)
		}
		data = b.gath[i][:size]
		m.CopyData(data, off)
	}
	iov := &b.iovs[i]
	iov.Base, iov.Len = nil, 0
	if len(data) > 0 {
		iov.Base = &data[0]
		iov.SetLen(len(data))
	}
	h := &b.hdrs[i]
	h.Hdr = unix.Msghdr{Name: (*byte)(unsafe.Pointer(&b.addrs[i])), Namelen: putSockaddr(&b.addrs[i], dst, l.v6),
		Iov: iov, Iovlen: 1}
	h.Len = 0
	if ds := netio.DSField(m.TrafficClass, m.ECN); ds != 0 {
		h.Hdr.Control = &b.oob[i][0]
		h.Hdr.SetControllen(netio.PutDSCmsg(b.oob[i][:], l.v6, ds))
	}
	b.mi[i] = mi
	b.n++
	return b.n == len(b.hdrs)
}

// flush sends the queued datagrams with sendmmsg, as few calls as the kernel lets it,
// and reports how many left and how many calls it made; fail hears of each datagram the
// kernel refused (with the index of its message). On a full socket buffer it waits for
// room once (up to 10 ms), then gives up on the datagram at the head and goes on.
func (l *localPath) flush(fail func(mi int, err error)) (sent, calls int) {
	b := &l.batch
	waited := false
	for i := 0; i < b.n; {
		r, _, e := unix.RawSyscall6(unix.SYS_SENDMMSG, uintptr(l.fd), uintptr(unsafe.Pointer(&b.hdrs[i])), uintptr(b.n-i),
			unix.MSG_DONTWAIT, 0, 0)
		calls++
		switch {
		case e == 0:
			sent += int(r)
			i += int(r)
		case e == unix.EINTR:
		case e == unix.EAGAIN && !waited:
			waited = true
			pfd := [1]unix.PollFd{{Fd: int32(l.fd), Events: unix.POLLOUT}}
			_, _ = unix.Poll(pfd[:], 10)
		default:
			// sendmmsg fails only on its first datagram (a later failure ends the call
			// with the count before it): that one is refused, the rest go on.
			fail(b.mi[i], e)
			i++
		}
	}
	for i := range b.n {
		b.iovs[i].Base = nil // keep no caller's buffer alive
	}
	b.n = 0
	return sent, calls
}

// putSockaddr encodes dst into sa for a socket of the family v6 says and returns its
// length.
func putSockaddr(sa *unix.RawSockaddrInet6, dst netip.AddrPort, v6 bool) uint32 {
	port := dst.Port()
	if !v6 {
		s4 := (*unix.RawSockaddrInet4)(unsafe.Pointer(sa))
		s4.Family = unix.AF_INET
		p := (*[2]byte)(unsafe.Pointer(&s4.Port))
		p[0], p[1] = byte(port>>8), byte(port)
		s4.Addr = dst.Addr().Unmap().As4()
		s4.Zero = [8]byte{}
		return unix.SizeofSockaddrInet4
	}
	sa.Family = unix.AF_INET6
	p := (*[2]byte)(unsafe.Pointer(&sa.Port))
	p[0], p[1] = byte(port>>8), byte(port)
	sa.Flowinfo = 0
	sa.Addr = dst.Addr().As16()
	sa.Scope_id = 0
	return unix.SizeofSockaddrInet6
}

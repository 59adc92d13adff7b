//go:build linux

// Opening the Linux UDP backend: the Conn's state, its two sockets and their options
// (path MTU discovery, buffer sizes, the send socket's drop-all filter), probing for
// UDP GSO and GRO, the capability report, and Close. Receiving is in udp_recv_linux.go,
// sending in udp_send_linux.go.

package netio

import (
	"fmt"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"syscall"

	"golang.org/x/sys/unix"
)

const (
	batchSize = 64                 // mmsghdrs per recvmmsg/sendmmsg
	cmsgSpace = 48 + traceCmsgRoom // two cmsgs of an int or less (UDP_GRO or UDP_SEGMENT, and the TOS or traffic class): CmsgSpace(4) == 16 on 64-bit, 12 on 32-bit; room to spare
)

// udpConn is the Linux backend: recvmmsg/sendmmsg on non-blocking sockets driven
// through syscall.RawConn.
//
// It has two sockets. The receive socket is bound to the address asked for (port 4791
// for RoCEv2) and is watched through an epoll instance of the Conn's own that sits in
// Go's netpoller, which wakes a reader blocked in ReadBatch (epollRecv), or for BusyPoll
// is polled outside it. The send socket is bound to the same IP address
// with a port of the kernel's choosing, is in no epoll set at all, and drops anything
// sent to it. RoCEv2 leaves the UDP source port free (peers tell flows apart by it, and
// answer to port 4791, never to the source port), and a send-only socket saves the
// epoll write-readiness wake-up that every send from a netpoller socket costs (see
// rawFD; docs/DESIGN.md, "A send-only socket").
type udpConn struct {
	er    *epollRecv      // the receive socket in the default mode, and a group's (see epollRecv)
	rfd   *rawFD          // the receive socket with BusyPoll
	rc    syscall.RawConn // the receive socket, either kind
	snd   *rawFD          // the send socket
	v6    bool
	ecn   bool           // UDPOptions.ECN was asked for and the receive socket reports each datagram's TOS or traffic class (Caps.ECN); set at open
	local netip.AddrPort // the receive socket's address
	src   netip.AddrPort // the send socket's address

	gso              atomic.Bool
	gro              atomic.Bool
	rcvBuf           int
	sndBuf           int
	rcvWant, sndWant int // what was asked for
	closed           atomic.Bool

	// Busy-poll waiting (WaitReadable): poll(2) on the socket and an eventfd Close writes.
	waitMu  sync.Mutex // guards waiting, evfd, waitErr against Close
	waiting int
	evfd    int // 0: not made yet; -1: released
	waitErr error

	rmu sync.Mutex // guards r and intrErr (ReadBatch is meant for one goroutine; this makes misuse safe)
	r   recvScratch
	// intrErr is the error of a read that Interrupt ended, made at the first (interrupted).
	intrErr error

	wmu sync.Mutex // guards w: WriteBatch may be called concurrently
	w   sendScratch
}

// ListenUDP binds addr and returns a Conn. An IPv4 (or IPv4-mapped) address
// gives an AF_INET socket; an IPv6 one an IPV6_V6ONLY AF_INET6 socket. Path
// MTU discovery is set to "do" (DF set, never fragment locally), which on an
// unconnected socket also makes IPv4 Identification 0. Datagrams leave from a
// second, send-only socket on the same IP address (SourceAddr; see udpConn).
func ListenUDP(addr netip.AddrPort, opts UDPOptions) (Conn, error) {
	network, addr, err := listenNetwork(addr)
	if err != nil {
		return nil, err
	}
	c := newUDPConn(network == "udp6", opts)
	fd, local, err := openRaw(addr, c.v6, func(s int) error {
		if opts.ReusePort {
			if e := unix.SetsockoptInt(s, unix.SOL_SOCKET, unix.SO_REUSEPORT, 1); e != nil {
				return fmt.Errorf("SO_REUSEPORT: %w", e)
			}
		}
		return c.recvSetup(s)
	})
	if err != nil {
		return nil, fmt.Errorf("netio: listen %v: %w", addr, err)
	}
	return c.open(fd, local, opts)
}

func newUDPConn(v6 bool, opts UDPOptions) *udpConn {
	c := &udpConn{v6: v6}
	c.rcvWant, c.sndWant = opts.bufSizes()
	return c
}

// pmtu sets path MTU discovery to "do" on s.
func (c *udpConn) pmtu(s int) error {
	var err error
	if c.v6 {
		err = unix.SetsockoptInt(s, unix.IPPROTO_IPV6, unix.IPV6_MTU_DISCOVER, unix.IPV6_PMTUDISC_DO)
	} else {
		err = unix.SetsockoptInt(s, unix.IPPROTO_IP, unix.IP_MTU_DISCOVER, unix.IP_PMTUDISC_DO)
	}
	if err != nil {
		return fmt.Errorf("MTU_DISCOVER: %w", err)
	}
	return nil
}

// recvSetup sets the receive socket's options (before it is bound, or on a bound
// socket FileUDP adopts).
func (c *udpConn) recvSetup(s int) error {
	c.rcvBuf = setBuf(s, unix.SO_RCVBUFFORCE, unix.SO_RCVBUF, c.rcvWant)
	if c.v6 {
		acceptZeroChecksum6(s)
	}
	return c.pmtu(s)
}

// open finishes a Conn on its bound receive socket fd (which it owns from now on):
// the receive side in the mode opts asks for, the send socket, the offloads.
func (c *udpConn) open(fd int, local netip.AddrPort, opts UDPOptions) (Conn, error) {
	sendSetup := func(s int) error {
		if err := dropAll(s); err != nil {
			return err
		}
		c.sndBuf = setBuf(s, unix.SO_SNDBUFFORCE, unix.SO_SNDBUF, c.sndWant)
		setMulticastSend(s, c.local.Addr(), c.v6)
		return c.pmtu(s)
	}
	if opts.BusyPoll {
		c.rfd = &rawFD{fd: fd, busy: true}
		c.rc, c.local = c.rfd, local
	} else {
		var err error
		if c.er, err = newEpollRecv(fd); err != nil {
			unix.Close(fd)
			return nil, fmt.Errorf("netio: listen %v: %w", local, err)
		}
		c.rc, c.local = c.er, local
	}
	fd, src, err := openRaw(netip.AddrPortFrom(c.local.Addr(), 0), c.v6, sendSetup)
	if err != nil {
		c.closeRecv()
		return nil, fmt.Errorf("netio: send socket for %v: %w", local, err)
	}
	c.snd = &rawFD{fd: fd, busy: opts.BusyPoll}
	c.src = src
	c.probeOffload(opts)
	c.initRecv()
	c.r.fn = c.recvFn
	c.r.onceFn = c.recvOnceFn
	c.w.fn = c.sendFn
	return c, nil
}

// openRaw opens a non-blocking UDP socket outside Go's netpoller (see rawFD), applies
// setup and binds it to addr. It returns the descriptor and the bound address.
func openRaw(addr netip.AddrPort, v6 bool, setup func(fd int) error) (int, netip.AddrPort, error) {
	domain := unix.AF_INET
	if v6 {
		domain = unix.AF_INET6
	}
	fd, err := unix.Socket(domain, unix.SOCK_DGRAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, unix.IPPROTO_UDP)
	if err != nil {
		return 0, netip.AddrPort{}, fmt.Errorf("socket: %w", err)
	}
	fail := func(err error) (int, netip.AddrPort, error) {
		unix.Close(fd)
		return 0, netip.AddrPort{}, err
	}
	var sa unix.Sockaddr
	if v6 {
		if err := unix.SetsockoptInt(fd, unix.IPPROTO_IPV6, unix.IPV6_V6ONLY, 1); err != nil {
			return fail(fmt.Errorf("IPV6_V6ONLY: %w", err))
		}
		sa6 := &unix.SockaddrInet6{Port: int(addr.Port()), Addr: addr.Addr().As16()}
		if z := addr.Addr().Zone(); z != "" {
			if ifi, err := net.InterfaceByName(z); err == nil {
				sa6.ZoneId = uint32(ifi.Index)
			}
		}
		sa = sa6
	} else {
		sa = &unix.SockaddrInet4{Port: int(addr.Port()), Addr: addr.Addr().As4()}
	}
	if err := setup(fd); err != nil {
		return fail(err)
	}
	if err := unix.Bind(fd, sa); err != nil {
		return fail(fmt.Errorf("bind: %w", err))
	}
	got, err := unix.Getsockname(fd)
	if err != nil {
		return fail(fmt.Errorf("getsockname: %w", err))
	}
	var local netip.AddrPort
	switch a := got.(type) {
	case *unix.SockaddrInet4:
		local = netip.AddrPortFrom(netip.AddrFrom4(a.Addr), uint16(a.Port))
	case *unix.SockaddrInet6:
		local = netip.AddrPortFrom(netip.AddrFrom16(a.Addr).WithZone(addr.Addr().Zone()), uint16(a.Port))
	}
	return fd, local, nil
}

// BindReusePort opens a UDP socket with SO_REUSEPORT bound to addr, so that it joins
// the group of the sockets bound there with it (goverbs serve's steering group, whose
// members' Conns FileUDP makes). Nonblocking and close-on-exec, as every socket here.
func BindReusePort(addr netip.AddrPort) (int, error) {
	a := addr.Addr().Unmap()
	fd, _, err := openRaw(netip.AddrPortFrom(a, addr.Port()), !a.Is4(), func(s int) error {
		if err := unix.SetsockoptInt(s, unix.SOL_SOCKET, unix.SO_REUSEPORT, 1); err != nil {
			return fmt.Errorf("SO_REUSEPORT: %w", err)
		}
		return nil
	})
	if err != nil {
		return -1, fmt.Errorf("netio: bind %v: %w", addr, err)
	}
	return fd, nil
}

// acceptZeroChecksum6 lets the IPv6 receive socket accept UDP datagrams whose checksum
// is 0. IPv6 makes the UDP checksum mandatory (RFC 8200 section 8.1), so the kernel
// drops such datagrams and counts them in Udp6InCsumErrors; yet Linux rxe sends RoCEv2
// over IPv6 with checksum 0 (the ICRC protects the payload), and without this no reply
// of an rxe peer ever reaches us. Best effort: a kernel or sandbox without
// UDP_NO_CHECK6_RX (Linux 3.16) still talks to peers that checksum.
//
// What goverbs sends is another matter: a real checksum, which the kernel computes
// (UDP_NO_CHECK6_TX stays off). RFC 6935 and 6936 allow a zero checksum over IPv6 only
// for tunnel protocols on sockets that opt in, and rxe, like any receiver, accepts a
// checksummed datagram.
func acceptZeroChecksum6(fd int) {
	_ = unix.SetsockoptInt(fd, unix.IPPROTO_UDP, unix.UDP_NO_CHECK6_RX, 1)
}

// dropAll attaches a socket filter that accepts nothing: the send socket is never read,
// so whatever reached its port would only sit in its receive queue.
func dropAll(fd int) error {
	prog := [1]unix.SockFilter{{Code: unix.BPF_RET | unix.BPF_K, K: 0}}
	err := unix.SetsockoptSockFprog(fd, unix.SOL_SOCKET, unix.SO_ATTACH_FILTER, &unix.SockFprog{Len: 1, Filter: &prog[0]})
	if err != nil {
		return fmt.Errorf("SO_ATTACH_FILTER: %w", err)
	}
	return nil
}

// setBuf sets a socket buffer size, privileged option first, and returns the
// size in force. Failures are not errors: the default stays.
func setBuf(s, force, plain, want int) int {
	if unix.SetsockoptInt(s, unix.SOL_SOCKET, force, want) != nil {
		_ = unix.SetsockoptInt(s, unix.SOL_SOCKET, plain, want)
	}
	got, _ := unix.GetsockoptInt(s, unix.SOL_SOCKET, plain)
	return got
}

// recvECN asks the kernel for the ECN bits of each datagram fd receives:
// IP_RECVTOS gives IPv4's TOS byte, IPV6_RECVTCLASS IPv6's traffic class, as a
// control message (parseRecvCmsgs). Sending sets them per datagram with IP_TOS
// or IPV6_TCLASS control messages (putTOSCmsg). It reports whether the kernel
// agreed.
func recvECN(fd int, v6 bool) bool {
	if v6 {
		return unix.SetsockoptInt(fd, unix.IPPROTO_IPV6, unix.IPV6_RECVTCLASS, 1) == nil
	}
	return unix.SetsockoptInt(fd, unix.IPPROTO_IP, unix.IP_RECVTOS, 1) == nil
}

// probeOffload asks the kernel for UDP GSO (getsockopt UDP_SEGMENT works
// where the kernel knows it) and turns on UDP GRO.
func (c *udpConn) probeOffload(opts UDPOptions) {
	if !opts.DisableGSO {
		_ = c.snd.Control(func(fd uintptr) {
			if _, err := unix.GetsockoptInt(int(fd), unix.IPPROTO_UDP, unix.UDP_SEGMENT); err == nil {
				c.gso.Store(true)
			}
		})
	}
	_ = c.rc.Control(traceSocket) // receive timestamps, in a goverbs_trace build only
	if opts.ECN {
		// Only when asked (issue 31): with IP_RECVTOS on, every datagram received
		// carries a control message, read or not.
		_ = c.rc.Control(func(fd uintptr) { c.ecn = recvECN(int(fd), c.v6) })
	}
	if !opts.DisableGRO {
		_ = c.rc.Control(func(fd uintptr) {
			if err := unix.SetsockoptInt(int(fd), unix.IPPROTO_UDP, unix.UDP_GRO, 1); err == nil {
				c.gro.Store(true)
			}
		})
	}
}

func (c *udpConn) LocalAddr() netip.AddrPort { return c.local }

// SourceAddr is the send socket's address (see udpConn).
func (c *udpConn) SourceAddr() netip.AddrPort { return c.src }

func (c *udpConn) Caps() Caps {
	caps := Caps{
		BatchSize:     batchSize,
		MaxSegments:   1,
		RecvBuf:       c.rcvBuf,
		SendBuf:       c.sndBuf,
		RecvBufWanted: 2 * c.rcvWant, // in getsockopt's terms, as RecvBuf
		SendBufWanted: 2 * c.sndWant,
		IPv4IDZero:    !c.v6,
		ECN:           c.ecn,
	}
	if c.gso.Load() {
		caps.GSO, caps.MaxSegments, caps.MaxGSOBytes = true, MaxGSOSegments, maxGSOBytes
	}
	if c.gro.Load() {
		caps.GRO, caps.GROBufSize = true, MaxGROSize
	}
	return caps
}

func (c *udpConn) Close() error {
	if c.closed.Swap(true) {
		return net.ErrClosed
	}
	c.waitMu.Lock()
	if c.waiting > 0 {
		var one [8]byte
		one[0] = 1
		unix.Write(c.evfd, one[:]) // wake the waiter; it sees closed and releases the eventfd
	} else {
		c.closeWait()
	}
	c.waitMu.Unlock()
	c.snd.close()
	return c.closeRecv()
}

func (c *udpConn) closeRecv() error {
	if c.rfd != nil {
		return c.rfd.close()
	}
	return c.er.close()
}

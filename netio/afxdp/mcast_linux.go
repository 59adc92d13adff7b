//go:build linux

package afxdp

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"sync"
	"sync/atomic"
	"syscall"

	"github.com/goverbs/goverbs/netio"
	"golang.org/x/sys/unix"
)

// Multicast takes the kernel's path both ways: RoCEv2 multicast is UD, one MTU a
// datagram, and rare next to unicast traffic, while the kernel already does what it
// needs: IGMP/MLD membership (which switches snoop), the group's MAC address, and a copy
// looped back to members on this host (other devices of this process among them). The
// program passes multicast to the kernel (its destination is not the device's address),
// a group's socket reads it, and WriteBatch sends to a group through the local path,
// whose socket sends multicast out of the device's interface (see openLocalPath).

// JoinGroup joins the IP multicast group on the Conn's interface and returns a Conn that
// reads what is sent to the group at the Conn's port (netio.Multicaster): a kernel UDP
// socket bound to group:port with SO_REUSEADDR (every member on the host binds the same
// address), IP_MULTICAST_ALL off, and the membership on the interface. Its WriteBatch
// and SourceAddr are the joining Conn's. Closing it leaves the group.
func (c *Conn) JoinGroup(group netip.Addr) (netio.Conn, error) {
	group = group.Unmap()
	if !group.IsMulticast() || group.Is6() != c.v6 {
		return nil, fmt.Errorf("afxdp: join %v: not a multicast group of the Conn's family", group)
	}
	c.waitMu.RLock() // Close releases the namespace under the exclusive lock
	defer c.waitMu.RUnlock()
	if c.closed.Load() {
		return nil, net.ErrClosed
	}
	var fd int
	if err := inNetns(c.netns, func() error {
		var err error
		fd, err = c.groupSocket(group)
		return err
	}); err != nil {
		return nil, fmt.Errorf("afxdp: join %v on %s: %w", group, c.ifname, err)
	}
	var err error
	g := &groupConn{parent: c, r: &localPath{fd: fd, v6: c.v6}, local: netip.AddrPortFrom(group, c.local.Port())}
	// A receive-only socket in the netpoller: it is never written to, so its write
	// readiness wakes nobody after the first time.
	g.f = os.NewFile(uintptr(fd), "afxdp-group")
	if g.rc, err = g.f.SyscallConn(); err != nil {
		g.f.Close()
		return nil, fmt.Errorf("afxdp: join %v: %w", group, err)
	}
	g.readFn = g.readOnce
	return g, nil
}

// groupSocket makes the group's socket (in the Conn's network namespace).
func (c *Conn) groupSocket(group netip.Addr) (int, error) {
	domain := unix.AF_INET
	if c.v6 {
		domain = unix.AF_INET6
	}
	fd, err := unix.Socket(domain, unix.SOCK_DGRAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, unix.IPPROTO_UDP)
	if err != nil {
		return -1, err
	}
	fail := func(what string, err error) (int, error) {
		unix.Close(fd)
		return -1, fmt.Errorf("%s: %w", what, err)
	}
	if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_REUSEADDR, 1); err != nil {
		return fail("SO_REUSEADDR", err)
	}
	port := int(c.local.Port())
	var sa unix.Sockaddr
	if c.v6 {
		_ = unix.SetsockoptInt(fd, unix.IPPROTO_IPV6, unix.IPV6_V6ONLY, 1)
		_ = unix.SetsockoptInt(fd, unix.IPPROTO_UDP, unix.UDP_NO_CHECK6_RX, 1)
		_ = unix.SetsockoptInt(fd, unix.IPPROTO_IPV6, unix.IPV6_MULTICAST_ALL, 0)
		mreq := &unix.IPv6Mreq{Multiaddr: group.As16(), Interface: uint32(c.ifindex)}
		if err := unix.SetsockoptIPv6Mreq(fd, unix.IPPROTO_IPV6, unix.IPV6_JOIN_GROUP, mreq); err != nil {
			return fail("IPV6_JOIN_GROUP", err)
		}
		sa = &unix.SockaddrInet6{Port: port, Addr: group.As16(), ZoneId: uint32(c.ifindex)}
	} else {
		_ = unix.SetsockoptInt(fd, unix.IPPROTO_IP, unix.IP_MULTICAST_ALL, 0)
		mreq := &unix.IPMreqn{Multiaddr: group.As4(), Address: c.local.Addr().As4(), Ifindex: int32(c.ifindex)}
		if err := unix.SetsockoptIPMreqn(fd, unix.IPPROTO_IP, unix.IP_ADD_MEMBERSHIP, mreq); err != nil {
			return fail("IP_ADD_MEMBERSHIP", err)
		}
		sa = &unix.SockaddrInet4{Port: port, Addr: group.As4()}
	}
	if unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, localRecvBuf) != nil {
		_ = unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUF, localRecvBuf)
	}
	netio.SetRecvECN(fd, c.v6) // the group's Caps are the Conn's, ECN included
	if err := unix.Bind(fd, sa); err != nil {
		return fail("bind", err)
	}
	return fd, nil
}

// groupConn reads one multicast group's datagrams; it sends through the Conn that
// joined.
type groupConn struct {
	parent *Conn
	r      *localPath // the group's socket, read as the local path is
	f      *os.File   // the same descriptor, in the netpoller
	rc     syscall.RawConn
	local  netip.AddrPort
	closed atomic.Bool

	mu     sync.Mutex // one reader at a time; guards msgs, n
	msgs   []netio.Message
	n      int
	readFn func(uintptr) bool
}

func (g *groupConn) readOnce(uintptr) bool {
	g.n = g.r.recv(g.msgs)
	return g.n > 0
}

// ReadBatch waits in the netpoller for the group's datagrams and reads them.
func (g *groupConn) ReadBatch(msgs []netio.Message) (int, error) {
	if len(msgs) == 0 {
		return 0, nil
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed.Load() {
		return 0, fmt.Errorf("afxdp: read %v: %w", g.local, net.ErrClosed)
	}
	g.msgs, g.n = msgs, 0
	err := g.rc.Read(g.readFn)
	g.msgs = nil
	if err != nil {
		if g.closed.Load() || errors.Is(err, os.ErrClosed) {
			err = net.ErrClosed
		}
		return 0, fmt.Errorf("afxdp: read %v: %w", g.local, err)
	}
	g.parent.rxPackets.Add(uint64(g.n))
	return g.n, nil
}

// WriteBatch sends through the joining Conn.
func (g *groupConn) WriteBatch(msgs []netio.Message) (int, error) { return g.parent.WriteBatch(msgs) }

// LocalAddr is the group's address and the Conn's port.
func (g *groupConn) LocalAddr() netip.AddrPort { return g.local }

// SourceAddr is the joining Conn's.
func (g *groupConn) SourceAddr() netip.AddrPort { return g.parent.SourceAddr() }

// Caps are the joining Conn's.
func (g *groupConn) Caps() netio.Caps { return g.parent.Caps() }

// Close leaves the group: the kernel drops a socket's memberships with it.
func (g *groupConn) Close() error {
	if g.closed.Swap(true) {
		return net.ErrClosed
	}
	return g.f.Close()
}

//go:build linux

package netio

import (
	"fmt"
	"net/netip"
	"os"

	"golang.org/x/sys/unix"
)

// FileUDP makes a Conn whose receive socket is f, a UDP socket already bound (by
// another process, for example, which passed it over a unix socket): goverbs serve
// gives each Go client that runs its own engine a socket bound to the device's address
// and port in the device's SO_REUSEPORT group. The Conn takes a duplicate of f's
// descriptor; f stays the caller's to close. Everything else is ListenUDP's: the
// options, the send socket of its own on the same IP address, the offloads. opts'
// ReusePort does not apply (the socket is bound).
func FileUDP(f *os.File, opts UDPOptions) (Conn, error) {
	rc, err := f.SyscallConn()
	if err != nil {
		return nil, fmt.Errorf("netio: FileUDP: %w", err)
	}
	fd := -1
	var derr error
	if err := rc.Control(func(s uintptr) { fd, derr = unix.FcntlInt(s, unix.F_DUPFD_CLOEXEC, 0) }); err != nil {
		return nil, fmt.Errorf("netio: FileUDP: %w", err)
	}
	if derr != nil {
		return nil, fmt.Errorf("netio: FileUDP: dup: %w", derr)
	}
	fail := func(err error) (Conn, error) {
		unix.Close(fd)
		return nil, fmt.Errorf("netio: FileUDP: %w", err)
	}
	if typ, err := unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_TYPE); err != nil || typ != unix.SOCK_DGRAM {
		return fail(fmt.Errorf("not a datagram socket (SO_TYPE %d, %v)", typ, err))
	}
	if proto, err := unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_PROTOCOL); err != nil || proto != unix.IPPROTO_UDP {
		return fail(fmt.Errorf("not a UDP socket (SO_PROTOCOL %d, %v)", proto, err))
	}
	sa, err := unix.Getsockname(fd)
	if err != nil {
		return fail(fmt.Errorf("getsockname: %w", err))
	}
	var local netip.AddrPort
	v6 := false
	switch a := sa.(type) {
	case *unix.SockaddrInet4:
		local = netip.AddrPortFrom(netip.AddrFrom4(a.Addr), uint16(a.Port))
	case *unix.SockaddrInet6:
		local, v6 = netip.AddrPortFrom(netip.AddrFrom16(a.Addr), uint16(a.Port)), true
	default:
		return fail(fmt.Errorf("not an IP socket (%T)", sa))
	}
	if local.Port() == 0 {
		return fail(fmt.Errorf("socket is not bound"))
	}
	if err := unix.SetNonblock(fd, true); err != nil {
		return fail(fmt.Errorf("O_NONBLOCK: %w", err))
	}
	c := newUDPConn(v6, opts)
	if err := c.recvSetup(fd); err != nil {
		return fail(err)
	}
	return c.open(fd, local, opts)
}

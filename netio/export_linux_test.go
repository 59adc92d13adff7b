//go:build linux

package netio

import (
	"net/netip"

	"golang.org/x/sys/unix"
)

// SameHostConnect makes c (a same-host Conn) rendezvous with the device at a now,
// instead of at its first datagram, so that a test's traffic starts on the rings.
func SameHostConnect(c Conn, a netip.AddrPort) error { return sameHostDial(c, a, false) }

// SameHostDialAgain makes c rendezvous with the device at a now even if they have a pair:
// the second of two devices that dialled each other at once.
func SameHostDialAgain(c Conn, a netip.AddrPort) error { return sameHostDial(c, a, true) }

// sameHostDial dials a as the dialer goroutine would, unless they have a pair and not
// again.
func sameHostDial(c Conn, a netip.AddrPort, again bool) error {
	s := c.(*sameHostConn)
	e := s.entry(a)
	for !e.dialing.CompareAndSwap(false, true) {
	}
	defer e.dialing.Store(false)
	if !again && e.pair.Load() != nil {
		return nil
	}
	return s.dial(e)
}

// SetSameHostDialHook makes every rendezvous this process dials call f after the peer
// said yes and before the pair is installed here, until restore.
func SetSameHostDialHook(f func()) (restore func()) {
	testHookDialed.Store(&f)
	return func() { testHookDialed.Store(nil) }
}

// SameHostPairInitiator reports the initiator of c's pair with the device at a: which of
// the two dialled it.
func SameHostPairInitiator(c Conn, a netip.AddrPort) (netip.AddrPort, bool) {
	e := (*c.(*sameHostConn).peers.Load())[a]
	if e == nil {
		return netip.AddrPort{}, false
	}
	p := e.pair.Load()
	if p == nil {
		return netip.AddrPort{}, false
	}
	return p.initiator, true
}

// SetSameHostReplyHook makes every rendezvous this process accepts call f after it said
// yes to the dialer, until restore.
func SetSameHostReplyHook(f func()) (restore func()) {
	testHookReplied.Store(&f)
	return func() { testHookReplied.Store(nil) }
}

// SameHostScribble overwrites the ring that c's peer at a writes and c reads with
// garbage (the peer turned hostile).
func SameHostScribble(c Conn, a netip.AddrPort, garbage func(mem []byte)) bool {
	s := c.(*sameHostConn)
	e := (*s.peers.Load())[a]
	if e == nil {
		return false
	}
	p := e.pair.Load()
	if p == nil {
		return false
	}
	i := 1 // the initiator reads ring 1
	if p.initiator != s.LocalAddr() {
		i = 0
	}
	garbage(ringMem(p.region.Bytes(), s.ring, i))
	return true
}

// SameHostSockName is the file name of the rendezvous socket a device on a serves, in the
// calling thread's network namespace.
func SameHostSockName(a netip.AddrPort) string {
	return "shm-" + netnsTag() + "-" + netip.AddrPortFrom(a.Addr().Unmap(), a.Port()).String() + ".sock"
}

// RecvSockoptInt reads an int socket option of c's receive socket (a UDP Conn's, or a
// multicast group's).
func RecvSockoptInt(c Conn, level, opt int) (v int, err error) {
	var u *udpConn
	switch c := c.(type) {
	case *udpConn:
		u = c
	case *groupConn:
		u = c.udpConn
	}
	cerr := u.rc.Control(func(fd uintptr) { v, err = unix.GetsockoptInt(int(fd), level, opt) })
	if cerr != nil {
		return 0, cerr
	}
	return v, err
}

// SameHostOwnWatchArmed reports whether the UDP socket's own epoll watch (the UDP
// backend's, which readDirect uses) is armed on a default-mode same-host Conn. It takes
// the socket's read lock: call it only while no ReadBatch is in progress.
func SameHostOwnWatchArmed(c Conn) bool {
	u := c.(*sameHostConn).inner
	if u.er == nil {
		return false
	}
	u.rmu.Lock()
	defer u.rmu.Unlock()
	return u.er.armed
}

// SameHostUDPPolls returns how many times c's polls have read its UDP socket.
func SameHostUDPPolls(c Conn) int {
	s := c.(*sameHostConn)
	s.rmu.Lock()
	defer s.rmu.Unlock()
	return s.udpPolls
}

// SameHostUDPEvery is udpEvery: how many polls of the rings come between two reads of
// the UDP socket while it is quiet.
const SameHostUDPEvery = udpEvery

// SameHostGraves is how many torn-down pairs of c's wait for its reader to unmap them.
func SameHostGraves(c Conn) int {
	s := c.(*sameHostConn)
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.graves)
}

// SameHostPaired reports whether c has a ring pair for a, closing or not (a dial to a
// waits until it has none).
func SameHostPaired(c Conn, a netip.AddrPort) bool {
	e := (*c.(*sameHostConn).peers.Load())[a]
	return e != nil && e.pair.Load() != nil
}

// SameHostPeerUnsealed sets whether c's pair with the device at a takes datagrams
// unsealed, as its hello said (helloFlagUnsealed): false plays a peer of a build before
// it. It reports whether c has a pair there.
func SameHostPeerUnsealed(c Conn, a netip.AddrPort, yes bool) bool {
	s := c.(*sameHostConn)
	e := (*s.peers.Load())[a]
	if e == nil || e.pair.Load() == nil {
		return false
	}
	e.pair.Load().unsealed = yes
	return true
}

// SameHostForeignPeer makes c's pair with the device at a one with another process, as
// far as c's reads go: no loan of its names memory of this process (samePeerProcess).
// It reports whether c has a pair there.
func SameHostForeignPeer(c Conn, a netip.AddrPort) bool {
	s := c.(*sameHostConn)
	e := (*s.peers.Load())[a]
	if e == nil || e.pair.Load() == nil {
		return false
	}
	s.rmu.Lock()
	e.pair.Load().rxq = nil
	s.rmu.Unlock()
	return true
}

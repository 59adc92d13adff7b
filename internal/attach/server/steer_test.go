//go:build linux

package server

import (
	"net"
	"net/netip"
	"os"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// steerSocket binds a SO_REUSEPORT UDP socket to loopback (127.0.0.1, or ::1 for v6)
// on a port of the kernel's choosing: the device's socket of a steer group.
func steerSocket(t *testing.T, v6 bool) (int, netip.AddrPort) {
	t.Helper()
	domain, sa := unix.AF_INET, unix.Sockaddr(&unix.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}})
	if v6 {
		domain, sa = unix.AF_INET6, &unix.SockaddrInet6{Addr: netip.IPv6Loopback().As16()}
	}
	fd, err := unix.Socket(domain, unix.SOCK_DGRAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Skipf("no %d socket: %v", domain, err)
	}
	t.Cleanup(func() { unix.Close(fd) })
	if v6 {
		unix.SetsockoptInt(fd, unix.IPPROTO_IPV6, unix.IPV6_V6ONLY, 1)
	}
	if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_REUSEPORT, 1); err != nil {
		t.Fatal(err)
	}
	if err := unix.Bind(fd, sa); err != nil {
		if v6 {
			t.Skipf("no IPv6 loopback: %v", err)
		}
		t.Fatal(err)
	}
	got, _ := unix.Getsockname(fd)
	if v6 {
		return fd, netip.AddrPortFrom(netip.IPv6Loopback(), uint16(got.(*unix.SockaddrInet6).Port))
	}
	return fd, netip.AddrPortFrom(netip.AddrFrom4([4]byte{127, 0, 0, 1}), uint16(got.(*unix.SockaddrInet4).Port))
}

// bthTo is a datagram whose BTH names destination QPN qpn.
func bthTo(qpn uint32) []byte {
	b := make([]byte, 12+4)
	b[0] = 0x04 // RC SEND only
	b[2], b[3] = 0xff, 0xff
	b[5], b[6], b[7] = byte(qpn>>16), byte(qpn>>8), byte(qpn)
	return b
}

// who sends a datagram to qpn and reports which of fds got it (-1: none).
func who(t *testing.T, to netip.AddrPort, qpn uint32, fds []int) int {
	t.Helper()
	c, err := net.DialUDP("udp", nil, net.UDPAddrFromAddrPort(to))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Write(bthTo(qpn)); err != nil {
		t.Fatal(err)
	}
	pfds := make([]unix.PollFd, len(fds))
	for i, fd := range fds {
		pfds[i] = unix.PollFd{Fd: int32(fd), Events: unix.POLLIN}
	}
	if n, _ := unix.Poll(pfds, 2000); n == 0 {
		return -1
	}
	got := -1
	buf := make([]byte, 64)
	for i, fd := range fds {
		for {
			n, _, err := unix.Recvfrom(fd, buf, 0)
			if err != nil {
				break
			}
			if n >= 8 && uint32(buf[5])<<16|uint32(buf[6])<<8|uint32(buf[7]) == qpn {
				if got >= 0 {
					t.Fatalf("QPN %#x reached sockets %d and %d", qpn, got, i)
				}
				got = i
			}
		}
	}
	return got
}

func memberFD(m *steerMember) int { return m.fd }

// testSteer is a steering group on a fresh device socket (IPv6 if v6), closed when the
// test ends; the test skips where the kernel refuses the program.
func testSteer(t *testing.T, v6 bool) (*steer, int, netip.AddrPort) {
	t.Helper()
	dev, addr := steerSocket(t, v6)
	g, err := newSteer(dev, addr)
	if err != nil {
		t.Skipf("SO_ATTACH_REUSEPORT_CBPF refused here: %v", err)
	}
	t.Cleanup(g.close)
	return g, dev, addr
}

// joinN joins n members to g.
func joinN(t *testing.T, g *steer, n int) []*steerMember {
	t.Helper()
	ms := make([]*steerMember, n)
	for i := range ms {
		m, err := g.join()
		if err != nil {
			t.Fatal(err)
		}
		ms[i] = m
	}
	return ms
}

// TestSteerGroup: datagrams reach the socket whose member owns their destination
// QPN's top byte, everything else the device's socket; when a member leaves, its
// QPNs fall to the device's socket and the others' stay where they were.
func TestSteerGroup(t *testing.T) {
	t.Run("IPv4", func(t *testing.T) { testSteerGroup(t, false) })
	t.Run("IPv6", func(t *testing.T) { testSteerGroup(t, true) })
}

func testSteerGroup(t *testing.T, v6 bool) {
	g, dev, addr := testSteer(t, v6)
	ms := joinN(t, g, 3)
	a, b, c := ms[0], ms[1], ms[2]
	if a.top == b.top || b.top == c.top || a.top == c.top || a.top == 0 || a.top == 0xff {
		t.Fatalf("top bytes %#x %#x %#x", a.top, b.top, c.top)
	}
	fds := []int{dev, memberFD(a), memberFD(b), memberFD(c)}
	unowned := uint32(1)
	for unowned == uint32(a.top) || unowned == uint32(b.top) || unowned == uint32(c.top) {
		unowned++
	}
	check := func(qpn uint32, want int) {
		t.Helper()
		if got := who(t, addr, qpn, fds); got != want {
			t.Errorf("QPN %#x reached socket %d, want %d", qpn, got, want)
		}
	}
	check(1, 0)        // QP1: the daemon's
	check(0x1234, 0)   // the daemon's engine's range
	check(0xffffff, 0) // multicast
	check(unowned<<16|5, 0)
	check(uint32(a.top)<<16|0x11, 1)
	check(uint32(b.top)<<16|0xffff, 2)
	check(uint32(c.top)<<16, 3)

	// a (index 1) leaves (parked: TestSteerDepartureMovesNothing).
	g.leave(a, 0)
	fds[1] = -1 // closed: its number may be the next socket's
	check(uint32(a.top)<<16|0x11, 0)
	check(uint32(b.top)<<16|7, 2)
	check(uint32(c.top)<<16|7, 3)
	// A new member joins last, at index 3.
	d, err := g.join()
	if err != nil {
		t.Fatal(err)
	}
	fds = append(fds, memberFD(d))
	check(uint32(d.top)<<16|9, 4)
	check(uint32(c.top)<<16|9, 3)
	check(uint32(b.top)<<16|9, 2)
}

// TestSteerLeaveWaits: a member whose process still holds its socket keeps its place
// in the group (its QPNs go to the device's socket meanwhile), and leaves once the
// process lets go (parked behind b, then gone with it); the others are steered right
// all along.
func TestSteerLeaveWaits(t *testing.T) {
	g, dev, addr := testSteer(t, false)
	a, _ := g.join()
	b, err := g.join()
	if err != nil {
		t.Fatal(err)
	}
	held, err := unix.FcntlInt(uintptr(a.fd), unix.F_DUPFD_CLOEXEC, 0) // "the client's" copy
	if err != nil {
		t.Fatal(err)
	}
	g.leave(a, os.Getpid())
	fds := []int{dev, memberFD(b), held}
	if got := who(t, addr, uint32(b.top)<<16|3, fds); got != 1 {
		t.Fatalf("b's QPN reached socket %d while a waits to leave, want 1", got)
	}
	if got := who(t, addr, uint32(a.top)<<16|3, fds); got != 0 {
		t.Fatalf("a's QPN reached socket %d after its session ended, want 0 (the device)", got)
	}
	g.mu.Lock()
	n := len(g.members)
	g.mu.Unlock()
	if n != 2 {
		t.Fatalf("%d members while a's socket is held, want 2", n)
	}
	unix.Close(held)
	deadline := time.Now().Add(5 * time.Second)
	for {
		g.mu.Lock()
		parked := a.parked
		g.mu.Unlock()
		if parked {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("a did not leave after its holder closed its copy")
		}
		time.Sleep(10 * time.Millisecond)
	}
	// b stays at index 2, a's socket parked before it.
	if got := who(t, addr, uint32(b.top)<<16|3, []int{dev, memberFD(b), memberFD(a)}); got != 1 {
		t.Fatalf("b's QPN reached socket %d after a left, want b's", got)
	}
	g.leave(b, 0)
	g.mu.Lock()
	n = len(g.members)
	g.mu.Unlock()
	if n != 0 {
		t.Fatalf("%d members after b, the last, left too, want 0", n)
	}
}

// atIndex reports which of fds gets a datagram the group sends to index k (a program
// that returns k for everything, attached for the purpose): the kernel's order of the
// group, which the daemon's list must mirror. An index past the group's end is hashed
// to any socket.
func atIndex(t *testing.T, g *steer, k int, fds []int) int {
	t.Helper()
	p := []unix.SockFilter{{Code: unix.BPF_RET | unix.BPF_K, K: uint32(k)}}
	if err := unix.SetsockoptSockFprog(g.dev, unix.SOL_SOCKET, unix.SO_ATTACH_REUSEPORT_CBPF,
		&unix.SockFprog{Len: 1, Filter: &p[0]}); err != nil {
		t.Fatal(err)
	}
	defer func() {
		g.mu.Lock()
		defer g.mu.Unlock()
		if err := g.attach(); err != nil {
			t.Fatal(err)
		}
	}()
	return who(t, g.addr, 0x123456, fds)
}

// TestSteerDepartureMovesNothing: a member that leaves from the middle of the group
// is parked, so that no live member's socket moves (a moved socket's datagrams are
// hashed to any socket until the program follows); the parked ones leave with the
// last member, from the end.
func TestSteerDepartureMovesNothing(t *testing.T) {
	g, dev, addr := testSteer(t, false)
	ms := joinN(t, g, 3)
	a, b, c := ms[0], ms[1], ms[2]
	fds := []int{dev, memberFD(a), memberFD(b), memberFD(c)}
	g.leave(a, 0)
	for k, want := range []int{0, 1, 2, 3} {
		if got := atIndex(t, g, k, fds); got != want {
			t.Fatalf("after a left, index %d is socket %d, want %d (nothing moved)", k, got, want)
		}
	}
	if got := who(t, addr, uint32(a.top)<<16|1, fds); got != 0 {
		t.Fatalf("a's QPN reached socket %d after a left, want 0 (the device)", got)
	}
	if got := who(t, addr, uint32(c.top)<<16|1, fds); got != 3 {
		t.Fatalf("c's QPN reached socket %d, want 3", got)
	}
	// b leaves too, then c, the last: c goes, and the parked b and a with it.
	g.leave(b, 0)
	g.leave(c, 0)
	g.mu.Lock()
	n := len(g.members)
	g.mu.Unlock()
	if n != 0 {
		t.Fatalf("%d members after every one left, want 0", n)
	}
	if got := atIndex(t, g, 0, []int{dev}); got != 0 {
		t.Fatalf("index 0 is socket %d, want the device's", got)
	}
	// A newcomer joins at index 1.
	d, err := g.join()
	if err != nil {
		t.Fatal(err)
	}
	if got := who(t, addr, uint32(d.top)<<16|1, []int{dev, memberFD(d)}); got != 1 {
		t.Fatalf("d's QPN reached socket %d, want 1", got)
	}
}

// TestSteerParkedBounded: behind a long-lived last member, departed members' sockets
// are kept only up to steerMaxParked; past it they are closed, and the list still
// mirrors the kernel's order.
func TestSteerParkedBounded(t *testing.T) {
	g, dev, addr := testSteer(t, false)
	ms := joinN(t, g, steerMaxParked+2)
	last := ms[len(ms)-1]
	for i, m := range ms[:len(ms)-1] {
		g.leave(m, 0)
		g.mu.Lock()
		n := len(g.members)
		g.mu.Unlock()
		want := len(ms) // parked, behind the last
		if i == steerMaxParked {
			want = 1 // one too many: closed, the last moved to index 1
		}
		if n != want {
			t.Fatalf("after %d left, %d members, want %d", i+1, n, want)
		}
	}
	if got := atIndex(t, g, 1, []int{dev, memberFD(last)}); got != 1 {
		t.Fatalf("index 1 is socket %d, want the last member's", got)
	}
	if got := who(t, addr, uint32(last.top)<<16|1, []int{dev, memberFD(last)}); got != 1 {
		t.Fatalf("the last member's QPN reached socket %d, want 1", got)
	}
}

//go:build linux

package server

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"os"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/goverbs/goverbs/netio"
	"golang.org/x/sys/unix"
)

// A Go client may run an engine of its own on the device's address (ENGINE,
// docs/attach-protocol.md): the kernel then delivers each datagram to the process
// whose QP it is for. The device's socket and one socket per such client form a
// SO_REUSEPORT group on the device's address and port, and a classic BPF program
// attached to the group (SO_ATTACH_REUSEPORT_CBPF: no privilege, unlike eBPF's socket
// arrays) returns, for each datagram, the index of the socket that gets it, from the
// top byte of the BTH's destination QPN. The kernel runs it with the UDP header
// pulled, so offset 5 is that byte. Index 0 is the device's own socket: QP1 and the
// CM, multicast, the QPs of the daemon's own engine (C clients, Go clients on the
// daemon's engine: QPNs 0x000011-0x00ffff, engine.Device.SetQPNs) and anything no
// client owns (a killed client's QPNs: peers then see the daemon's engine, which has
// no such QP). A client gets a whole top byte, 1 to 0xfe: 65536 QPNs.
//
// The group's order is the order sockets joined, and a socket that leaves gets the
// last one moved into its place (reuseport_detach_sock). The daemon makes every
// client's socket itself and keeps a descriptor of it, so a socket leaves only when
// the daemon closes its copy, and only after no process of the session holds one
// (leave): the daemon's list then mirrors the kernel's, and it attaches the program
// again after every change that moves a socket.
//
// A socket leaves from the group's end only (remove): closing one in the middle moves
// the last into its place, and until the program is attached again it names that
// socket by an index past the group's end, which the kernel answers by hashing the
// datagram to any socket of the group. Its QP loses it, and a client that did nothing
// waits out a retransmission timeout because another one left. A departed member in
// the middle is parked instead: its socket stays, steered nothing, until every socket
// after it has gone, or until more than steerMaxParked are parked.

const (
	steerOwnFirst, steerOwnLast = 0x11, 0xffff // the daemon's engine's QPNs: top byte 0
	steerMaxClients             = 0xfe         // top bytes 1..0xfe (0xff holds the multicast QPN)
	// steerMaxParked bounds the departed clients' sockets kept behind a long-lived
	// last member: past it they are closed in place, moving live ones (remove).
	steerMaxParked = 16
)

// steer is a device's SO_REUSEPORT group.
type steer struct {
	dev  int // the device's receive socket (the engine's): index 0
	addr netip.AddrPort

	mu      sync.Mutex
	members []*steerMember // group index i+1
	closed  bool
	used    [256]bool // top bytes given to members (leaving ones too)
}

// steerMember is one client's socket in the group.
type steerMember struct {
	fd  int    // the daemon's descriptor (raw: os.File.Fd would make the shared file blocking)
	ino uint64 // the socket's inode, to find the client's descriptors of it
	top byte   // its QPNs: top<<16 .. top<<16|0xffff
	// gone: the session ended; no datagram is steered to it while it waits to leave.
	gone bool
	// parked: gone, and no process of its session holds it; its socket stays in the
	// group while others follow it (remove).
	parked bool
}

// QPNs is the member's range.
func (m *steerMember) QPNs() (first, last uint32) {
	return uint32(m.top) << 16, uint32(m.top)<<16 | 0xffff
}

// newSteer makes fd, the device's bound receive socket (opened with SO_REUSEPORT),
// the first of a group whose program sends everything to it. It fails where the
// kernel refuses the program.
func newSteer(fd int, addr netip.AddrPort) (*steer, error) {
	g := &steer{dev: fd, addr: addr}
	g.used[0], g.used[0xff] = true, true
	if err := g.attach(); err != nil {
		return nil, err
	}
	return g, nil
}

// program is the group's classic BPF: the top byte of the destination QPN, compared
// with each member's; no match (or a datagram too short to have a BTH, whose load
// ends the program with 0) is index 0.
func (g *steer) program() []unix.SockFilter {
	p := []unix.SockFilter{{Code: unix.BPF_LD | unix.BPF_B | unix.BPF_ABS, K: 5}}
	for i, m := range g.members {
		if m.gone {
			continue
		}
		p = append(p,
			unix.SockFilter{Code: unix.BPF_JMP | unix.BPF_JEQ | unix.BPF_K, K: uint32(m.top), Jt: 0, Jf: 1},
			unix.SockFilter{Code: unix.BPF_RET | unix.BPF_K, K: uint32(i + 1)})
	}
	return append(p, unix.SockFilter{Code: unix.BPF_RET | unix.BPF_K, K: 0})
}

// attach (re)attaches the group's program; the caller holds mu (or is newSteer).
func (g *steer) attach() error {
	p := g.program()
	err := unix.SetsockoptSockFprog(g.dev, unix.SOL_SOCKET, unix.SO_ATTACH_REUSEPORT_CBPF,
		&unix.SockFprog{Len: uint16(len(p)), Filter: &p[0]})
	if err != nil {
		return fmt.Errorf("SO_ATTACH_REUSEPORT_CBPF: %w", err)
	}
	return nil
}

var errNoRange = errors.New("every QPN range is taken (254 clients run engines of their own on this device)")

// join makes a socket bound to the device's address and port in the group, with a
// free top byte, and attaches the program that steers that byte's QPNs to it.
func (g *steer) join() (*steerMember, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	var free []byte
	for b := 1; b <= steerMaxClients; b++ {
		if !g.used[b] {
			free = append(free, byte(b))
		}
	}
	if len(free) == 0 {
		return nil, errNoRange
	}
	// A random byte of the free ones: a range given up by a killed client is not the
	// next one's at once, so its peers' stale packets more likely reach nobody.
	top := free[rand.IntN(len(free))]
	fd, ino, err := g.socket()
	if err != nil {
		return nil, err
	}
	m := &steerMember{fd: fd, ino: ino, top: top}
	g.members = append(g.members, m)
	if err := g.attach(); err != nil {
		// It joined last: closing it takes it out again without moving another.
		g.members = g.members[:len(g.members)-1]
		unix.Close(fd)
		g.attach()
		return nil, err
	}
	g.used[top] = true
	return m, nil
}

// socket opens a UDP socket with SO_REUSEPORT bound to the device's address and port,
// which joins the group last, and returns it with its inode.
func (g *steer) socket() (int, uint64, error) {
	fd, err := netio.BindReusePort(g.addr)
	if err != nil {
		return -1, 0, err
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return -1, 0, fmt.Errorf("fstat: %w", err)
	}
	return fd, st.Ino, nil
}

// leave takes m out of the group once no descriptor of pid holds its socket: until
// then datagrams for its QPNs go to index 0, and its place in the group stays (the
// kernel keeps a socket in its group while any process holds it, so closing the
// daemon's copy earlier would let the kernel move sockets when the daemon could not
// tell). A process that has exited holds nothing: the ordinary cases (the client
// closed its device, which closes its socket first, or was killed) leave at once or
// within milliseconds. A process that keeps the socket after its session ended keeps
// its range taken until it lets go.
//
// The program stops steering to m before leave returns; the rest may happen after,
// in a goroutine of its own when pid still holds the socket.
func (g *steer) leave(m *steerMember, pid int) {
	g.mu.Lock()
	m.gone = true
	g.attach()
	g.mu.Unlock()
	if pid <= 0 || !m.heldBy(pid) {
		g.remove(m)
		return
	}
	go func() {
		wait := time.Millisecond
		for m.heldBy(pid) {
			time.Sleep(wait)
			wait = min(2*wait, time.Second)
			g.mu.Lock()
			closed := g.closed
			g.mu.Unlock()
			if closed {
				return
			}
		}
		g.remove(m)
	}()
}

// remove takes m's socket out of the group: at once if it is the group's last, else
// it is parked, and leaves with the parked ones behind it when the members after it
// have left (see the top of the file). Past steerMaxParked parked sockets, they are
// closed where they are, each close mirroring the kernel's move of the last socket
// into the hole; such a move may misdirect the moved member's datagrams until the
// program is attached again, which is then the price of a long-lived last member
// outliving many others, not of every departure.
func (g *steer) remove(m *steerMember) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if !slices.Contains(g.members, m) || m.parked {
		return
	}
	m.parked = true
	g.used[m.top] = false // a new member may take the byte: the program skips m
	for n := len(g.members); n > 0 && g.members[n-1].parked; n-- {
		unix.Close(g.members[n-1].fd) // the last: nothing moves
		g.members[n-1] = nil
		g.members = g.members[:n-1]
	}
	parked := 0
	for _, o := range g.members {
		if o.parked {
			parked++
		}
	}
	if parked <= steerMaxParked {
		return // the program is unchanged: it steered nothing to m since leave
	}
	for i := 0; i < len(g.members); {
		if !g.members[i].parked {
			i++
			continue
		}
		unix.Close(g.members[i].fd) // the kernel moves the group's last socket here
		last := len(g.members) - 1
		g.members[i] = g.members[last]
		g.members[last] = nil
		g.members = g.members[:last]
		g.attach()
	}
}

// heldBy reports whether process pid has a descriptor of m's socket (other than the
// daemon's own, when pid is the daemon: a client in the daemon's process, as in tests).
func (m *steerMember) heldBy(pid int) bool {
	dir := "/proc/" + strconv.Itoa(pid) + "/fd"
	ents, err := os.ReadDir(dir)
	if err != nil {
		return false // gone (or a zombie, whose descriptors are closed)
	}
	want := "socket:[" + strconv.FormatUint(m.ino, 10) + "]"
	own := ""
	if pid == os.Getpid() {
		own = strconv.Itoa(m.fd)
	}
	for _, e := range ents {
		if e.Name() == own {
			continue
		}
		if l, err := os.Readlink(dir + "/" + e.Name()); err == nil && l == want {
			return true
		}
	}
	return false
}

// close closes the members' sockets (the daemon is leaving).
func (g *steer) close() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.closed = true
	for _, m := range g.members {
		unix.Close(m.fd)
	}
	g.members = nil
}

// file is a duplicate of m's socket to pass to the client (the reply path closes it
// once sent).
func (m *steerMember) file() (*os.File, error) {
	fd, err := unix.FcntlInt(uintptr(m.fd), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	return os.NewFile(uintptr(fd), "goverbs-engine-socket"), nil
}

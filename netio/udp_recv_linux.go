//go:build linux

// Receiving on the Linux UDP backend: recvmmsg into the caller's buffers, GRO runs and
// their segment size, the busy-poll one-shot read (PollBatch) and wait (WaitReadable),
// and the socket addresses of received datagrams.

package netio

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"strconv"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// recvScratch is the receive side's kernel-facing state. The headers' fixed fields
// (name, iovec and control pointers) are set once (initRecv); each iovec keeps pointing
// at the buffer of the last call until a call passes another.
type recvScratch struct {
	hdrs   [batchSize]unix.Mmsghdr
	iovs   [batchSize]unix.Iovec
	names  [batchSize]unix.RawSockaddrInet6
	oob    [batchSize][cmsgSpace]byte
	iovLen [batchSize]int
	dirty  int       // leading headers the kernel wrote in the last call
	msgs   []Message // the caller's slice during a call
	k      int       // headers in use
	n      int       // result
	errno  syscall.Errno
	fn     func(fd uintptr) bool
	onceFn func(fd uintptr) bool // PollBatch: made once, a method value per call would allocate
}

func (c *udpConn) initRecv() {
	r := &c.r
	for j := range r.hdrs {
		h := &r.hdrs[j].Hdr
		h.Name = (*byte)(unsafe.Pointer(&r.names[j]))
		h.Namelen = unix.SizeofSockaddrInet6
		h.Iov = &r.iovs[j]
		h.SetIovlen(1)
		h.Control = &r.oob[j][0]
		h.SetControllen(cmsgSpace)
	}
}

// ReadBatch reads up to min(len(msgs), 64) datagrams with one recvmmsg.
// With Caps().GRO a Message may hold a coalesced run (SegSize > 0); buffers
// should then be MaxGROSize bytes. If a run did not fit, the kernel truncated
// it: ReadBatch keeps the whole segments that fit and drops the rest; the
// first time a buffer shorter than MaxGROSize is seen, GRO is switched off on
// the socket so later runs are not coalesced at all.
func (c *udpConn) ReadBatch(msgs []Message) (int, error) {
	return c.read(msgs, false)
}

// PollBatch reads what is queued now without waiting; 0 means nothing was (Poller).
func (c *udpConn) PollBatch(msgs []Message) (int, error) {
	return c.read(msgs, true)
}

// Unwatch stops the netpoller watching a default-mode Conn's socket until the next
// ReadBatch (Unwatcher, epollRecv). It waits for a ReadBatch in progress.
func (c *udpConn) Unwatch() {
	if c.er == nil {
		return
	}
	c.rmu.Lock()
	c.er.disarm()
	c.rmu.Unlock()
}

// RecvFD is the receive socket's descriptor, for an event loop's epoll set (Watchable).
func (c *udpConn) RecvFD() int {
	if c.rfd != nil {
		return c.rfd.fd
	}
	return c.er.sock.fd
}

// WaitReadable blocks until a datagram is queued or the timeout passes (Poller). It
// waits in poll(2) on the socket and an eventfd that Close writes to, not in Go's
// netpoller (RawConn.Read would hold the socket's read lock while parked and so block
// every PollBatch behind it), and not in an epoll set either: a socket in an epoll set
// runs the set's callback for every datagram delivered to it, in the sender's send call,
// even while nobody waits, which a busy-poll ping-pong pays on every message
// (docs/DESIGN.md, "Busy-poll mode"). poll(2) hooks into the socket only for the wait itself.
func (c *udpConn) WaitReadable(timeout time.Duration) (bool, error) {
	c.waitMu.Lock()
	if c.closed.Load() {
		c.waitMu.Unlock()
		return false, c.readErr(net.ErrClosed)
	}
	if c.evfd == 0 && c.waitErr == nil {
		c.initWait()
	}
	if c.waitErr != nil {
		c.waitMu.Unlock()
		return false, c.waitErr
	}
	c.waiting++ // from here Close wakes us through the eventfd instead of closing it
	c.waitMu.Unlock()
	defer func() {
		c.waitMu.Lock()
		c.waiting--
		if c.closed.Load() && c.waiting == 0 {
			c.closeWait()
		}
		c.waitMu.Unlock()
	}()
	ms := -1
	if timeout >= 0 {
		ms = int((timeout + time.Millisecond - 1) / time.Millisecond)
	}
	for {
		// Idle path (a waiter has seen no traffic for a while): the closure's
		// allocation does not matter here.
		var n int
		var perr error
		var readable bool
		err := c.rc.Control(func(fd uintptr) {
			fds := [2]unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}, {Fd: int32(c.evfd), Events: unix.POLLIN}}
			n, perr = unix.Poll(fds[:], ms)
			readable = fds[0].Revents != 0
		})
		if c.closed.Load() || err != nil {
			return false, c.readErr(net.ErrClosed)
		}
		switch {
		case perr == unix.EINTR:
			continue
		case perr != nil:
			return false, c.readErr(perr)
		case n == 0:
			return false, nil // timed out
		case readable:
			return true, nil
		}
		// Only the eventfd, and not closed: cannot happen (only Close writes it).
	}
}

// Interrupt ends a ReadBatch blocked in the netpoller, or the next one, with
// ErrInterrupted (Interrupter): a read deadline in the past wakes the reader the
// netpoller parked. Busy-poll Conns are not interruptible (AsInterrupter says so).
func (c *udpConn) Interrupt() {
	if c.er != nil {
		c.er.setReadDeadline(longAgo)
	}
}

func (c *udpConn) interruptible() bool { return c.er != nil }

// longAgo is a read deadline that has passed.
var longAgo = time.Unix(1, 0)

// closeWait releases the eventfd. c.waitMu is held, no waiter is inside.
func (c *udpConn) closeWait() {
	if c.evfd > 0 {
		unix.Close(c.evfd)
		c.evfd = -1
	}
}

func (c *udpConn) initWait() {
	evfd, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
	if err != nil {
		c.waitErr = fmt.Errorf("netio: eventfd: %w", err)
		return
	}
	c.evfd = evfd
}

// recvOnceFn makes one non-blocking recvmmsg attempt: recvFn, but an empty socket ends
// the call instead of waiting.
func (c *udpConn) recvOnceFn(fd uintptr) bool {
	c.recvFn(fd)
	return true
}

// interrupted is the error of a read that Interrupt ended, one value per Conn; c.rmu is
// held. A same-host Conn interrupts its socket's wait at every write to its ring to
// itself (readDirect), and a new error each time was a heap allocation per loopback post
// of a default-mode device (the C library's TestCDataPathAllocations, 0.13 a WRITE under
// load, once the shortcut was on by default).
func (c *udpConn) interrupted() error {
	if c.intrErr == nil {
		c.intrErr = fmt.Errorf("netio: read %v: %w", c.local, ErrInterrupted)
	}
	return c.intrErr
}

// read runs one receive: ReadBatch's, which waits for a datagram (recvFn), or with once
// PollBatch's, which does not (recvOnceFn).
func (c *udpConn) read(msgs []Message, once bool) (int, error) {
	if len(msgs) == 0 {
		return 0, nil
	}
	c.rmu.Lock()
	defer c.rmu.Unlock()
	r := &c.r
	k := min(len(msgs), batchSize)
	smallBuf := false
	// Headers stay prepared between calls (a busy poller calls this in a tight loop and
	// mostly finds nothing): only the entries the kernel wrote last time are reset, and
	// only buffers that changed are pointed at again.
	for j := range k {
		b := msgs[j].Buf
		if len(b) < MaxGROSize {
			smallBuf = true
		}
		var base *byte
		if len(b) > 0 {
			base = &b[0]
		}
		if iov := &r.iovs[j]; iov.Base != base || r.iovLen[j] != len(b) {
			iov.Base = base
			iov.SetLen(len(b))
			r.iovLen[j] = len(b)
		}
	}
	for j := range min(r.dirty, batchSize) {
		h := &r.hdrs[j]
		h.Hdr.Namelen = unix.SizeofSockaddrInet6
		h.Hdr.SetControllen(cmsgSpace)
		h.Hdr.Flags = 0
		h.Len = 0
	}
	r.dirty = 0
	r.msgs, r.k, r.n, r.errno = msgs, k, 0, 0
	var err error
	switch {
	case !once:
		err = c.rc.Read(c.r.fn)
	case c.er != nil:
		err = c.er.poll(c.r.onceFn) // leaves the socket's watch as it is
	default:
		err = c.rc.Read(c.r.onceFn)
	}
	traceRecv(r.n)
	r.dirty = r.n
	if r.errno != 0 {
		r.dirty = k
	}
	r.msgs = nil
	if smallBuf && c.gro.Load() {
		// After the read, so that a run already coalesced still carries its
		// UDP_GRO cmsg (the kernel adds it only while GRO is on).
		c.disableGRO()
	}
	if err != nil {
		if errors.Is(err, os.ErrDeadlineExceeded) && c.interruptible() {
			// Interrupt's past deadline: clear it for the next read. An Interrupt that
			// comes after this read returned and before the clear is not lost: its
			// caller set what the interrupted goroutine looks at next (see Interrupter).
			c.er.setReadDeadline(time.Time{})
			return 0, c.interrupted()
		}
		return 0, c.readErr(err)
	}
	if r.n == 0 && r.errno != 0 {
		return 0, c.readErr(r.errno)
	}
	return r.n, nil
}

func (c *udpConn) readErr(err error) error {
	if c.closed.Load() || errors.Is(err, net.ErrClosed) {
		return fmt.Errorf("netio: read %v: %w", c.local, net.ErrClosed)
	}
	return fmt.Errorf("netio: read %v: %w", c.local, err)
}

func (c *udpConn) disableGRO() {
	_ = c.rc.Control(func(fd uintptr) {
		_ = unix.SetsockoptInt(int(fd), unix.IPPROTO_UDP, unix.UDP_GRO, 0)
	})
	c.gro.Store(false)
}

// recvFn reads what is queued. It returns false on EAGAIN, which makes RawConn.Read
// wait: in the netpoller, or spinning on a busy-poll socket (rawFD).
func (c *udpConn) recvFn(fd uintptr) bool {
	for {
		n, errno := recvmmsg(fd, c.r.hdrs[:c.r.k])
		switch errno {
		case 0:
			c.finishRecv(n)
			return true
		case unix.EINTR:
			continue
		case unix.EAGAIN:
			return false
		default:
			c.r.errno = errno
			return true
		}
	}
}

func (c *udpConn) finishRecv(n int) {
	r := &c.r
	for j := range n {
		h := &r.hdrs[j]
		m := &r.msgs[j]
		m.N = int(h.Len)
		m.SegSize, m.View, m.Lent, m.SameHost = 0, nil, nil, false // a slot a same-host ring lent into now holds a datagram
		m.Addr = sockaddrToAddrPort(&r.names[j], !c.v6)
		var ds uint8 // what a datagram without a TOS or traffic class message reports: Not-ECT, DSCP 0
		if h.Hdr.Controllen > 0 {
			m.SegSize, ds = parseRecvCmsgs(r.oob[j][:h.Hdr.Controllen])
			traceDatagram(r.oob[j][:h.Hdr.Controllen], m.N)
		}
		if c.ecn {
			m.ECN, m.TrafficClass = ECN(ds)&ECNMask, ds&^ECNMask
		}
		if m.N > len(m.Buf) {
			m.N = len(m.Buf)
		}
		if h.Hdr.Flags&unix.MSG_TRUNC != 0 && m.SegSize > 0 {
			// Keep the whole segments the kernel managed to copy.
			m.N -= m.N % m.SegSize
		}
		if m.SegSize >= m.N {
			m.SegSize = 0
		}
	}
	r.n = n
}

// parseRecvCmsgs reads a received datagram's control messages: the GRO segment
// size (UDP_GRO, an int; 0 without) and the ECN bits of its TOS byte (IP_TOS, one
// byte) or traffic class (IPV6_TCLASS, an int). A malformed list ends the parse.
func parseRecvCmsgs(oob []byte) (segSize int, ds uint8) {
	for len(oob) >= unix.SizeofCmsghdr {
		h := (*unix.Cmsghdr)(unsafe.Pointer(&oob[0]))
		l := int(h.Len)
		if l < unix.SizeofCmsghdr || l > len(oob) {
			return segSize, ds
		}
		data := oob[unix.CmsgLen(0):l]
		switch {
		case h.Level == unix.IPPROTO_UDP && h.Type == unix.UDP_GRO && len(data) >= 4:
			segSize = int(*(*int32)(unsafe.Pointer(&data[0])))
		case h.Level == unix.IPPROTO_IP && h.Type == unix.IP_TOS && len(data) >= 1:
			ds = data[0]
		case h.Level == unix.IPPROTO_IPV6 && h.Type == unix.IPV6_TCLASS && len(data) >= 4:
			ds = uint8(*(*int32)(unsafe.Pointer(&data[0])))
		}
		oob = oob[min(len(oob), unix.CmsgSpace(l-unix.CmsgLen(0))):]
	}
	return segSize, ds
}

// recvmmsg and sendmmsg (udp_send_linux.go) are raw syscalls: they never block (MSG_DONTWAIT on a
// non-blocking socket), so the scheduler's syscall bookkeeping buys nothing, and it costs:
// a 64 KiB GSO send on loopback runs the receiver's whole path too and takes tens of
// microseconds, long enough for sysmon to retake the P and hand it to another thread
// (docs/DESIGN.md, "Raw syscalls").
func recvmmsg(fd uintptr, hs []unix.Mmsghdr) (int, syscall.Errno) {
	n, _, e := unix.RawSyscall6(unix.SYS_RECVMMSG, fd, uintptr(unsafe.Pointer(&hs[0])), uintptr(len(hs)), unix.MSG_DONTWAIT, 0, 0)
	return int(n), e
}

func sockaddrToAddrPort(sa *unix.RawSockaddrInet6, v4 bool) netip.AddrPort {
	switch sa.Family {
	case unix.AF_INET:
		s4 := (*unix.RawSockaddrInet4)(unsafe.Pointer(sa))
		p := (*[2]byte)(unsafe.Pointer(&s4.Port))
		return netip.AddrPortFrom(netip.AddrFrom4(s4.Addr), uint16(p[0])<<8|uint16(p[1]))
	case unix.AF_INET6:
		p := (*[2]byte)(unsafe.Pointer(&sa.Port))
		a := netip.AddrFrom16(sa.Addr)
		if v4 {
			a = a.Unmap()
		} else if sa.Scope_id != 0 && a.IsLinkLocalUnicast() {
			a = a.WithZone(strconv.Itoa(int(sa.Scope_id))) // allocates; link-local only
		}
		return netip.AddrPortFrom(a, uint16(p[0])<<8|uint16(p[1]))
	}
	return netip.AddrPort{}
}

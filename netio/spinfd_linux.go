//go:build linux

package netio

import (
	"net"
	"runtime"
	"sync"
	"sync/atomic"

	"golang.org/x/sys/unix"
)

// spinFD is the socket of a busy-poll Conn: a non-blocking descriptor that Go's netpoller
// never sees. It implements syscall.RawConn so the rest of udpConn does not care.
//
// Why not the netpoller: a descriptor registered there is edge-triggered in the runtime's
// epoll set, and each arriving datagram wakes the runtime thread blocked in epoll_pwait
// (one is, whenever the program has a timer or any other goroutine waiting on I/O) only
// for it to find no goroutine waiting on this socket. Measured on a 2-core machine during
// an 8-byte busy-poll ping-pong: 60k context switches/s instead of 8k, and each wake-up
// may preempt the very thread that spins for the packet. A busy-poll Conn is read by
// polling (PollBatch) and waited for in a private epoll set (WaitReadable), so it needs
// nothing from the netpoller.
type spinFD struct {
	fd     int
	mu     sync.RWMutex // held shared around each use of fd; Close takes it exclusively
	closed atomic.Bool
}

func (s *spinFD) Control(f func(fd uintptr)) error {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed.Load() {
		return net.ErrClosed
	}
	f(uintptr(s.fd))
	return nil
}

// Read calls f until it reports done. f returns false when the socket would block: a
// busy-poll reader spins (yielding) rather than sleeping.
func (s *spinFD) Read(f func(fd uintptr) bool) error { return s.spin(f) }

// Write is Read's twin: a full send buffer is waited out by spinning.
func (s *spinFD) Write(f func(fd uintptr) bool) error { return s.spin(f) }

func (s *spinFD) spin(f func(fd uintptr) bool) error {
	for {
		s.mu.RLock()
		if s.closed.Load() {
			s.mu.RUnlock()
			return net.ErrClosed
		}
		done := f(uintptr(s.fd))
		s.mu.RUnlock()
		if done {
			return nil
		}
		runtime.Gosched()
	}
}

// close closes the descriptor once no call is using it (every use is a non-blocking
// syscall, so this waits microseconds at most).
func (s *spinFD) close() error {
	if s.closed.Swap(true) {
		return net.ErrClosed
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return unix.Close(s.fd)
}

//go:build linux

package netio

import (
	"net"
	"runtime"
	"sync"
	"sync/atomic"

	"golang.org/x/sys/unix"
)

// rawFD is a non-blocking socket that Go's netpoller never sees. It implements
// syscall.RawConn so the rest of udpConn does not care which kind of socket it drives.
//
// Two sockets of a udpConn are rawFDs:
//
//   - The receive socket of a busy-poll Conn. A descriptor in the netpoller is
//     edge-triggered in the runtime's epoll set, and each arriving datagram wakes the
//     runtime thread blocked in epoll_pwait (one is, whenever the program has a timer or
//     any other goroutine waiting on I/O) only for it to find no goroutine waiting on this
//     socket: a busy-poll ping-pong made several times the context switches of plain
//     UDP (docs/DESIGN.md, "Busy-poll mode"), and each wake-up may preempt the very
//     thread that spins for the packet. A busy-poll Conn is read by polling (PollBatch) and waited
//     for in poll(2) (WaitReadable), so it needs nothing from the netpoller.
//   - The send socket of every Conn (see udpConn). A socket in any epoll set with
//     EPOLLOUT (the netpoller asks for it on every descriptor) runs the epoll callback
//     each time the kernel frees one of its sent datagrams, and wakes the runtime's
//     poller thread, when it sleeps in epoll_pwait, for a write readiness nobody
//     waits for (a WRITE sender's profile shows it in sock_wfree).
//
// On EAGAIN a busy rawFD spins (yielding); any other waits in poll(2), a short timeout
// at a time so that Close never waits long for it.
type rawFD struct {
	fd     int
	busy   bool
	mu     sync.RWMutex // held shared around each use of fd; Close takes it exclusively
	closed atomic.Bool
}

// pollSlice bounds one poll(2) wait of a blocking rawFD in milliseconds: how long Close
// may wait for a waiter to let go of the descriptor.
const pollSlice = 10

func (s *rawFD) Control(f func(fd uintptr)) error {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed.Load() {
		return net.ErrClosed
	}
	f(uintptr(s.fd))
	return nil
}

// use calls f on the descriptor, holding it open for the call, and returns f's result;
// open is false, and f not called, once the socket is closed.
func (s *rawFD) use(f func(fd uintptr) bool) (done, open bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed.Load() {
		return false, false
	}
	return f(uintptr(s.fd)), true
}

// Read calls f until it reports done; f returns false when the socket would block.
func (s *rawFD) Read(f func(fd uintptr) bool) error { return s.loop(f, unix.POLLIN) }

// Write is Read's twin for a full send buffer.
func (s *rawFD) Write(f func(fd uintptr) bool) error { return s.loop(f, unix.POLLOUT) }

func (s *rawFD) loop(f func(fd uintptr) bool, events int16) error {
	for {
		s.mu.RLock()
		if s.closed.Load() {
			s.mu.RUnlock()
			return net.ErrClosed
		}
		done := f(uintptr(s.fd))
		if !done && !s.busy {
			pfd := [1]unix.PollFd{{Fd: int32(s.fd), Events: events}}
			_, _ = unix.Poll(pfd[:], pollSlice) // EINTR or a timeout: f tries again
		}
		s.mu.RUnlock()
		if done {
			return nil
		}
		if s.busy {
			runtime.Gosched()
		}
	}
}

// close closes the descriptor once no call is using it (a non-blocking syscall, or a
// poll of at most pollSlice).
func (s *rawFD) close() error {
	if s.closed.Swap(true) {
		return net.ErrClosed
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return unix.Close(s.fd)
}

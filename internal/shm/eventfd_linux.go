package shm

import (
	"fmt"
	"os"
	"syscall"

	"golang.org/x/sys/unix"
)

// Eventfd is a wake-up a consumer waits on and a producer signals: a non-blocking
// eventfd, pollable by Go's netpoller (Wait), by epoll and by a C program's poll().
type Eventfd struct {
	f  *os.File
	rc syscall.RawConn
	fd int
}

// NewEventfd makes an eventfd.
func NewEventfd() (*Eventfd, error) {
	fd, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
	if err != nil {
		return nil, fmt.Errorf("shm: eventfd: %w", err)
	}
	return EventfdFrom(fd)
}

// NewUnwatchedEventfd makes an eventfd that Go's netpoller does not watch, for an epoll
// set of the caller's (goverbs serve's event loop): a descriptor in the netpoller's
// edge-triggered set would also wake a runtime thread asleep in epoll_pwait at every
// write, for nobody. Wait must not be used on it; Signal, Drain, FD and File work.
// The descriptor is non-blocking, and so is every copy of it sent to a peer.
func NewUnwatchedEventfd() (*Eventfd, error) {
	// Blocking when os.NewFile sees it, which then leaves it out of the netpoller.
	fd, err := unix.Eventfd(0, unix.EFD_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("shm: eventfd: %w", err)
	}
	f := os.NewFile(uintptr(fd), "shm-eventfd")
	if err := unix.SetNonblock(fd, true); err != nil {
		f.Close()
		return nil, fmt.Errorf("shm: eventfd: %w", err)
	}
	return &Eventfd{f: f, fd: fd}, nil
}

// EventfdFrom wraps an eventfd descriptor (one received from a peer, for example), which
// it owns from now on. Signalling a descriptor that is not an eventfd does no harm
// beyond a failed or pointless write.
func EventfdFrom(fd int) (*Eventfd, error) {
	// Non-blocking before os.NewFile: a producer must never block on a full counter,
	// and os.NewFile puts only a non-blocking descriptor into the netpoller.
	if err := unix.SetNonblock(fd, true); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("shm: eventfd: %w", err)
	}
	f := os.NewFile(uintptr(fd), "shm-eventfd")
	rc, err := f.SyscallConn()
	if err != nil {
		f.Close()
		return nil, err
	}
	// Not f.Fd(), which would switch the descriptor back to blocking mode.
	return &Eventfd{f: f, rc: rc, fd: fd}, nil
}

// SignalOnlyEventfdFrom wraps an eventfd descriptor that this side only signals (a
// client's doorbell, received from the daemon), which it owns from now on, without Go's
// netpoller: there a descriptor is watched for EPOLLIN and EPOLLOUT, edge-triggered, so
// that every write of ours and every read of the peer's (which makes the counter
// writable) woke a runtime thread of ours asleep in epoll_pwait, for nobody: two
// wake-ups per doorbell of an attached client. File is nil, Wait must not be used.
func SignalOnlyEventfdFrom(fd int) (*Eventfd, error) {
	if err := unix.SetNonblock(fd, true); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("shm: eventfd: %w", err)
	}
	return &Eventfd{fd: fd}, nil
}

// FD is the descriptor, for poll(2), epoll or SCM_RIGHTS. Valid until Close.
func (e *Eventfd) FD() int { return e.fd }

// File is the eventfd as a file, to send to a peer.
func (e *Eventfd) File() *os.File { return e.f }

var one = [8]byte{1}

// Signal wakes whoever waits on the eventfd: one write(2).
func (e *Eventfd) Signal() {
	// EAGAIN (counter at its maximum) still leaves it readable: the wake-up is not lost.
	_, _ = unix.Write(e.fd, one[:])
}

// Drain resets the eventfd (non-blocking), so that the next wait sleeps.
func (e *Eventfd) Drain() {
	var b [8]byte
	_, _ = unix.Read(e.fd, b[:])
}

// Wait parks the goroutine in Go's netpoller until the eventfd is signalled, then
// drains it. It returns an error once the eventfd is closed.
func (e *Eventfd) Wait() error {
	var b [8]byte
	var rerr error
	err := e.rc.Read(func(fd uintptr) bool {
		_, rerr = unix.Read(int(fd), b[:])
		return rerr != unix.EAGAIN
	})
	if err != nil {
		return err
	}
	return rerr
}

// Close closes the eventfd; a Wait in progress returns.
func (e *Eventfd) Close() error {
	if e.f == nil {
		return unix.Close(e.fd)
	}
	return e.f.Close()
}

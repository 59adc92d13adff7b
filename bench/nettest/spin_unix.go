//go:build unix

package main

import (
	"io"
	"net/netip"
	"os"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// spinner does a socket's reads and writes as a busy-polling Go program would: plain
// read(2) and write(2) on the descriptor Go already made non-blocking, retried at once on
// EAGAIN, so the process never sleeps in the scheduler or the netpoller.
type spinner struct {
	conn     syscall.Conn // kept so the descriptor stays open while we use it
	fd       int
	deadline time.Time
}

func newSpinner(c syscall.Conn, deadline time.Time) (*spinner, error) {
	rc, err := c.SyscallConn()
	if err != nil {
		return nil, err
	}
	fd := -1
	if err := rc.Control(func(f uintptr) { fd = int(f) }); err != nil {
		return nil, err
	}
	return &spinner{conn: c, fd: fd, deadline: deadline}, nil
}

// read spins until a read returns data (one datagram on a UDP socket) and returns its
// length. It checks the deadline (zero: none) only every million empty reads, off the
// fast path.
func (s *spinner) read(b []byte) (int, error) {
	for spins := 1; ; spins++ {
		n, err := unix.Read(s.fd, b)
		switch {
		case err == unix.EAGAIN || err == unix.EINTR:
			if spins&(1<<20-1) == 0 && !s.deadline.IsZero() && time.Now().After(s.deadline) {
				return 0, os.ErrDeadlineExceeded
			}
			continue
		case err != nil:
			return 0, err
		case n == 0 && len(b) > 0:
			return 0, io.EOF // a stream's peer closed (a UDP datagram is never empty here)
		}
		return n, nil
	}
}

// readFull reads exactly len(b) bytes from a stream.
func (s *spinner) readFull(b []byte) error {
	for got := 0; got < len(b); {
		n, err := s.read(b[got:])
		if err != nil {
			return err
		}
		got += n
	}
	return nil
}

// write writes all of b, spinning while the socket's send buffer is full.
func (s *spinner) write(b []byte) error {
	for len(b) > 0 {
		n, err := unix.Write(s.fd, b)
		if err == unix.EAGAIN || err == unix.EINTR {
			continue
		}
		if err != nil {
			return err
		}
		b = b[n:]
	}
	return nil
}

// connect fixes a UDP socket's peer, so that write needs no address.
func (s *spinner) connect(to netip.AddrPort) error {
	a := to.Addr()
	if a.Is4() {
		return unix.Connect(s.fd, &unix.SockaddrInet4{Port: int(to.Port()), Addr: a.As4()})
	}
	return unix.Connect(s.fd, &unix.SockaddrInet6{Port: int(to.Port()), Addr: a.As16()})
}

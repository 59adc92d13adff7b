//go:build linux

package netio

import (
	"errors"
	"fmt"
	"os"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// epollRecv is the default mode's receive socket: a rawFD that Go's netpoller never
// sees, watched by an epoll instance of the Conn's own, and that instance sits in the
// netpoller. A ReadBatch blocks in the netpoller as on any socket of package net (the
// goroutine parks; no thread is held in a syscall), and Interrupt ends it with a read
// deadline. What the extra instance buys is a switch: Unwatch takes the socket out of
// the instance (disarm), and ReadBatch puts it back (arm).
//
// A socket in the netpoller's epoll set runs the set's callback for every datagram the
// kernel delivers to it, and when the program has a thread asleep in epoll_pwait (it has
// one whenever a P is idle) the callback wakes it, for nothing if nobody is parked on
// the socket. A program that polls its CQ in a loop reads the socket itself
// (engine.Device.PollRx), and then each such wake-up is a thread the kernel puts on a
// core beside the one spinning for the packet: a default-mode ping-pong was measurably
// slower with the socket in the netpoller than with GOMAXPROCS=1, where no P is idle and
// no sleeper is woken (docs/DESIGN.md, "Default mode").
// Disarmed, delivery touches no epoll set at all. The switch costs one epoll_ctl when a
// program moves between polling and blocking, not one per datagram.
//
// The instance watches the socket level-triggered, so arming it while datagrams wait
// makes it ready at once and the netpoller's edge is not missed.
type epollRecv struct {
	sock  *rawFD
	ep    *os.File        // the epoll instance, in the netpoller
	eprc  syscall.RawConn // ep's
	epfd  int
	armed bool // guarded by the Conn's rmu, as is every call below but Control

	// Read's state, made once so that a read allocates nothing: the caller's function,
	// the socket's Control error, and try, the function the netpoller's Read calls.
	cur  func(fd uintptr) bool
	serr error
	try  func(fd uintptr) bool

	// ctl's arguments and result, and its call (ctlOnce), likewise.
	op     int
	ev     *unix.EpollEvent
	evIn   unix.EpollEvent // arm's event, here so that its address does not escape
	ctlErr error
	ctlFn  func(fd uintptr)
}

// newEpollRecv watches sock (a bound, non-blocking socket it now owns) with an epoll
// instance of its own in Go's netpoller. The socket starts armed.
func newEpollRecv(sock int) (*epollRecv, error) {
	epfd, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("epoll_create1: %w", err)
	}
	if err := unix.SetNonblock(epfd, true); err != nil {
		unix.Close(epfd)
		return nil, fmt.Errorf("epoll instance: set non-blocking: %w", err)
	}
	e := &epollRecv{sock: &rawFD{fd: sock}, epfd: epfd}
	if err := e.arm(); err != nil {
		unix.Close(epfd)
		return nil, err
	}
	// os.NewFile puts a non-blocking descriptor into the netpoller (kindNonBlock).
	e.ep = os.NewFile(uintptr(epfd), "netio-epoll")
	if e.eprc, err = e.ep.SyscallConn(); err != nil {
		e.ep.Close()
		return nil, err
	}
	e.try, e.ctlFn = e.tryOnce, e.ctlOnce
	return e, nil
}

func (e *epollRecv) arm() error {
	if e.armed {
		return nil
	}
	e.evIn = unix.EpollEvent{Events: unix.EPOLLIN, Fd: int32(e.sock.fd)}
	if err := e.ctl(unix.EPOLL_CTL_ADD, &e.evIn); err != nil {
		return fmt.Errorf("epoll_ctl add: %w", err)
	}
	e.armed = true
	return nil
}

func (e *epollRecv) disarm() {
	if !e.armed {
		return
	}
	if e.ctl(unix.EPOLL_CTL_DEL, nil) == nil {
		e.armed = false
	}
}

// ctl changes the instance's watch of the socket. Once the instance is an os.File it
// goes through its RawConn, which holds the descriptor open for the call: a Conn closed
// meanwhile fails it instead of letting it reach a number reused by another file.
func (e *epollRecv) ctl(op int, ev *unix.EpollEvent) error {
	if e.eprc == nil {
		return unix.EpollCtl(e.epfd, op, e.sock.fd, ev)
	}
	e.op, e.ev = op, ev
	if cerr := e.eprc.Control(e.ctlFn); cerr != nil {
		return cerr
	}
	return e.ctlErr
}

// ctlOnce is ctl's call on the instance's descriptor (its arguments in e: a closure per
// call would allocate on ReadBatch's path back from polling).
func (e *epollRecv) ctlOnce(fd uintptr) { e.ctlErr = unix.EpollCtl(int(fd), e.op, e.sock.fd, e.ev) }

// Control runs f on the socket (syscall.RawConn).
func (e *epollRecv) Control(f func(fd uintptr)) error { return e.sock.Control(f) }

// Read calls f on the socket until it reports done, waiting in the netpoller for the
// epoll instance between tries (syscall.RawConn). The socket is armed first.
func (e *epollRecv) Read(f func(fd uintptr) bool) error {
	if err := e.arm(); err != nil {
		return err
	}
	e.cur, e.serr = f, nil
	err := e.eprc.Read(e.try)
	e.cur = nil
	if e.serr != nil {
		return e.serr
	}
	if errors.Is(err, os.ErrClosed) {
		return errClosedRecv
	}
	return err
}

// tryOnce runs Read's function on the socket (not on the epoll instance the netpoller
// hands it).
func (e *epollRecv) tryOnce(uintptr) bool {
	done, open := e.sock.use(e.cur)
	if !open {
		e.serr = errClosedRecv
		return true
	}
	return done
}

// poll calls f on the socket once: PollBatch's read, which leaves the watch as it is.
func (e *epollRecv) poll(f func(fd uintptr) bool) error {
	if _, open := e.sock.use(f); !open {
		return errClosedRecv
	}
	return nil
}

// Write is not used: the receive socket sends nothing (syscall.RawConn).
func (e *epollRecv) Write(func(fd uintptr) bool) error { return errors.ErrUnsupported }

// setReadDeadline interrupts (or clears the interruption of) a blocked Read.
func (e *epollRecv) setReadDeadline(t time.Time) { e.ep.SetReadDeadline(t) }

// close closes the instance, which ends a blocked Read, then the socket.
func (e *epollRecv) close() error {
	e.ep.Close()
	return e.sock.close()
}

// errClosedRecv is what a Read ended by close returns; readErr reports it as
// net.ErrClosed because the Conn is closed by then.
var errClosedRecv = errors.New("receive socket closed")

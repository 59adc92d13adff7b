//go:build linux

package server

import (
	"errors"
	"fmt"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/goverbs/goverbs/internal/attach"
	"github.com/goverbs/goverbs/internal/shm"
	"github.com/goverbs/goverbs/verbs/driver"
)

// session is one attached process: its objects, its doorbell and its event socket.
type session struct {
	d    *device
	c    *net.UnixConn
	ev   *net.UnixConn // our end of the event socket
	evq  chan [attach.EventLen]byte
	db   *shm.Eventfd // the client writes it when the pump sleeps
	pid  int
	prog string
	done chan struct{}

	// The engine's goroutines signal the doorbell and queue events at any time, also
	// while the session is torn down: these guard the descriptor (a closed eventfd's
	// number may be reused by then) and the channel.
	dbMu     sync.RWMutex
	dbClosed bool
	evMu     sync.Mutex
	evClosed bool

	// mu guards everything below; the pump holds it while it works, so that a
	// command that destroys an object never pulls memory from under it.
	mu      sync.Mutex
	closing bool
	next    uint32
	objs    map[uint32]any
	qps     []*qpObj
	srqs    []*srqObj
	cqs     []*cqObj
	pumped  chan struct{}
	// With the daemon's event loop (loop.go): the doorbell's token in the loop's set,
	// whether the pump is parked (the loop then does its work), and the pump's wake-up.
	loopTok int32
	parked  bool
	resume  chan struct{}
	lazy    atomic.Bool // the session has a QP with lazyRecv

	cm cmState // rdma_cm channels and ids (cm.go)

	// own: the client runs an engine of its own on the device's address (ENGINE): its
	// socket in the device's group, whose QPNs are the client's (steer.go).
	own *steerMember
	// ownStat: the own engine's stat socket (ENGINE_STAT, ownstat.go).
	ownStat *ownStat
}

var errHandle = driver.NewError(driver.ErrInvalidAttr, "no such object in this process")

func newSession(d *device, c *net.UnixConn) (*session, error) {
	newEventfd := shm.NewEventfd
	if d.driven {
		newEventfd = shm.NewUnwatchedEventfd // the loop's epoll waits for it, not the netpoller
	}
	db, err := newEventfd()
	if err != nil {
		return nil, err
	}
	s := &session{d: d, c: c, db: db, pid: shm.PeerPID(c), done: make(chan struct{}), objs: map[uint32]any{},
		evq: make(chan [attach.EventLen]byte, 256), pumped: make(chan struct{}), resume: make(chan struct{}, 1)}
	return s, nil
}

// serve reads commands until the client goes (its socket closes when the process
// dies, however it dies), then tears the session down.
func (s *session) serve() {
	defer close(s.done)
	defer s.teardown()
	buf := make([]byte, attach.MaxMsg)
	for {
		n, fds, err := shm.Recv(s.c, buf)
		if err != nil || n == 0 {
			return
		}
		h, payload, err := attach.ParseHeader(buf[:n])
		if err != nil || h.Op&attach.ReplyBit != 0 {
			shm.CloseFDs(fds)
			return // a client that cannot frame its messages is not talking to us
		}
		if s.ev == nil && h.Op != attach.OpHello {
			shm.CloseFDs(fds)
			return
		}
		r := attach.Reader{B: payload}
		w := attach.Writer{B: make([]byte, attach.HdrLen, 256)}
		out, err := s.command(h.Op, &r, &w, fds)
		if err == nil && r.Err != nil {
			err = driver.NewError(driver.ErrInvalidAttr, r.Err.Error())
		}
		var errno syscall.Errno
		if err != nil {
			var kind uint32
			errno, kind = attach.Classify(err)
			w.B = w.B[:attach.HdrLen]
			w.U32(kind)
			w.Str(driver.Detail(err))
			closeFiles(out)
			out = nil
		}
		attach.PutHeader(w.B, attach.Header{Op: h.Op | attach.ReplyBit, Seq: h.Seq, Errno: int32(errno), Len: uint32(len(w.B) - attach.HdrLen)})
		fdn := make([]int, len(out))
		for i, f := range out {
			fdn[i] = int(f.Fd())
		}
		err = shm.Send(s.c, w.B, fdn...)
		for _, f := range out {
			if f != s.db.File() {
				f.Close() // ours were duplicates (see dupFile) or sent once
			}
		}
		if err != nil {
			return
		}
	}
}

func closeFiles(fs []*os.File) {
	for _, f := range fs {
		f.Close()
	}
}

// dupFile is a duplicate of f to send: the reply path closes what it sent.
func dupFile(f *os.File) (*os.File, error) {
	rc, err := f.SyscallConn()
	if err != nil {
		return nil, err
	}
	var nfd int
	var derr error
	rc.Control(func(fd uintptr) { nfd, derr = unix.FcntlInt(fd, unix.F_DUPFD_CLOEXEC, 0) })
	if derr != nil {
		return nil, derr
	}
	return os.NewFile(uintptr(nfd), f.Name()), nil
}

func (s *session) add(o any) uint32 {
	s.next++
	for s.next == 0 || s.objs[s.next] != nil {
		s.next++
	}
	s.objs[s.next] = o
	return s.next
}

// get looks a handle up in this session's table, as type T.
func get[T any](s *session, h uint32) (T, error) {
	o, ok := s.objs[h].(T)
	if !ok {
		return o, fmt.Errorf("%w (handle %d)", errHandle, h)
	}
	return o, nil
}

// event queues an async event for the client; a client that does not read its event
// socket loses events rather than stalling the device.
func (s *session) event(typ, kind, h uint32) {
	var e [attach.EventLen]byte
	w := attach.Writer{B: e[:0]}
	w.U32(typ)
	w.U32(kind)
	w.U32(h)
	w.U32(0)
	s.evMu.Lock()
	defer s.evMu.Unlock()
	if s.evClosed {
		return
	}
	select {
	case s.evq <- e:
	default:
	}
}

// signal writes the doorbell, unless the session has closed it.
func (s *session) signal() {
	s.dbMu.RLock()
	if !s.dbClosed {
		s.db.Signal()
	}
	s.dbMu.RUnlock()
}

func (s *session) writeEvents() {
	for e := range s.evq {
		if _, err := s.ev.Write(e[:]); err != nil {
			for range s.evq {
			}
			return
		}
	}
}

// hello answers HELLO: the protocol version, the device, and two descriptors: the
// event socket and the doorbell eventfd.
func (s *session) hello(r *attach.Reader, w *attach.Writer) ([]*os.File, error) {
	v := r.U32()
	r.U32() // the pid the client says it has; SO_PEERCRED's is the one we trust
	s.prog = r.Str()
	if v != attach.Version {
		return nil, driver.NewError(errors.ErrUnsupported, fmt.Sprintf("protocol version %d (the daemon speaks %d)", v, attach.Version))
	}
	if s.ev != nil {
		return nil, driver.NewError(driver.ErrInvalidAttr, "HELLO twice")
	}
	ev, peer, err := eventSocket("attach-events")
	if err != nil {
		return nil, err
	}
	if l := s.d.srv.loop; l != nil && s.d.driven {
		// The loop serves the sessions of the devices whose sockets and rings it
		// reads; on the others (busy-poll) it would only stand between the doorbell
		// and the engine's own receive path.
		tok, err := l.addSession(s)
		if err != nil {
			ev.Close()
			peer.Close()
			return nil, err
		}
		s.loopTok = tok
	}
	s.ev = ev
	go s.writeEvents()
	go s.pump()
	db, err := dupFile(s.db.File())
	if err != nil {
		peer.Close()
		return nil, err
	}
	w.U32(attach.Version)
	w.Str(s.d.cfg.Name)
	w.U64(s.d.dev.Query().NodeGUID)
	s.d.srv.log.Info("attached", "device", s.d.cfg.Name, "pid", s.pid, "program", s.prog)
	return []*os.File{peer, db}, nil
}

// eventSocket makes a SOCK_SEQPACKET pair: the daemon's end, in Go's netpoller, and the
// end that goes to the client with the reply (the session's events, a CM channel's).
func eventSocket(name string) (*net.UnixConn, *os.File, error) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, nil, err
	}
	ours := os.NewFile(uintptr(fds[0]), name)
	c, err := net.FileConn(ours)
	ours.Close()
	if err != nil {
		unix.Close(fds[1])
		return nil, nil, err
	}
	return c.(*net.UnixConn), os.NewFile(uintptr(fds[1]), name+"-peer"), nil
}

// teardown destroys what the client left, as the kernel does for a process that exits
// with verbs open: QPs first (peers see them stop answering), then SRQs, XRC domains, windows,
// address handles, regions, CQs, PDs.
func (s *session) teardown() {
	s.d.drop(s) // no port event is sent to it from now on
	s.cmTeardown()
	s.mu.Lock()
	s.closing = true
	s.mu.Unlock()
	s.signal()
	s.resumePump()
	if s.ev != nil {
		<-s.pumped // the pump has left the shared queues
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, pass := range []func(any){
		func(o any) {
			if q, ok := o.(*qpObj); ok {
				s.destroyQP(q)
			}
		},
		func(o any) {
			if q, ok := o.(*srqObj); ok {
				s.destroySRQ(q)
			}
		},
		func(o any) {
			if x, ok := o.(*xrcdObj); ok {
				s.closeXRCD(x)
			}
		},
		func(o any) {
			if m, ok := o.(*mwObj); ok {
				m.mw.Close()
			}
		},
		func(o any) {
			if a, ok := o.(*ahObj); ok {
				a.ah.Close()
			}
		},
		func(o any) {
			if m, ok := o.(*mrObj); ok {
				s.deregMR(m)
			}
		},
		func(o any) {
			if c, ok := o.(*cqObj); ok {
				s.destroyCQ(c)
			}
		},
		func(o any) {
			if p, ok := o.(*pdObj); ok {
				p.pd.Close()
			}
		},
	} {
		for _, o := range s.objs {
			pass(o)
		}
	}
	clear(s.objs) // every owner entry went with its object: no event comes now
	if s.own != nil {
		// Its QPNs fall to the daemon's engine, which has no such QP: peers see their
		// retries run out, as with a QP destroyed. The socket leaves the group once the
		// process holds it no more.
		s.d.steer.leave(s.own, s.pid)
		s.own = nil
	}
	if s.ownStat != nil {
		s.ownStat.close()
		s.ownStat = nil
	}
	s.c.Close()
	if s.loopTok != 0 {
		s.d.srv.loop.removeSession(s.loopTok, s.db.FD())
	}
	s.dbMu.Lock()
	s.dbClosed = true
	s.db.Close()
	s.dbMu.Unlock()
	s.evMu.Lock()
	s.evClosed = true
	close(s.evq) // the writer drains it and ends
	s.evMu.Unlock()
	if s.ev != nil {
		s.ev.Close()
	}
	if s.prog != "" || s.pid != 0 {
		s.d.srv.log.Info("detached", "device", s.d.cfg.Name, "pid", s.pid, "program", s.prog)
	}
}

// engine answers ENGINE: a socket bound to the device's address and port in the
// device's SO_REUSEPORT group, and the QPN range whose datagrams the kernel steers to
// it, for a client that runs an engine of its own there (steer.go). The daemon keeps a
// descriptor of the socket until the session has ended.
func (s *session) engine(r *attach.Reader, w *attach.Writer) ([]*os.File, error) {
	if flags := r.U32(); flags != 0 {
		return nil, driver.NewError(driver.ErrInvalidAttr, fmt.Sprintf("ENGINE flags %#x", flags))
	}
	if s.d.steer == nil {
		return nil, driver.NewError(errors.ErrUnsupported, "this device runs no clients' engines (another backend, GOVERBS_SERVE_ENGINES=0, or the kernel refused SO_ATTACH_REUSEPORT_CBPF)")
	}
	if s.own != nil {
		return nil, driver.NewError(driver.ErrInvalidAttr, "ENGINE twice")
	}
	m, err := s.d.steer.join()
	if err != nil {
		return nil, driver.NewError(driver.ErrLimit, err.Error())
	}
	f, err := m.file()
	if err != nil {
		s.d.steer.leave(m, 0)
		return nil, err
	}
	s.own = m
	first, last := m.QPNs()
	w.U32(first)
	w.U32(last)
	s.d.srv.log.Info("own engine", "device", s.d.cfg.Name, "pid", s.pid, "qpns", fmt.Sprintf("%#06x-%#06x", first, last))
	return []*os.File{f}, nil
}

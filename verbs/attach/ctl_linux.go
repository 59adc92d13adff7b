package attach

import (
	"fmt"
	"net"
	"os"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/goverbs/goverbs/internal/attach"
	"github.com/goverbs/goverbs/internal/shm"
	"github.com/goverbs/goverbs/verbs/driver"
)

// ctl is the control socket: one command at a time, as the kernel's uverbs file
// takes one write per command.
type ctl struct {
	mu   sync.Mutex
	c    *net.UnixConn
	seq  uint32
	buf  []byte
	dead bool
}

var errGone = driver.NewError(driver.ErrUnavailable, "the goverbs serve daemon is gone")

// call sends op with the payload build writes (and fds), and returns the reply's
// payload and descriptors. A refusal is a *attach.RemoteError.
func (c *ctl) call(op attach.Op, build func(w *attach.Writer), fds ...int) (attach.Reader, []*os.File, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.dead {
		return attach.Reader{}, nil, errGone
	}
	w := attach.Writer{B: make([]byte, attach.HdrLen, 128)}
	if build != nil {
		build(&w)
	}
	c.seq++
	attach.PutHeader(w.B, attach.Header{Op: op, Seq: c.seq, Len: uint32(len(w.B) - attach.HdrLen)})
	if err := shm.Send(c.c, w.B, fds...); err != nil {
		c.dead = true
		return attach.Reader{}, nil, fmt.Errorf("%w: %v", errGone, err)
	}
	if c.buf == nil {
		c.buf = make([]byte, attach.MaxMsg)
	}
	n, rfds, err := shm.Recv(c.c, c.buf)
	if err != nil || n == 0 {
		c.dead = true
		return attach.Reader{}, nil, errGone
	}
	files := make([]*os.File, len(rfds))
	for i, fd := range rfds {
		files[i] = os.NewFile(uintptr(fd), "attach")
	}
	h, payload, err := attach.ParseHeader(c.buf[:n])
	if err != nil || h.Op != op|attach.ReplyBit || h.Seq != c.seq {
		closeAll(files)
		c.dead = true
		return attach.Reader{}, nil, fmt.Errorf("%w: bad reply", errGone)
	}
	r := attach.Reader{B: append([]byte(nil), payload...)}
	if h.Errno != 0 {
		closeAll(files)
		kind := r.U32()
		msg := r.Str()
		return attach.Reader{}, nil, &attach.RemoteError{Errno: syscall.Errno(h.Errno), Kind: kind, Msg: msg}
	}
	return r, files, nil
}

func (c *ctl) close() {
	c.mu.Lock()
	c.dead = true
	c.mu.Unlock()
	c.c.Close()
}

func closeAll(fs []*os.File) {
	for _, f := range fs {
		f.Close()
	}
}

// want checks that a reply carried n descriptors and its payload parsed.
func want(r *attach.Reader, files []*os.File, n int) error {
	if len(files) != n || r.Err != nil {
		closeAll(files)
		return fmt.Errorf("%w: malformed reply", errGone)
	}
	return nil
}

// eventfd takes the eventfd a reply carried: a descriptor of its own, since f's
// finalizer would close f's.
func eventfd(f *os.File) (*shm.Eventfd, error) {
	defer f.Close()
	fd, err := unix.FcntlInt(f.Fd(), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	return shm.EventfdFrom(fd)
}

// doorbell takes the doorbell eventfd a reply carried, which the client only writes
// (shm.SignalOnlyEventfdFrom: not in Go's netpoller).
func doorbell(f *os.File) (*shm.Eventfd, error) {
	defer f.Close()
	fd, err := unix.FcntlInt(f.Fd(), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	return shm.SignalOnlyEventfdFrom(fd)
}

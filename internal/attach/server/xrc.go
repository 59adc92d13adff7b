//go:build linux

package server

import (
	"errors"
	"fmt"
	"os"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/goverbs/goverbs/internal/attach"
	"github.com/goverbs/goverbs/internal/shm"
	"github.com/goverbs/goverbs/verbs/driver"
)

// XRC (IBTA Vol. 1 Annex A14) for attached processes. A domain opened with a file is
// the engine's domain of that file's inode, so every client that opens the same file
// shares it, as processes share one through ibv_open_xrcd on a kernel device. The file
// comes as a descriptor (SCM_RIGHTS), never as a number: holding it is the proof that
// the client could open the file, and the daemon names the inode by fstat(2) of it.

// xrcdObj is one open of an XRC domain; f is the client's file, kept open while the
// open lives so that its inode, the domain's name, cannot be reused meanwhile.
type xrcdObj struct {
	x driver.XRCD
	f *os.File
}

// openXRCD answers OPEN_XRCD: u32 oflags, and the file's descriptor or none (a domain
// of the client's own, ibv_open_xrcd's fd -1).
func (s *session) openXRCD(r *attach.Reader, w *attach.Writer, fds []int) error {
	oflags := r.U32()
	if r.Err != nil || len(fds) > 1 {
		shm.CloseFDs(fds)
		return driver.NewError(driver.ErrInvalidAttr, "OPEN_XRCD carries u32 oflags and at most one descriptor")
	}
	xd, ok := s.d.dev.(driver.XRCDevice)
	if !ok {
		shm.CloseFDs(fds)
		return driver.NewError(errors.ErrUnsupported, "the device has no XRC")
	}
	fd := -1
	var f *os.File
	if len(fds) == 1 {
		fd = fds[0]
		// An O_PATH descriptor names a file without having opened it (it needs no read
		// permission): the kernel's fdget refuses it, and so do we.
		if fl, err := unix.FcntlInt(uintptr(fd), unix.F_GETFL, 0); err != nil || fl&unix.O_PATH != 0 {
			unix.Close(fd)
			return fmt.Errorf("verbs: XRC domain file: not an open file: %w", syscall.EBADF)
		}
		f = os.NewFile(uintptr(fd), "xrcd")
	}
	x, err := xd.OpenXRCD(fd, int(oflags))
	if err != nil {
		if f != nil {
			f.Close()
		}
		return err
	}
	w.U32(s.add(&xrcdObj{x: x, f: f}))
	return nil
}

// closeXRCD closes one open; the engine refuses (EBUSY) while SRQs or QPs made through
// it exist.
func (s *session) closeXRCD(x *xrcdObj) error {
	if err := x.x.Close(); err != nil {
		return err
	}
	if x.f != nil {
		x.f.Close()
	}
	return nil
}

// createXRCSRQ answers CREATE_XRC_SRQ: u32 pd, u32 xrcd, u32 cq, then max_wr, max_sge,
// srq_limit as CREATE_SRQ; the reply is CREATE_SRQ's and u32 srq_num.
func (s *session) createXRCSRQ(r *attach.Reader, w *attach.Writer) ([]*os.File, error) {
	ph, xh, ch := r.U32(), r.U32(), r.U32()
	a := driver.SRQAttr{MaxWR: r.U32(), MaxSGE: r.U32(), SRQLimit: r.U32()}
	if r.Err != nil {
		return nil, r.Err
	}
	p, err := get[*pdObj](s, ph)
	if err != nil {
		return nil, err
	}
	x, err := get[*xrcdObj](s, xh)
	if err != nil {
		return nil, err
	}
	c, err := get[*cqObj](s, ch)
	if err != nil {
		return nil, err
	}
	if a.MaxSGE > attach.MaxSGE {
		return nil, errUnsupportedSGE
	}
	srq, err := p.pd.CreateXRCSRQ(x.x, c.cq, a)
	if err != nil {
		return nil, err
	}
	files, err := s.addSRQ(&srqObj{pd: p, cq: c, srq: srq}, w)
	if err != nil {
		return nil, err
	}
	var num uint32
	if n, ok := srq.(driver.NumberedSRQ); ok {
		num = n.Num()
	}
	w.U32(num)
	return files, nil
}

// createXRCRecvQP answers CREATE_XRC_RECV_QP: u32 xrcd; the reply is u32 qp, u32 qp_num.
// The QP has no rings: MODIFY_QP, QUERY_QP and DESTROY_QP serve it.
func (s *session) createXRCRecvQP(r *attach.Reader, w *attach.Writer) error {
	x, err := get[*xrcdObj](s, r.U32())
	if err != nil {
		return err
	}
	qp, err := x.x.CreateQP(&driver.QPInit{Type: driver.QPTypeXRCRecv})
	if err != nil {
		return err
	}
	q := &qpObj{qp: qp, typ: driver.QPTypeXRCRecv, xrcd: x}
	q.h = s.add(q)
	s.d.own(qp, owner{s: s, h: q.h, kind: attach.EventQP})
	w.U32(q.h)
	w.U32(qp.QPN())
	return nil
}

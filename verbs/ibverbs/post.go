//go:build ibverbs

package ibverbs

/*
// The posts pass a pointer to a Go local (the index of a refused request): without
// noescape every post would move it to the heap, one allocation per call.
#cgo noescape gv_post_send
#cgo nocallback gv_post_send
#cgo noescape gv_post_recv
#cgo nocallback gv_post_recv
#include <stdlib.h>
#include "shim.h"
*/
import "C"

import (
	"fmt"
	"runtime"
	"sync"
	"syscall"
	"time"
	"unsafe"

	"github.com/goverbs/goverbs/verbs/driver"
)

// The posts copy the caller's SGEs into C memory as they are: driver.SGE and struct
// ibv_sge have one layout, which these declarations check when compiling (an array
// length may not be negative, so each difference must be 0).
var (
	_ [unsafe.Sizeof(driver.SGE{}) - C.sizeof_struct_ibv_sge]struct{}
	_ [C.sizeof_struct_ibv_sge - unsafe.Sizeof(driver.SGE{})]struct{}
	_ [unsafe.Offsetof(driver.SGE{}.Length) - unsafe.Offsetof(C.struct_ibv_sge{}.length)]struct{}
	_ [unsafe.Offsetof(C.struct_ibv_sge{}.length) - unsafe.Offsetof(driver.SGE{}.Length)]struct{}
	_ [unsafe.Offsetof(driver.SGE{}.LKey) - unsafe.Offsetof(C.struct_ibv_sge{}.lkey)]struct{}
	_ [unsafe.Offsetof(C.struct_ibv_sge{}.lkey) - unsafe.Offsetof(driver.SGE{}.LKey)]struct{}
)

// sendQueue is the C memory a QP's posts convert send work requests into: postBatch
// requests at most per call, each with room for the QP's max_send_sge SGEs.
type sendQueue struct {
	mu     sync.Mutex
	yield  yieldPacer // used when the device's posts run the transport
	n      int        // work requests the scratch holds
	maxSGE int
	in     *C.struct_gv_send_wr
	wrs    *C.struct_ibv_send_wr
	sges   *C.struct_ibv_sge
}

func (s *sendQueue) init(maxWR, maxSGE int) {
	s.n, s.maxSGE = min(max(maxWR, 1), postBatch), max(maxSGE, 1)
	s.in = (*C.struct_gv_send_wr)(C.calloc(C.size_t(s.n), C.sizeof_struct_gv_send_wr))
	s.wrs = (*C.struct_ibv_send_wr)(C.calloc(C.size_t(s.n), C.sizeof_struct_ibv_send_wr))
	s.sges = (*C.struct_ibv_sge)(C.calloc(C.size_t(s.n*s.maxSGE), C.sizeof_struct_ibv_sge))
}

func (s *sendQueue) free() {
	C.free(unsafe.Pointer(s.in))
	C.free(unsafe.Pointer(s.wrs))
	C.free(unsafe.Pointer(s.sges))
	s.n, s.in, s.wrs, s.sges = 0, nil, nil, nil // not *s = …: s.mu is held
}

// recvQueue is the same for receive work requests (a QP's own or an SRQ's).
type recvQueue struct {
	mu     sync.Mutex
	n      int
	maxSGE int
	wrs    *C.struct_ibv_recv_wr
	sges   *C.struct_ibv_sge
}

func (r *recvQueue) init(maxWR, maxSGE int) {
	r.n, r.maxSGE = min(max(maxWR, 1), postBatch), max(maxSGE, 1)
	r.wrs = (*C.struct_ibv_recv_wr)(C.calloc(C.size_t(r.n), C.sizeof_struct_ibv_recv_wr))
	r.sges = (*C.struct_ibv_sge)(C.calloc(C.size_t(r.n*r.maxSGE), C.sizeof_struct_ibv_sge))
}

func (r *recvQueue) free() {
	C.free(unsafe.Pointer(r.wrs))
	C.free(unsafe.Pointer(r.sges))
	r.n, r.wrs, r.sges = 0, nil, nil // not *r = …: r.mu is held
}

// postErr classifies a failed ibv_post_send/ibv_post_recv: ENOMEM there means the work
// queue is full.
func postErr(op string, rc int) error {
	if rc == int(syscall.ENOMEM) || rc == -int(syscall.ENOMEM) {
		return &driver.Error{Kind: driver.ErrQueueFull, Err: fmt.Errorf("%s: %w", op, syscall.ENOMEM)}
	}
	return rcErr(op, rc)
}

// PostSend converts up to postBatch work requests at a time into the QP's C memory and
// posts them with one cgo call. A request refused while converting is reported after the
// ones before it are posted. On a device whose posts run the transport (rxe) it passes
// through the scheduler now and then, outside the lock: see yield.go.
func (q *qp) PostSend(wrs []driver.SendWR) error {
	yield, err := q.postSend(wrs)
	if yield {
		runtime.Gosched()
	}
	return err
}

func (q *qp) postSend(wrs []driver.SendWR) (yield bool, err error) {
	s := &q.send
	s.mu.Lock()
	defer s.mu.Unlock()
	if q.qp == nil {
		return false, &driver.PostError{Index: 0, Err: errClosed("QP")}
	}
	yield = q.dev.postsRunTransport && s.yield.due(time.Now())
	in := unsafe.Slice(s.in, s.n)
	sges := unsafe.Slice((*driver.SGE)(unsafe.Pointer(s.sges)), s.n*s.maxSGE)
	for base := 0; base < len(wrs); base += s.n {
		n := min(len(wrs)-base, s.n)
		var convErr error
		for i := range n {
			if convErr = q.convert(&in[i], &wrs[base+i], sges[i*s.maxSGE:(i+1)*s.maxSGE]); convErr != nil {
				n = i
				break
			}
		}
		if n > 0 {
			var bad C.int
			if rc := C.gv_post_send(q.qp, &in[0], C.int(n), s.wrs, s.sges, C.int(s.maxSGE), &bad); rc != 0 {
				return yield, &driver.PostError{Index: base + int(bad), Err: postErr("ibv_post_send", int(rc))}
			}
		}
		if convErr != nil {
			return yield, &driver.PostError{Index: base + n, Err: convErr}
		}
	}
	return yield, nil
}

// convert fills one C work request from wr; sges is its room for SGEs. It refuses what
// would make the provider library itself fault, not the device: a UD send without an
// address handle, and inline data from memory no region of the device covers (the
// library copies inline data with the CPU, at the address the SGE gives).
func (q *qp) convert(g *C.struct_gv_send_wr, wr *driver.SendWR, sges []driver.SGE) error {
	if len(wr.SGL) > len(sges) {
		return &driver.Error{Kind: driver.ErrInvalidAttr,
			Err: fmt.Errorf("%d SGEs, the QP was created for %d", len(wr.SGL), len(sges))}
	}
	if wr.Flags&driver.SendInline != 0 {
		for i := range wr.SGL {
			if !q.dev.covered(&wr.SGL[i]) {
				return &driver.Error{Kind: driver.ErrInvalidAttr,
					Err: fmt.Errorf("inline SGE %d is outside the region its lkey names", i)}
			}
		}
	}
	copy(sges, wr.SGL)
	*g = C.struct_gv_send_wr{
		wr_id: C.uint64_t(wr.ID), remote_addr: C.uint64_t(wr.RemoteAddr),
		compare_add: C.uint64_t(wr.CompareAdd), swap: C.uint64_t(wr.Swap),
		opcode: C.uint32_t(wr.Opcode), send_flags: C.uint32_t(wr.Flags), imm: C.uint32_t(wr.Imm),
		rkey: C.uint32_t(wr.RKey), num_sge: C.uint32_t(len(wr.SGL)), remote_srqn: C.uint32_t(wr.RemoteSRQN),
	}
	var ahRef driver.AH
	if wr.AH != nil {
		ahRef = wr.AH.DriverAH()
	}
	if q.ud && ahRef == nil {
		return &driver.Error{Kind: driver.ErrInvalidAttr, Err: fmt.Errorf("a UD send needs an address handle")}
	}
	if ahRef != nil {
		a, ok := ahRef.(*ah)
		if !ok {
			return errWrongDevice("address handle")
		}
		a.mu.Lock()
		g.ah = a.ah
		a.mu.Unlock()
		if g.ah == nil {
			return errClosed("address handle")
		}
		g.remote_qpn, g.remote_qkey = C.uint32_t(wr.RemoteQPN), C.uint32_t(wr.RemoteQKey)
	}
	if wr.Opcode == driver.WRBindMW {
		if wr.Bind == nil || wr.Bind.MW == nil {
			return &driver.Error{Kind: driver.ErrInvalidAttr, Err: fmt.Errorf("BIND_MW without a window")}
		}
		w, ok := wr.Bind.MW.DriverMW().(*mw)
		if !ok {
			return errWrongDevice("memory window")
		}
		w.mu.Lock()
		g.mw = w.mw
		h, err := w.bindRegion(wr.Bind.MR, wr.Bind.Length)
		w.mu.Unlock()
		if g.mw == nil {
			return errClosed("memory window")
		}
		if err != nil {
			return err
		}
		g.bind_mr = h
		g.bind_rkey = C.uint32_t(wr.Bind.RKey)
		g.bind_addr, g.bind_length = C.uint64_t(wr.Bind.Addr), C.uint64_t(wr.Bind.Length)
		g.bind_access = C.uint32_t(wr.Bind.Access)
	}
	return nil
}

func (q *qp) PostRecv(wrs []driver.RecvWR) error {
	if q.srq != nil {
		return &driver.PostError{Index: 0, Err: &driver.Error{Kind: driver.ErrInvalidAttr,
			Err: fmt.Errorf("the QP receives from an SRQ; post there")}}
	}
	q.recv.mu.Lock()
	defer q.recv.mu.Unlock()
	if q.qp == nil {
		return &driver.PostError{Index: 0, Err: errClosed("QP")}
	}
	return q.recv.post(q.qp, nil, wrs)
}

// post converts and posts receive work requests to qp, or to srq when it is not nil.
func (r *recvQueue) post(qp *C.struct_ibv_qp, srq *C.struct_ibv_srq, wrs []driver.RecvWR) error {
	out := unsafe.Slice(r.wrs, r.n)
	sges := unsafe.Slice((*driver.SGE)(unsafe.Pointer(r.sges)), r.n*r.maxSGE)
	for base := 0; base < len(wrs); base += r.n {
		n := min(len(wrs)-base, r.n)
		var convErr error
		for i := range n {
			wr := &wrs[base+i]
			if len(wr.SGL) > r.maxSGE {
				convErr = &driver.Error{Kind: driver.ErrInvalidAttr,
					Err: fmt.Errorf("%d SGEs, the queue was created for %d", len(wr.SGL), r.maxSGE)}
				n = i
				break
			}
			copy(sges[i*r.maxSGE:], wr.SGL)
			out[i].wr_id = C.uint64_t(wr.ID)
			out[i].num_sge = C.int(len(wr.SGL))
		}
		if n > 0 {
			var bad C.int
			if rc := C.gv_post_recv(qp, srq, r.wrs, C.int(n), r.sges, C.int(r.maxSGE), &bad); rc != 0 {
				op := "ibv_post_recv"
				if srq != nil {
					op = "ibv_post_srq_recv"
				}
				return &driver.PostError{Index: base + int(bad), Err: postErr(op, int(rc))}
			}
		}
		if convErr != nil {
			return &driver.PostError{Index: base + n, Err: convErr}
		}
	}
	return nil
}

// BindMW binds a type 1 window through the send queue (ibv_bind_mw).
func (q *qp) BindMW(w driver.MW, id uint64, flags driver.SendFlags, b driver.MWBind) (uint32, error) {
	win, ok := w.(*mw)
	if !ok {
		return 0, errWrongDevice("memory window")
	}
	q.send.mu.Lock()
	defer q.send.mu.Unlock()
	if q.qp == nil {
		return 0, errClosed("QP")
	}
	win.mu.Lock()
	defer win.mu.Unlock()
	if win.mw == nil {
		return 0, errClosed("memory window")
	}
	mrh, err := win.bindRegion(b.MR, b.Length)
	if err != nil {
		return 0, err
	}
	var rkey C.uint32_t
	rc := C.gv_bind_mw(q.qp, win.mw, C.uint64_t(id), C.uint(flags), mrh, C.uint64_t(b.Addr),
		C.uint64_t(b.Length), C.uint(b.Access), &rkey)
	if rc != 0 {
		return 0, postErr("ibv_bind_mw", int(rc))
	}
	return uint32(rkey), nil
}

// bindRegion returns the region a binding of w names, and remembers it, with w.mu held.
// Only a nil reference means none; a reference to a nil region is a lookup that failed,
// refused rather than taken for an unbind. An unbind (no region, length 0) names the
// region w was last bound to: providers read the region's lkey even to unbind (rxe's
// library faults on a NULL one, seen in the VM; mlx4's and bnxt_re's do the same).
func (w *mw) bindRegion(ref driver.MRRef, length uint64) (*C.struct_ibv_mr, error) {
	if ref == nil {
		if length != 0 {
			return nil, &driver.Error{Kind: driver.ErrInvalidAttr, Err: fmt.Errorf("a binding of %d bytes names no memory region", length)}
		}
		if w.bound == nil {
			return nil, &driver.Error{Kind: driver.ErrInvalidAttr, Err: fmt.Errorf("an unbind of a window that was never bound")}
		}
		return w.bound.handle()
	}
	d := ref.DriverMR()
	if d == nil {
		return nil, &driver.Error{Kind: driver.ErrInvalidAttr, Err: fmt.Errorf("the binding names a nil memory region")}
	}
	m, ok := d.(*mr)
	if !ok {
		return nil, errWrongDevice("memory region")
	}
	h, err := m.handle()
	if err == nil {
		w.bound = m
	}
	return h, err
}

//go:build ibverbs

package ibverbs

/*
#include "shim.h"
*/
import "C"

import (
	"errors"
	"sync"

	"github.com/goverbs/goverbs/verbs/driver"
)

// XRC on a kernel device (IBTA Annex A14): ibv_open_xrcd, XRC SRQs by ibv_create_srq_ex,
// ibv_get_srq_num, and the two XRC QP types by ibv_create_qp_ex. Which devices have it
// is the device's IBV_DEVICE_XRC (ConnectX does; Linux rxe does not), which package
// verbs checks before it calls OpenXRCD.

// xrcd is an XRC domain (struct ibv_xrcd). The kernel shares it by inode.
type xrcd struct {
	dev *device
	mu  sync.Mutex
	x   *C.struct_ibv_xrcd // nil once closed
}

func (x *xrcd) rank() int { return rankXRCD }

func (d *device) OpenXRCD(fd int, oflags int) (driver.XRCD, error) {
	if err := d.enter(); err != nil {
		return nil, err
	}
	defer d.exit()
	c, err := C.gv_open_xrcd(d.ctx, C.int(fd), C.int(oflags))
	if c == nil {
		return nil, ibvErr("ibv_open_xrcd", err)
	}
	x := &xrcd{dev: d, x: c}
	d.add(x)
	return x, nil
}

// handle returns the C domain for a creation, or an error once it is closed.
func (x *xrcd) handle() (*C.struct_ibv_xrcd, error) {
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.x == nil {
		return nil, errClosed("XRC domain")
	}
	return x.x, nil
}

func (x *xrcd) Close() error {
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.x == nil {
		return nil
	}
	if rc := C.gv_close_xrcd(x.x); rc != 0 {
		return rcErr("ibv_close_xrcd", int(rc)) // EBUSY while its SRQs or QPs exist
	}
	x.x = nil
	x.dev.remove(x, nil)
	return nil
}

// CreateQP creates an XRC_RECV QP in the domain: no queues, so nothing to post.
func (x *xrcd) CreateQP(init *driver.QPInit) (driver.QP, error) {
	if init.Type != driver.QPTypeXRCRecv {
		return nil, &driver.Error{Kind: driver.ErrInvalidAttr, Err: errors.New("an XRC domain creates XRC_RECV QPs only")}
	}
	if err := x.dev.enter(); err != nil {
		return nil, err
	}
	defer x.dev.exit()
	h, err := x.handle()
	if err != nil {
		return nil, err
	}
	var cap C.struct_ibv_qp_cap
	c, err := C.gv_create_xrc_qp(x.dev.ctx, nil, h, nil, &cap, 0)
	if c == nil {
		return nil, ibvErr("ibv_create_qp_ex", err)
	}
	q := &qp{dev: x.dev, qpn: uint32(c.qp_num), port: 1, qp: c}
	q.send.init(1, 1) // never posted to: the device refuses, as it should
	q.recv.init(1, 1)
	x.dev.add(q)
	return q, nil
}

// createXRCSend creates an XRC_SEND QP: a send queue and no receive queue.
func (p *pd) createXRCSend(h *C.struct_ibv_pd, scq *cq, init *driver.QPInit) (driver.QP, error) {
	scq.mu.Lock()
	sc := scq.cq
	scq.mu.Unlock()
	if sc == nil {
		return nil, errClosed("CQ")
	}
	cap := C.struct_ibv_qp_cap{max_send_wr: C.uint32_t(init.Cap.MaxSendWR), max_send_sge: C.uint32_t(init.Cap.MaxSendSGE),
		max_inline_data: C.uint32_t(init.Cap.MaxInline)}
	sig := C.int(0)
	if init.SigAll {
		sig = 1
	}
	c, err := C.gv_create_xrc_qp(p.dev.ctx, h, nil, sc, &cap, sig)
	if c == nil {
		return nil, ibvErr("ibv_create_qp_ex", err)
	}
	q := &qp{dev: p.dev, qpn: uint32(c.qp_num), port: 1, qp: c}
	q.send.init(int(cap.max_send_wr), int(cap.max_send_sge))
	q.recv.init(1, 1)
	p.dev.add(q)
	return q, nil
}

// CreateXRCSRQ creates an XRC SRQ on the PD for the domain, completing in cq.
func (p *pd) CreateXRCSRQ(xd driver.XRCD, c driver.CQ, attr driver.SRQAttr) (driver.SRQ, error) {
	x, ok1 := xd.(*xrcd)
	q, ok2 := c.(*cq)
	if !ok1 || !ok2 || x.dev != p.dev || q.dev != p.dev {
		return nil, errWrongDevice("XRC domain or CQ")
	}
	h, err := p.enter()
	if err != nil {
		return nil, err
	}
	defer p.dev.exit()
	xh, err := x.handle()
	if err != nil {
		return nil, err
	}
	q.mu.Lock()
	cc := q.cq
	q.mu.Unlock()
	if cc == nil {
		return nil, errClosed("CQ")
	}
	a := C.struct_ibv_srq_attr{max_wr: C.uint32_t(attr.MaxWR), max_sge: C.uint32_t(attr.MaxSGE),
		srq_limit: C.uint32_t(attr.SRQLimit)}
	s, err := C.gv_create_xrc_srq(p.dev.ctx, h, xh, cc, &a)
	if s == nil {
		return nil, ibvErr("ibv_create_srq_ex", err)
	}
	out := &srq{dev: p.dev, srq: s}
	out.recv.init(int(a.max_wr), int(a.max_sge))
	p.dev.add(out)
	return out, nil
}

// Num returns the SRQ's number (ibv_get_srq_num); 0 when the device has none for it.
func (s *srq) Num() uint32 {
	s.recv.mu.Lock()
	defer s.recv.mu.Unlock()
	var n C.uint32_t
	if s.srq == nil || C.gv_get_srq_num(s.srq, &n) != 0 {
		return 0
	}
	return uint32(n)
}

//go:build ibverbs

package ibverbs

/*
#include "shim.h"
*/
import "C"

import (
	"unsafe"

	"github.com/goverbs/goverbs/verbs/driver"
)

// srq is a shared receive queue (struct ibv_srq).
type srq struct {
	dev  *device
	recv recvQueue // recv.mu also guards srq against Close
	srq  *C.struct_ibv_srq
}

func (s *srq) rank() int { return rankSRQ }

func (p *pd) CreateSRQ(attr driver.SRQAttr) (driver.SRQ, error) {
	h, err := p.enter()
	if err != nil {
		return nil, err
	}
	defer p.dev.exit()
	var a C.struct_ibv_srq_init_attr
	a.attr.max_wr = C.uint32_t(attr.MaxWR)
	a.attr.max_sge = C.uint32_t(attr.MaxSGE)
	a.attr.srq_limit = C.uint32_t(attr.SRQLimit)
	c, err := C.ibv_create_srq(h, &a)
	if c == nil {
		return nil, ibvErr("ibv_create_srq", err)
	}
	s := &srq{dev: p.dev, srq: c}
	s.recv.init(int(a.attr.max_wr), int(a.attr.max_sge))
	p.dev.add(s)
	return s, nil
}

func (s *srq) PostRecv(wrs []driver.RecvWR) error {
	s.recv.mu.Lock()
	defer s.recv.mu.Unlock()
	if s.srq == nil {
		return &driver.PostError{Index: 0, Err: errClosed("SRQ")}
	}
	return s.recv.post(nil, s.srq, wrs)
}

// Arm sets the limit below which the device raises EventSRQLimitReached once.
func (s *srq) Arm(limit uint32) error {
	s.recv.mu.Lock()
	defer s.recv.mu.Unlock()
	if s.srq == nil {
		return errClosed("SRQ")
	}
	var a C.struct_ibv_srq_attr
	a.srq_limit = C.uint32_t(limit)
	return rcErr("ibv_modify_srq", int(C.ibv_modify_srq(s.srq, &a, C.IBV_SRQ_LIMIT)))
}

func (s *srq) Query() driver.SRQAttr {
	s.recv.mu.Lock()
	defer s.recv.mu.Unlock()
	if s.srq == nil {
		return driver.SRQAttr{}
	}
	var a C.struct_ibv_srq_attr
	if C.ibv_query_srq(s.srq, &a) != 0 {
		return driver.SRQAttr{}
	}
	return driver.SRQAttr{MaxWR: uint32(a.max_wr), MaxSGE: uint32(a.max_sge), SRQLimit: uint32(a.srq_limit)}
}

func (s *srq) Close() error {
	s.recv.mu.Lock()
	defer s.recv.mu.Unlock()
	if s.srq == nil {
		return nil
	}
	key := unsafe.Pointer(s.srq)
	if rc := C.ibv_destroy_srq(s.srq); rc != 0 {
		return rcErr("ibv_destroy_srq", int(rc)) // EBUSY while QPs use it
	}
	s.srq = nil
	s.recv.free()
	s.dev.remove(s, key)
	return nil
}

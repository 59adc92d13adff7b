//go:build goverbs_capi

package main

/*
#include <errno.h>
#include "gv.h"
*/
import "C"

import (
	"unsafe"

	"github.com/goverbs/goverbs/verbs"
)

// XRC through the drop-in: the verbs_context entries behind the static inline
// ibv_open_xrcd, ibv_close_xrcd, ibv_create_srq_ex, ibv_get_srq_num, and the XRC QP types
// of ibv_create_qp_ex (xrc.c, qp.c).

type xrcDomain struct {
	xrcd *verbs.XRCD
	ctx  *devContext
}

// gv_open_xrcd opens the XRC domain of fd (-1: a new one) on the context's device.
//
//export gv_open_xrcd
func gv_open_xrcd(ch C.uintptr_t, fd, oflags C.int, out *C.uintptr_t) C.int {
	c := handle[*devContext](ch)
	if c == nil {
		return C.EINVAL
	}
	x, err := c.dev.OpenXRCD(int(fd), int(oflags))
	if err != nil {
		return logErr("open XRC domain", err)
	}
	*out = newHandle(&xrcDomain{xrcd: x, ctx: c})
	return 0
}

//export gv_close_xrcd
func gv_close_xrcd(h C.uintptr_t) C.int {
	x := handle[*xrcDomain](h)
	if x == nil {
		return C.EINVAL
	}
	if err := x.xrcd.Close(); err != nil {
		return logErr("close XRC domain", err) // EBUSY while its SRQs or QPs exist
	}
	dropHandle(h)
	return 0
}

// gv_create_xrc_srq creates an XRC SRQ on the PD for the domain, completing in the CQ.
//
//export gv_create_xrc_srq
func gv_create_xrc_srq(ph, xh, cqh C.uintptr_t, a *C.struct_ibv_srq_attr, srq unsafe.Pointer, out *C.uintptr_t) C.int {
	p, x, cq := handle[*protDomain](ph), handle[*xrcDomain](xh), handle[*complQueue](cqh)
	if p == nil || x == nil || cq == nil {
		return C.EINVAL
	}
	s, err := p.pd.CreateSRQEx(verbs.SRQInitEx{Type: verbs.SRQTypeXRC, XRCD: x.xrcd, CQ: cq.cq,
		Attr: verbs.SRQAttr{MaxWR: uint32(a.max_wr), MaxSGE: uint32(a.max_sge), SRQLimit: uint32(a.srq_limit)}})
	if err != nil {
		return logErr("create XRC SRQ", err)
	}
	*out = p.ctx.publishSRQ(s, a, srq)
	return 0
}

//export gv_get_srq_num
func gv_get_srq_num(h C.uintptr_t, num *C.uint32_t) C.int {
	s := handle[*sharedRQ](h)
	if s == nil {
		return C.EINVAL
	}
	n, err := s.srq.Num()
	if err != nil {
		return logErr("get SRQ number", err)
	}
	*num = C.uint32_t(n)
	return 0
}

// gv_create_xrc_recv_qp creates an XRC_RECV QP in the domain; qp is the C object its
// events name.
//
//export gv_create_xrc_recv_qp
func gv_create_xrc_recv_qp(xh C.uintptr_t, qp unsafe.Pointer, out *C.uintptr_t, qpn *C.uint32_t) C.int {
	x := handle[*xrcDomain](xh)
	if x == nil {
		return C.EINVAL
	}
	q, err := x.xrcd.CreateQP(verbs.QPInitAttr{Type: verbs.QPTypeXRCRecv})
	if err != nil {
		return logErr("create QP", err)
	}
	x.ctx.mu.Lock()
	x.ctx.qps[q] = qp
	x.ctx.mu.Unlock()
	*qpn = C.uint32_t(q.QPN())
	*out = newHandle(&queuePair{qp: q, ctx: x.ctx})
	return 0
}

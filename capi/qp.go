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

// The hot path reads the program's ibv_sge arrays in place as verbs.SGE slices: the
// layouts agree (checked at build time below, against the header's).
var _ = [1]struct{}{}[unsafe.Sizeof(verbs.SGE{})-C.sizeof_struct_ibv_sge]
var _ = [1]struct{}{}[unsafe.Offsetof(verbs.SGE{}.LKey)-unsafe.Offsetof(C.struct_ibv_sge{}.lkey)]

type queuePair struct {
	qp  *verbs.QP
	ctx *devContext
}

// gv_create_qp creates a QP on the PD with the given CQs (and SRQ, or 0), writes the
// capacities it got back into cap, and returns its number in *qpn. qp is the C object
// its events name.
//
//export gv_create_qp
func gv_create_qp(ph, sendCQ, recvCQ, srqH C.uintptr_t, typ C.int, sigAll C.int, cap *C.struct_ibv_qp_cap,
	qp unsafe.Pointer, out *C.uintptr_t, qpn *C.uint32_t) C.int {
	p := handle[*protDomain](ph)
	scq, rcq := handle[*complQueue](sendCQ), handle[*complQueue](recvCQ)
	// An XRC_SEND QP has no receive queue: its recv_cq is ignored, as libibverbs does.
	xrcSend := typ == C.IBV_QPT_XRC_SEND
	if p == nil || scq == nil || rcq == nil && !xrcSend {
		return C.EINVAL
	}
	switch typ {
	case C.IBV_QPT_RAW_PACKET, C.IBV_QPT_DRIVER:
		return C.EOPNOTSUPP // real types this device does not have; others are EINVAL
	case C.IBV_QPT_XRC_RECV:
		return C.EINVAL // made from an XRC domain (gv_create_xrc_recv_qp), not a PD
	}
	attr := verbs.QPInitAttr{
		Type: verbs.QPType(typ), SendCQ: scq.cq, SigAll: sigAll != 0,
		Cap: verbs.QPCap{
			MaxSendWR: uint32(cap.max_send_wr), MaxRecvWR: uint32(cap.max_recv_wr),
			MaxSendSGE: uint32(cap.max_send_sge), MaxRecvSGE: uint32(cap.max_recv_sge),
			MaxInline: uint32(cap.max_inline_data),
		},
	}
	if rcq != nil && !xrcSend {
		attr.RecvCQ = rcq.cq
	}
	if srqH != 0 {
		s := handle[*sharedRQ](srqH)
		if s == nil {
			return C.EINVAL
		}
		attr.SRQ = s.srq
	}
	q, err := p.pd.CreateQP(attr)
	if err != nil {
		return logErr("create QP", err)
	}
	p.ctx.mu.Lock()
	p.ctx.qps[q] = qp
	p.ctx.mu.Unlock()
	putCap(cap, q.Query().Cap)
	*qpn = C.uint32_t(q.QPN())
	*out = newHandle(&queuePair{qp: q, ctx: p.ctx})
	return 0
}

func putCap(d *C.struct_ibv_qp_cap, c verbs.QPCap) {
	d.max_send_wr, d.max_recv_wr = C.uint32_t(c.MaxSendWR), C.uint32_t(c.MaxRecvWR)
	d.max_send_sge, d.max_recv_sge = C.uint32_t(c.MaxSendSGE), C.uint32_t(c.MaxRecvSGE)
	d.max_inline_data = C.uint32_t(c.MaxInline)
}

//export gv_destroy_qp
func gv_destroy_qp(h C.uintptr_t) C.int {
	q := handle[*queuePair](h)
	if q == nil {
		return C.EINVAL
	}
	if err := q.qp.Close(); err != nil {
		return logErr("destroy QP", err)
	}
	q.ctx.mu.Lock()
	delete(q.ctx.qps, q.qp)
	q.ctx.mu.Unlock()
	dropHandle(h)
	return 0
}

// The attribute mask bits goverbs' QPs take (package verbs checks them per transition).
const qpMaskKnown = C.IBV_QP_STATE | C.IBV_QP_CUR_STATE | C.IBV_QP_EN_SQD_ASYNC_NOTIFY | C.IBV_QP_ACCESS_FLAGS |
	C.IBV_QP_PKEY_INDEX | C.IBV_QP_PORT | C.IBV_QP_QKEY | C.IBV_QP_AV | C.IBV_QP_PATH_MTU | C.IBV_QP_TIMEOUT |
	C.IBV_QP_RETRY_CNT | C.IBV_QP_RNR_RETRY | C.IBV_QP_RQ_PSN | C.IBV_QP_MAX_QP_RD_ATOMIC | C.IBV_QP_ALT_PATH |
	C.IBV_QP_MIN_RNR_TIMER | C.IBV_QP_SQ_PSN | C.IBV_QP_MAX_DEST_RD_ATOMIC | C.IBV_QP_PATH_MIG_STATE |
	C.IBV_QP_CAP | C.IBV_QP_DEST_QPN

//export gv_modify_qp
func gv_modify_qp(h C.uintptr_t, a *C.struct_ibv_qp_attr, mask C.int) C.int {
	q := handle[*queuePair](h)
	if q == nil || mask&^qpMaskKnown != 0 {
		return C.EINVAL
	}
	attr := verbs.QPAttr{
		State: verbs.QPState(a.qp_state), CurState: verbs.QPState(a.cur_qp_state), PathMTU: verbs.MTU(a.path_mtu),
		QKey: uint32(a.qkey), RQPSN: uint32(a.rq_psn), SQPSN: uint32(a.sq_psn), DestQPN: uint32(a.dest_qp_num),
		AccessFlags: verbs.Access(a.qp_access_flags),
		Cap: verbs.QPCap{MaxSendWR: uint32(a.cap.max_send_wr), MaxRecvWR: uint32(a.cap.max_recv_wr),
			MaxSendSGE: uint32(a.cap.max_send_sge), MaxRecvSGE: uint32(a.cap.max_recv_sge), MaxInline: uint32(a.cap.max_inline_data)},
		PKeyIndex: uint16(a.pkey_index), Port: uint8(a.port_num), MinRNRTimer: uint8(a.min_rnr_timer),
		Timeout: uint8(a.timeout), RetryCnt: uint8(a.retry_cnt), RNRRetry: uint8(a.rnr_retry),
		MaxRdAtomic: uint8(a.max_rd_atomic), MaxDestRdAtomic: uint8(a.max_dest_rd_atomic),
	}
	if mask&C.IBV_QP_AV != 0 {
		av, err := ahAttr(&a.ah_attr)
		if err != nil {
			return logErr("modify QP", err)
		}
		attr.AH = av
	}
	return logErr("modify QP", q.qp.Modify(&attr, verbs.QPAttrMask(mask)))
}

//export gv_query_qp
func gv_query_qp(h C.uintptr_t, a *C.struct_ibv_qp_attr, init *C.struct_ibv_qp_init_attr) C.int {
	q := handle[*queuePair](h)
	if q == nil {
		return C.EINVAL
	}
	g := q.qp.Query()
	*a = C.struct_ibv_qp_attr{}
	a.qp_state = C.enum_ibv_qp_state(g.State)
	a.cur_qp_state = C.enum_ibv_qp_state(g.State)
	a.path_mtu = C.enum_ibv_mtu(g.PathMTU)
	a.qkey = C.uint32_t(g.QKey)
	a.rq_psn = C.uint32_t(g.RQPSN)
	a.sq_psn = C.uint32_t(g.SQPSN)
	a.dest_qp_num = C.uint32_t(g.DestQPN)
	a.qp_access_flags = C.uint(g.AccessFlags)
	putCap(&a.cap, g.Cap)
	putAHAttr(&a.ah_attr, &g.AH)
	a.pkey_index = C.uint16_t(g.PKeyIndex)
	a.port_num = C.uint8_t(g.Port)
	a.min_rnr_timer = C.uint8_t(g.MinRNRTimer)
	a.timeout = C.uint8_t(g.Timeout)
	a.retry_cnt = C.uint8_t(g.RetryCnt)
	a.rnr_retry = C.uint8_t(g.RNRRetry)
	a.max_rd_atomic = C.uint8_t(g.MaxRdAtomic)
	a.max_dest_rd_atomic = C.uint8_t(g.MaxDestRdAtomic)
	putCap(&init.cap, g.Cap)
	init.qp_type = C.enum_ibv_qp_type(q.qp.Type())
	return 0
}

// wrBatch is how many work requests one call hands to package verbs; a longer list
// is posted in batches.
const wrBatch = 16

// gv_post_send posts the program's list of ibv_send_wr. On failure *bad is the index
// of the request refused (the ones before it were posted).
//
//export gv_post_send
func gv_post_send(h C.uintptr_t, wr *C.struct_ibv_send_wr, bad *C.int) C.int {
	q := handle[*queuePair](h)
	if q == nil {
		*bad = 0
		return C.EINVAL
	}
	var wrs [wrBatch]verbs.SendWR
	typ := q.qp.Type() // whether the requests carry UD or XRC fields, once per call
	base := 0
	for wr != nil {
		n := 0
		for ; wr != nil && n < len(wrs); wr = wr.next {
			sgl, ok := sgList(wr.sg_list, wr.num_sge)
			if !ok {
				*bad = C.int(base + n)
				return C.EINVAL
			}
			w := &wrs[n]
			p := unsafe.Pointer(wr)
			*w = verbs.SendWR{
				ID: uint64(wr.wr_id), Opcode: verbs.WROpcode(wr.opcode), Flags: verbs.SendFlags(wr.send_flags), SGL: sgl,
				Imm: *(*uint32)(unsafe.Add(p, C.gv_off_imm)),
			}
			switch wr.opcode {
			case C.IBV_WR_SEND_WITH_IMM, C.IBV_WR_RDMA_WRITE_WITH_IMM:
				w.Imm = htonl(w.Imm) // imm_data is big-endian; invalidate_rkey is not
			}
			switch wr.opcode {
			case C.IBV_WR_RDMA_WRITE, C.IBV_WR_RDMA_WRITE_WITH_IMM, C.IBV_WR_RDMA_READ:
				w.RemoteAddr = *(*uint64)(unsafe.Add(p, C.gv_off_rdma_addr))
				w.RKey = *(*uint32)(unsafe.Add(p, C.gv_off_rdma_rkey))
			case C.IBV_WR_ATOMIC_CMP_AND_SWP, C.IBV_WR_ATOMIC_FETCH_AND_ADD:
				w.RemoteAddr = *(*uint64)(unsafe.Add(p, C.gv_off_atomic_addr))
				w.RKey = *(*uint32)(unsafe.Add(p, C.gv_off_atomic_rkey))
				w.CompareAdd = *(*uint64)(unsafe.Add(p, C.gv_off_atomic_cmp))
				w.Swap = *(*uint64)(unsafe.Add(p, C.gv_off_atomic_swap))
			}
			if wr.opcode == C.IBV_WR_BIND_MW {
				// Allocated per BIND_MW request only: a stack binding's address stored in
				// wrs would make every post allocate.
				mwp := *(**C.struct_gv_mw)(unsafe.Add(p, C.gv_off_bind_mw))
				b, ok := mwBind((*C.struct_ibv_mw_bind_info)(unsafe.Add(p, C.gv_off_bind_info)))
				if mwp == nil || !ok {
					*bad = C.int(base + n)
					return C.EINVAL
				}
				w.Bind = &verbs.MWBindWR{MW: handle[*verbs.MW](mwp.h), RKey: *(*uint32)(unsafe.Add(p, C.gv_off_bind_rkey)), MWBind: b}
			}
			switch typ {
			case verbs.QPTypeXRCSend:
				w.RemoteSRQN = *(*uint32)(unsafe.Add(p, C.gv_off_xrc_srqn))
			case verbs.QPTypeUD:
				ah := *(**C.struct_gv_ah)(unsafe.Add(p, C.gv_off_ud_ah))
				if ah == nil {
					*bad = C.int(base + n)
					return C.EINVAL
				}
				w.AH = handle[*verbs.AH](ah.h)
				w.RemoteQPN = *(*uint32)(unsafe.Add(p, C.gv_off_ud_qpn))
				w.RemoteQKey = *(*uint32)(unsafe.Add(p, C.gv_off_ud_qkey))
			}
			n++
		}
		if err := q.qp.PostSend(wrs[:n]...); err != nil {
			*bad = C.int(base + postIndex(err))
			return logErr("post send", err)
		}
		base += n
	}
	return 0
}

// sgList views a work request's ibv_sge array as package verbs' SGEs (the layout the
// assertions above check), without copying; false for a negative count or a missing list.
func sgList(list *C.struct_ibv_sge, n C.int) ([]verbs.SGE, bool) {
	if n < 0 || n > 0 && list == nil {
		return nil, false
	}
	return unsafe.Slice((*verbs.SGE)(unsafe.Pointer(list)), int(n)), true
}

func postIndex(err error) int {
	if pe, ok := err.(*verbs.PostError); ok {
		return pe.Index
	}
	return 0
}

// gv_post_recv posts the program's list of ibv_recv_wr to a QP, or with srq set to an
// SRQ.
//
//export gv_post_recv
func gv_post_recv(h C.uintptr_t, srq C.int, wr *C.struct_ibv_recv_wr, bad *C.int) C.int {
	var qp *verbs.QP
	var s *verbs.SRQ
	if srq != 0 {
		if r := handle[*sharedRQ](h); r != nil {
			s = r.srq
		}
	} else if q := handle[*queuePair](h); q != nil {
		qp = q.qp
	}
	if qp == nil && s == nil {
		*bad = 0
		return C.EINVAL
	}
	var wrs [wrBatch]verbs.RecvWR
	base := 0
	for wr != nil {
		n := 0
		for ; wr != nil && n < len(wrs); wr = wr.next {
			sgl, ok := sgList(wr.sg_list, wr.num_sge)
			if !ok {
				*bad = C.int(base + n)
				return C.EINVAL
			}
			wrs[n] = verbs.RecvWR{ID: uint64(wr.wr_id), SGL: sgl}
			n++
		}
		var err error
		if s != nil {
			err = s.PostRecv(wrs[:n]...)
		} else {
			err = qp.PostRecv(wrs[:n]...)
		}
		if err != nil {
			*bad = C.int(base + postIndex(err))
			return logErr("post recv", err)
		}
		base += n
	}
	return 0
}

// gv_mcast attaches a QP to a multicast group or detaches it (ibv_attach_mcast,
// ibv_detach_mcast); gid points at the group's 16 bytes.
//
//export gv_mcast
func gv_mcast(qh C.uintptr_t, gid unsafe.Pointer, lid C.uint16_t, attach C.int) C.int {
	q := handle[*queuePair](qh)
	if q == nil {
		return C.EINVAL
	}
	g := verbs.GID(*(*[16]byte)(gid))
	if attach != 0 {
		return logErr("attach multicast", q.qp.AttachMcast(g, uint16(lid)))
	}
	return logErr("detach multicast", q.qp.DetachMcast(g, uint16(lid)))
}

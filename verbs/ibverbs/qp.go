//go:build ibverbs

package ibverbs

/*
#include <stdlib.h>
#include <string.h>
#include "shim.h"
*/
import "C"

import (
	"errors"
	"sync"
	"unsafe"

	"github.com/goverbs/goverbs/verbs/driver"
)

// postBatch is the most work requests one cgo call posts; longer lists go in several.
const postBatch = 64

// qp is a queue pair (struct ibv_qp) with the C memory its posts convert into.
type qp struct {
	dev  *device
	qpn  uint32
	port uint8 // the port of the last Modify that set one, for address vectors without
	ud   bool  // every send names its destination (an AH)
	send sendQueue
	recv recvQueue // unused with an SRQ
	srq  *srq

	mu sync.Mutex // guards qp against Close; posts hold their queue's lock instead
	qp *C.struct_ibv_qp
}

func (q *qp) rank() int { return rankQP }

func (p *pd) CreateQP(init *driver.QPInit) (driver.QP, error) {
	h, err := p.enter()
	if err != nil {
		return nil, err
	}
	defer p.dev.exit()
	scq, ok1 := init.SendCQ.(*cq)
	if init.Type == driver.QPTypeXRCSend && ok1 {
		return p.createXRCSend(h, scq, init)
	}
	rcq, ok2 := init.RecvCQ.(*cq)
	if !ok1 || !ok2 {
		return nil, errWrongDevice("CQ")
	}
	if init.BlockSelfMcastLoopback {
		// It needs ibv_create_qp_ex and the device's IBV_QP_CREATE_BLOCK_SELF_MCAST_LB.
		return nil, &driver.Error{Kind: driver.ErrInvalidAttr, Err: errors.ErrUnsupported}
	}
	var a C.struct_ibv_qp_init_attr
	scq.mu.Lock()
	a.send_cq = scq.cq
	scq.mu.Unlock()
	rcq.mu.Lock()
	a.recv_cq = rcq.cq
	rcq.mu.Unlock()
	if a.send_cq == nil || a.recv_cq == nil {
		return nil, errClosed("CQ")
	}
	var s *srq
	if init.SRQ != nil {
		if s, ok1 = init.SRQ.(*srq); !ok1 {
			return nil, errWrongDevice("SRQ")
		}
		s.recv.mu.Lock()
		a.srq = s.srq
		s.recv.mu.Unlock()
		if a.srq == nil {
			return nil, errClosed("SRQ")
		}
	}
	a.qp_type = C.enum_ibv_qp_type(init.Type)
	a.cap = C.struct_ibv_qp_cap{
		max_send_wr: C.uint32_t(init.Cap.MaxSendWR), max_recv_wr: C.uint32_t(init.Cap.MaxRecvWR),
		max_send_sge: C.uint32_t(init.Cap.MaxSendSGE), max_recv_sge: C.uint32_t(init.Cap.MaxRecvSGE),
		max_inline_data: C.uint32_t(init.Cap.MaxInline),
	}
	if init.SigAll {
		a.sq_sig_all = 1
	}
	c, err := C.ibv_create_qp(h, &a)
	if c == nil {
		return nil, ibvErr("ibv_create_qp", err)
	}
	// a.cap now holds what the device gave, at least what was asked.
	q := &qp{dev: p.dev, qpn: uint32(c.qp_num), port: 1, ud: init.Type == driver.QPTypeUD, qp: c, srq: s}
	q.send.init(int(a.cap.max_send_wr), int(a.cap.max_send_sge))
	if s == nil {
		q.recv.init(int(a.cap.max_recv_wr), int(a.cap.max_recv_sge))
	}
	p.dev.add(q)
	return q, nil
}

func (q *qp) QPN() uint32 { return q.qpn }

// State asks the device: a QP the device moved to ERR or SQE reads so here.
func (q *qp) State() driver.QPState {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.qp == nil {
		return driver.QPStateErr
	}
	var a C.struct_ibv_qp_attr
	var ia C.struct_ibv_qp_init_attr
	if C.ibv_query_qp(q.qp, &a, C.IBV_QP_STATE, &ia) != 0 {
		return driver.QPState(q.qp.state)
	}
	return driver.QPState(a.qp_state)
}

func (q *qp) Modify(attr *driver.QPAttr, mask driver.QPAttrMask) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.qp == nil {
		return errClosed("QP")
	}
	if mask&driver.QPAttrPort != 0 {
		q.port = attr.Port
	}
	a := qpAttrToC(attr, mask, q.port)
	return rcErr("ibv_modify_qp", int(C.ibv_modify_qp(q.qp, &a, C.int(mask))))
}

// queryMask is every attribute ibv_query_qp reports that QPAttr holds.
const queryMask = C.IBV_QP_STATE | C.IBV_QP_CUR_STATE | C.IBV_QP_PKEY_INDEX | C.IBV_QP_PORT |
	C.IBV_QP_QKEY | C.IBV_QP_AV | C.IBV_QP_PATH_MTU | C.IBV_QP_TIMEOUT | C.IBV_QP_RETRY_CNT |
	C.IBV_QP_RNR_RETRY | C.IBV_QP_RQ_PSN | C.IBV_QP_MAX_QP_RD_ATOMIC | C.IBV_QP_MIN_RNR_TIMER |
	C.IBV_QP_SQ_PSN | C.IBV_QP_MAX_DEST_RD_ATOMIC | C.IBV_QP_CAP | C.IBV_QP_DEST_QPN |
	C.IBV_QP_ACCESS_FLAGS

func (q *qp) Query() driver.QPAttr {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.qp == nil {
		return driver.QPAttr{State: driver.QPStateErr}
	}
	var a C.struct_ibv_qp_attr
	var ia C.struct_ibv_qp_init_attr
	if C.ibv_query_qp(q.qp, &a, queryMask, &ia) != 0 {
		return driver.QPAttr{State: driver.QPState(q.qp.state)}
	}
	return qpAttrFromC(&a)
}

// Counters: the verbs API has no per-QP statistics (the device's are in Device.Counters).
func (q *qp) Counters() driver.QPCounters { return driver.QPCounters{} }

func (q *qp) Close() error {
	// Lock order: the queues, then q.mu, so no post is in C while the QP goes.
	q.send.mu.Lock()
	defer q.send.mu.Unlock()
	q.recv.mu.Lock()
	defer q.recv.mu.Unlock()
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.qp == nil {
		return nil
	}
	key := unsafe.Pointer(q.qp)
	if rc := C.ibv_destroy_qp(q.qp); rc != 0 {
		return rcErr("ibv_destroy_qp", int(rc))
	}
	q.qp = nil
	q.send.free()
	q.recv.free()
	q.dev.remove(q, key)
	return nil
}

// AttachMcast attaches the QP to a multicast group (ibv_attach_mcast).
func (q *qp) AttachMcast(gid driver.GID, lid uint16) error {
	return q.mcast(gid, lid, true)
}

// DetachMcast detaches the QP from a multicast group (ibv_detach_mcast).
func (q *qp) DetachMcast(gid driver.GID, lid uint16) error {
	return q.mcast(gid, lid, false)
}

func (q *qp) mcast(gid driver.GID, lid uint16, attach bool) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.qp == nil {
		return errClosed("QP")
	}
	var g C.union_ibv_gid
	*(*[16]byte)(unsafe.Pointer(&g)) = gid
	// Both return an errno value rather than setting errno.
	if attach {
		return rcErr("ibv_attach_mcast", int(C.ibv_attach_mcast(q.qp, &g, C.uint16_t(lid))))
	}
	return rcErr("ibv_detach_mcast", int(C.ibv_detach_mcast(q.qp, &g, C.uint16_t(lid))))
}

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

// QPAttrFromC converts a struct ibv_qp_attr, as ibv_query_qp or librdmacm's
// rdma_init_qp_attr fill it, into the attributes QP.Modify takes. p points to the C
// struct; it may come from another cgo package (whose C types are Go types of their
// own), which is why it is an unsafe.Pointer. The attribute mask needs no conversion:
// driver.QPAttrMask has ibv_qp_attr_mask's values.
func QPAttrFromC(p unsafe.Pointer) driver.QPAttr {
	return qpAttrFromC((*C.struct_ibv_qp_attr)(p))
}

func qpAttrFromC(a *C.struct_ibv_qp_attr) driver.QPAttr {
	out := driver.QPAttr{
		State: driver.QPState(a.qp_state), CurState: driver.QPState(a.cur_qp_state),
		PathMTU: driver.MTU(a.path_mtu), QKey: uint32(a.qkey), RQPSN: uint32(a.rq_psn),
		SQPSN: uint32(a.sq_psn), DestQPN: uint32(a.dest_qp_num), AccessFlags: driver.Access(a.qp_access_flags),
		Cap: driver.QPCap{
			MaxSendWR: uint32(a.cap.max_send_wr), MaxRecvWR: uint32(a.cap.max_recv_wr),
			MaxSendSGE: uint32(a.cap.max_send_sge), MaxRecvSGE: uint32(a.cap.max_recv_sge),
			MaxInline: uint32(a.cap.max_inline_data),
		},
		PKeyIndex: uint16(a.pkey_index), Port: uint8(a.port_num), MinRNRTimer: uint8(a.min_rnr_timer),
		Timeout: uint8(a.timeout), RetryCnt: uint8(a.retry_cnt), RNRRetry: uint8(a.rnr_retry),
		MaxRdAtomic: uint8(a.max_rd_atomic), MaxDestRdAtomic: uint8(a.max_dest_rd_atomic),
	}
	g := &a.ah_attr.grh
	out.AH = driver.AHAttr{
		DGID: *(*driver.GID)(unsafe.Pointer(&g.dgid)), SGIDIndex: uint8(g.sgid_index),
		HopLimit: uint8(g.hop_limit), TrafficClass: uint8(g.traffic_class), FlowLabel: uint32(g.flow_label),
		SL: uint8(a.ah_attr.sl), Port: uint8(a.ah_attr.port_num),
	}
	return out
}

// qpAttrToC is Modify's half: the attributes into the C struct, the address vector's
// port defaulting to defPort when the mask sets an address vector without one.
func qpAttrToC(attr *driver.QPAttr, mask driver.QPAttrMask, defPort uint8) C.struct_ibv_qp_attr {
	var a C.struct_ibv_qp_attr
	a.qp_state = C.enum_ibv_qp_state(attr.State)
	a.cur_qp_state = C.enum_ibv_qp_state(attr.CurState)
	a.path_mtu = C.enum_ibv_mtu(attr.PathMTU)
	a.qkey = C.uint32_t(attr.QKey)
	a.rq_psn = C.uint32_t(attr.RQPSN)
	a.sq_psn = C.uint32_t(attr.SQPSN)
	a.dest_qp_num = C.uint32_t(attr.DestQPN)
	a.qp_access_flags = C.uint(attr.AccessFlags)
	a.cap = C.struct_ibv_qp_cap{
		max_send_wr: C.uint32_t(attr.Cap.MaxSendWR), max_recv_wr: C.uint32_t(attr.Cap.MaxRecvWR),
		max_send_sge: C.uint32_t(attr.Cap.MaxSendSGE), max_recv_sge: C.uint32_t(attr.Cap.MaxRecvSGE),
		max_inline_data: C.uint32_t(attr.Cap.MaxInline),
	}
	if mask&driver.QPAttrAV != 0 {
		setAH(&a.ah_attr, &attr.AH, defPort)
	}
	a.pkey_index = C.uint16_t(attr.PKeyIndex)
	a.port_num = C.uint8_t(attr.Port)
	a.min_rnr_timer = C.uint8_t(attr.MinRNRTimer)
	a.timeout = C.uint8_t(attr.Timeout)
	a.retry_cnt = C.uint8_t(attr.RetryCnt)
	a.rnr_retry = C.uint8_t(attr.RNRRetry)
	a.max_rd_atomic = C.uint8_t(attr.MaxRdAtomic)
	a.max_dest_rd_atomic = C.uint8_t(attr.MaxDestRdAtomic)
	return a
}

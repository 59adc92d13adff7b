//go:build ibverbs

package ibverbs

/*
#cgo noescape gv_poll_cq
#cgo nocallback gv_poll_cq
#include <stdlib.h>
#include "shim.h"
*/
import "C"

import (
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/goverbs/goverbs/verbs/driver"
)

// pollBatch is how many completions one cgo call fetches at most.
const pollBatch = 64

// gv_poll_cq writes the caller's driver.WC values in place: struct gv_wc has their layout,
// which these declarations check when compiling (an array length may not be negative, so
// each difference must be 0), and the flags it keeps have driver.WCFlags' values.
var (
	_ [unsafe.Sizeof(driver.WC{}) - C.sizeof_struct_gv_wc]struct{}
	_ [C.sizeof_struct_gv_wc - unsafe.Sizeof(driver.WC{})]struct{}
	_ [unsafe.Offsetof(driver.WC{}.Status) - unsafe.Offsetof(C.struct_gv_wc{}.status)]struct{}
	_ [unsafe.Offsetof(C.struct_gv_wc{}.status) - unsafe.Offsetof(driver.WC{}.Status)]struct{}
	_ [unsafe.Offsetof(driver.WC{}.Opcode) - unsafe.Offsetof(C.struct_gv_wc{}.opcode)]struct{}
	_ [unsafe.Offsetof(C.struct_gv_wc{}.opcode) - unsafe.Offsetof(driver.WC{}.Opcode)]struct{}
	_ [unsafe.Offsetof(driver.WC{}.ByteLen) - unsafe.Offsetof(C.struct_gv_wc{}.byte_len)]struct{}
	_ [unsafe.Offsetof(C.struct_gv_wc{}.byte_len) - unsafe.Offsetof(driver.WC{}.ByteLen)]struct{}
	_ [unsafe.Offsetof(driver.WC{}.Imm) - unsafe.Offsetof(C.struct_gv_wc{}.imm)]struct{}
	_ [unsafe.Offsetof(C.struct_gv_wc{}.imm) - unsafe.Offsetof(driver.WC{}.Imm)]struct{}
	_ [unsafe.Offsetof(driver.WC{}.QPN) - unsafe.Offsetof(C.struct_gv_wc{}.qp_num)]struct{}
	_ [unsafe.Offsetof(C.struct_gv_wc{}.qp_num) - unsafe.Offsetof(driver.WC{}.QPN)]struct{}
	_ [unsafe.Offsetof(driver.WC{}.SrcQP) - unsafe.Offsetof(C.struct_gv_wc{}.src_qp)]struct{}
	_ [unsafe.Offsetof(C.struct_gv_wc{}.src_qp) - unsafe.Offsetof(driver.WC{}.SrcQP)]struct{}
	_ [unsafe.Offsetof(driver.WC{}.Flags) - unsafe.Offsetof(C.struct_gv_wc{}.wc_flags)]struct{}
	_ [unsafe.Offsetof(C.struct_gv_wc{}.wc_flags) - unsafe.Offsetof(driver.WC{}.Flags)]struct{}
	_ [unsafe.Offsetof(driver.WC{}.VendorErr) - unsafe.Offsetof(C.struct_gv_wc{}.vendor_err)]struct{}
	_ [unsafe.Offsetof(C.struct_gv_wc{}.vendor_err) - unsafe.Offsetof(driver.WC{}.VendorErr)]struct{}
	_ [driver.WCWithGRH - C.IBV_WC_GRH]struct{}
	_ [C.IBV_WC_GRH - driver.WCWithGRH]struct{}
	_ [driver.WCWithImm - C.IBV_WC_WITH_IMM]struct{}
	_ [C.IBV_WC_WITH_IMM - driver.WCWithImm]struct{}
	_ [driver.WCWithInv - C.IBV_WC_WITH_INV]struct{}
	_ [C.IBV_WC_WITH_INV - driver.WCWithInv]struct{}
)

// cq is a completion queue (struct ibv_cq) with the C memory its polls use.
type cq struct {
	dev     *device
	notify  func()
	overrun atomic.Bool // an IBV_EVENT_CQ_ERR came for this CQ

	mu      sync.Mutex
	cq      *C.struct_ibv_cq // nil once closed
	scratch *C.struct_ibv_wc
}

func (c *cq) rank() int { return rankCQ }

func (d *device) CreateCQ(depth int, notify func()) (driver.CQ, error) {
	if depth <= 0 {
		depth = 1
	}
	if err := d.enter(); err != nil {
		return nil, err
	}
	defer d.exit()
	h, err := C.ibv_create_cq(d.ctx, C.int(depth), nil, d.ch, 0)
	if h == nil {
		return nil, ibvErr("ibv_create_cq", err)
	}
	c := &cq{dev: d, notify: notify, cq: h,
		scratch: (*C.struct_ibv_wc)(C.calloc(pollBatch, C.sizeof_struct_ibv_wc)),
	}
	d.add(c)
	return c, nil
}

// Poll fetches up to len(wcs) completions, pollBatch per cgo call, which writes them
// into wcs in place: no allocation, and no copy on the Go side. The slice holds no Go
// pointers, so cgo's rules let C write it.
func (c *cq) Poll(wcs []driver.WC) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.cq == nil {
		return 0, errClosed("CQ")
	}
	n := 0
	for n < len(wcs) {
		want := min(len(wcs)-n, pollBatch)
		out := (*C.struct_gv_wc)(unsafe.Pointer(&wcs[n]))
		got := int(C.gv_poll_cq(c.cq, C.int(want), c.scratch, out, c.dev.kernelWCFlags))
		if got < 0 {
			return n, rcErr("ibv_poll_cq", got)
		}
		n += got
		if got < want {
			break
		}
	}
	if n == 0 && c.overrun.Load() {
		return 0, &driver.Error{Kind: driver.ErrCQOverflow, Err: errCQOverrun}
	}
	return n, nil
}

func (c *cq) Resize(depth int) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.cq == nil {
		return errClosed("CQ")
	}
	return rcErr("ibv_resize_cq", int(C.ibv_resize_cq(c.cq, C.int(depth))))
}

func (c *cq) Depth() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.cq == nil {
		return 0
	}
	return int(c.cq.cqe)
}

func (c *cq) RequestNotify(solicitedOnly bool) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.cq == nil {
		return errClosed("CQ")
	}
	var so C.int
	if solicitedOnly {
		so = 1
	}
	return rcErr("ibv_req_notify_cq", int(C.ibv_req_notify_cq(c.cq, so)))
}

func (c *cq) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.cq == nil {
		return nil
	}
	key := unsafe.Pointer(c.cq)
	if rc := C.ibv_destroy_cq(c.cq); rc != 0 {
		return rcErr("ibv_destroy_cq", int(rc)) // EBUSY while a QP uses it
	}
	c.cq = nil
	C.free(unsafe.Pointer(c.scratch))
	c.dev.remove(c, key)
	return nil
}

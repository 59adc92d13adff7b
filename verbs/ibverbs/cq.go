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

// cq is a completion queue (struct ibv_cq) with the C memory its polls use.
type cq struct {
	dev     *device
	notify  func()
	overrun atomic.Bool // an IBV_EVENT_CQ_ERR came for this CQ

	mu      sync.Mutex
	cq      *C.struct_ibv_cq // nil once closed
	scratch *C.struct_ibv_wc
	out     *C.struct_gv_wc
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
		out:     (*C.struct_gv_wc)(C.calloc(pollBatch, C.sizeof_struct_gv_wc)),
	}
	d.add(c)
	return c, nil
}

// Poll fetches up to len(wcs) completions, pollBatch per cgo call, and converts them
// in place: no allocation.
func (c *cq) Poll(wcs []driver.WC) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.cq == nil {
		return 0, errClosed("CQ")
	}
	n := 0
	for n < len(wcs) {
		want := min(len(wcs)-n, pollBatch)
		got := int(C.gv_poll_cq(c.cq, C.int(want), c.scratch, c.out, c.dev.kernelWCFlags))
		if got < 0 {
			return n, rcErr("ibv_poll_cq", got)
		}
		for i, g := range unsafe.Slice(c.out, got) {
			wcs[n+i] = driver.WC{
				ID: uint64(g.wr_id), Status: driver.WCStatus(g.status), Opcode: driver.WCOpcode(g.opcode),
				ByteLen: uint32(g.byte_len), Imm: uint32(g.imm), QPN: uint32(g.qp_num), SrcQP: uint32(g.src_qp),
				Flags:     driver.WCFlags(g.wc_flags) & (driver.WCWithGRH | driver.WCWithImm | driver.WCWithInv),
				VendorErr: uint32(g.vendor_err),
			}
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
	C.free(unsafe.Pointer(c.out))
	c.dev.remove(c, key)
	return nil
}

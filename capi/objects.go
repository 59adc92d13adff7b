//go:build goverbs_capi

package main

/*
#include <errno.h>
#include "gv.h"
*/
import "C"

import (
	"context"
	"errors"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/goverbs/goverbs/verbs"
)

type protDomain struct {
	pd  *verbs.PD
	ctx *devContext
}

//export gv_alloc_pd
func gv_alloc_pd(ch C.uintptr_t, out *C.uintptr_t) C.int {
	c := handle[*devContext](ch)
	if c == nil {
		return C.EINVAL
	}
	pd, err := c.dev.AllocPD()
	if err != nil {
		return logErr("alloc PD", err)
	}
	*out = newHandle(&protDomain{pd: pd, ctx: c})
	return 0
}

//export gv_dealloc_pd
func gv_dealloc_pd(h C.uintptr_t) C.int {
	p := handle[*protDomain](h)
	if p == nil {
		return C.EINVAL
	}
	if err := p.pd.Close(); err != nil {
		return logErr("dealloc PD", err) // EBUSY while MRs, QPs or SRQs use it
	}
	dropHandle(h)
	return 0
}

// The access flags goverbs implements, and the optional ones a program may ask for and
// a device may ignore (IBV_ACCESS_OPTIONAL_RANGE: relaxed ordering and the like).
const (
	accessKnown    = C.IBV_ACCESS_LOCAL_WRITE | C.IBV_ACCESS_REMOTE_WRITE | C.IBV_ACCESS_REMOTE_READ | C.IBV_ACCESS_REMOTE_ATOMIC | C.IBV_ACCESS_MW_BIND
	accessOptional = C.IBV_ACCESS_OPTIONAL_RANGE
)

// gv_reg_mr registers the program's own memory [addr, addr+length): the engine reads
// and writes it in place. The C side has checked that the range is mapped.
//
//export gv_reg_mr
func gv_reg_mr(ph C.uintptr_t, addr unsafe.Pointer, length C.size_t, access C.uint, out *C.uintptr_t, lkey, rkey *C.uint32_t) C.int {
	p := handle[*protDomain](ph)
	if p == nil || addr == nil || length == 0 {
		return C.EINVAL
	}
	access &^= accessOptional
	if access&^accessKnown != 0 {
		return C.EOPNOTSUPP // on-demand paging, zero-based, huge-page hints
	}
	buf := unsafe.Slice((*byte)(addr), int(length))
	mr, err := p.pd.RegMR(buf, verbs.Access(access))
	if err != nil {
		return logErr("reg MR", err)
	}
	*lkey, *rkey = C.uint32_t(mr.LKey()), C.uint32_t(mr.RKey())
	*out = newHandle(mr)
	return 0
}

//export gv_dereg_mr
func gv_dereg_mr(h C.uintptr_t) C.int {
	return closeHandle[*verbs.MR](h, "dereg MR")
}

// compChannel is a completion channel whose events are written, as the C ibv_cq
// pointer of the CQ, to a pipe the program reads with ibv_get_cq_event or polls.
type compChannel struct {
	ch   *verbs.CompChannel
	ctx  *devContext
	fd   int
	done chan struct{}
}

//export gv_create_comp_channel
func gv_create_comp_channel(ch C.uintptr_t, wfd C.int, out *C.uintptr_t) C.int {
	c := handle[*devContext](ch)
	if c == nil {
		return C.EINVAL
	}
	cc := &compChannel{ch: c.dev.CreateCompChannel(), ctx: c, fd: int(wfd), done: make(chan struct{})}
	go cc.pump()
	*out = newHandle(cc)
	return 0
}

func (cc *compChannel) pump() {
	defer close(cc.done)
	for {
		cq, err := cc.ch.Wait(context.Background())
		if err != nil {
			return // closed
		}
		cc.ctx.mu.Lock()
		p := cc.ctx.cqs[cq]
		cc.ctx.mu.Unlock()
		if p == nil {
			continue // destroyed meanwhile
		}
		unix.Write(cc.fd, unsafe.Slice((*byte)(unsafe.Pointer(&p)), unsafe.Sizeof(p)))
	}
}

//export gv_destroy_comp_channel
func gv_destroy_comp_channel(h C.uintptr_t) C.int {
	cc := handle[*compChannel](h)
	if cc == nil {
		return C.EINVAL
	}
	cc.ch.Close()
	<-cc.done
	dropHandle(h)
	return 0
}

// gv_create_cq creates a CQ of at least cqe entries and returns its depth in *cqe; cq
// is its C object, named in events.
//
//export gv_create_cq
func gv_create_cq(ch C.uintptr_t, cqe *C.int, chanH C.uintptr_t, cq unsafe.Pointer, out *C.uintptr_t) C.int {
	c := handle[*devContext](ch)
	if c == nil || *cqe <= 0 {
		return C.EINVAL
	}
	var channel *verbs.CompChannel
	if chanH != 0 {
		cc := handle[*compChannel](chanH)
		if cc == nil || cc.ctx != c {
			return C.EINVAL
		}
		channel = cc.ch
	}
	q, err := c.dev.CreateCQ(int(*cqe), channel)
	if err != nil {
		return logErr("create CQ", err)
	}
	c.mu.Lock()
	c.cqs[q] = cq
	c.mu.Unlock()
	*cqe = C.int(q.Depth())
	*out = newHandle(&complQueue{cq: q, ctx: c})
	return 0
}

type complQueue struct {
	cq  *verbs.CQ
	ctx *devContext
}

//export gv_destroy_cq
func gv_destroy_cq(h C.uintptr_t) C.int {
	q := handle[*complQueue](h)
	if q == nil {
		return C.EINVAL
	}
	if err := q.cq.Close(); err != nil {
		return logErr("destroy CQ", err) // EBUSY while a QP uses it
	}
	q.ctx.mu.Lock()
	delete(q.ctx.cqs, q.cq)
	q.ctx.mu.Unlock()
	dropHandle(h)
	return 0
}

//export gv_resize_cq
func gv_resize_cq(h C.uintptr_t, cqe *C.int) C.int {
	q := handle[*complQueue](h)
	if q == nil || *cqe <= 0 {
		return C.EINVAL
	}
	if err := q.cq.Resize(int(*cqe)); err != nil {
		return logErr("resize CQ", err)
	}
	*cqe = C.int(q.cq.Depth())
	return 0
}

//export gv_req_notify_cq
func gv_req_notify_cq(h C.uintptr_t, solicitedOnly C.int) C.int {
	q := handle[*complQueue](h)
	if q == nil {
		return C.EINVAL
	}
	return errno(q.cq.RequestNotify(solicitedOnly != 0))
}

// gv_poll_cq moves up to n completions into the program's ibv_wc array and returns how
// many, or -1 (a CQ overrun, or a bad CQ).
//
//export gv_poll_cq
func gv_poll_cq(h C.uintptr_t, n C.int, out *C.struct_ibv_wc) C.int {
	q := handle[*complQueue](h)
	if q == nil || n < 0 || n > 0 && out == nil {
		return -1
	}
	dst := unsafe.Slice(out, int(n))
	var buf [16]verbs.WC
	total := 0
	for total < len(dst) {
		k, err := q.cq.Poll(buf[:min(len(buf), len(dst)-total)])
		if err != nil {
			if total > 0 {
				break
			}
			return -1
		}
		for i := range k {
			putWC(&dst[total+i], &buf[i])
		}
		total += k
		if k < len(buf) {
			break
		}
	}
	// No yield when the CQ is empty, in either mode. A default-mode poll reads the
	// device's socket itself, as a busy one does, so the program's thread needs no
	// goroutine of the device to run for its packets; and a yield from a C thread's
	// callback, whose goroutine is locked to its thread, is a hand-off between threads:
	// with a yield at every empty poll ib_send_lat was an order of magnitude slower, and
	// ib_write_bw moved as much or more without them (docs/DESIGN.md, "The C ABI"). A
	// goroutine that does need this
	// thread's P (the receive goroutine before it has seen the polls and stepped aside)
	// gets it from sysmon, which takes a P back from a thread in a system call.
	return C.int(total)
}

func putWC(d *C.struct_ibv_wc, w *verbs.WC) {
	d.wr_id = C.uint64_t(w.ID)
	d.status = C.enum_ibv_wc_status(w.Status)
	d.opcode = C.enum_ibv_wc_opcode(w.Opcode)
	d.vendor_err = C.uint32_t(w.VendorErr)
	d.byte_len = C.uint32_t(w.ByteLen)
	imm := w.Imm
	if w.Flags&verbs.WCWithImm != 0 {
		imm = htonl(imm) // imm_data is big-endian; invalidated_rkey is not
	}
	*(*uint32)(unsafe.Add(unsafe.Pointer(d), C.gv_off_wc_imm)) = imm
	d.qp_num = C.uint32_t(w.QPN)
	d.src_qp = C.uint32_t(w.SrcQP)
	d.wc_flags = C.uint(w.Flags)
	d.pkey_index = 0
	d.slid = 0
	d.sl = 0
	d.dlid_path_bits = 0
}

func htonl(v uint32) uint32 {
	var b [4]byte
	*(*uint32)(unsafe.Pointer(&b)) = v
	return uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3])
}

type sharedRQ struct {
	srq *verbs.SRQ
	ctx *devContext
}

//export gv_create_srq
func gv_create_srq(ph C.uintptr_t, a *C.struct_ibv_srq_attr, srq unsafe.Pointer, out *C.uintptr_t) C.int {
	p := handle[*protDomain](ph)
	if p == nil {
		return C.EINVAL
	}
	s, err := p.pd.CreateSRQ(verbs.SRQAttr{MaxWR: uint32(a.max_wr), MaxSGE: uint32(a.max_sge), SRQLimit: uint32(a.srq_limit)})
	if err != nil {
		return logErr("create SRQ", err)
	}
	*out = p.ctx.publishSRQ(s, a, srq)
	return 0
}

// publishSRQ writes what the SRQ got into the program's attributes, maps it to its C
// object srq for events, and returns its handle.
func (c *devContext) publishSRQ(s *verbs.SRQ, a *C.struct_ibv_srq_attr, srq unsafe.Pointer) C.uintptr_t {
	got := s.Query()
	a.max_wr, a.max_sge = C.uint32_t(got.MaxWR), C.uint32_t(got.MaxSGE)
	c.mu.Lock()
	c.srqs[s] = srq
	c.mu.Unlock()
	return newHandle(&sharedRQ{srq: s, ctx: c})
}

//export gv_modify_srq
func gv_modify_srq(h C.uintptr_t, a *C.struct_ibv_srq_attr, mask C.int) C.int {
	s := handle[*sharedRQ](h)
	if s == nil {
		return C.EINVAL
	}
	if mask&C.IBV_SRQ_MAX_WR != 0 {
		return C.EOPNOTSUPP // an SRQ cannot be resized
	}
	if mask&C.IBV_SRQ_LIMIT != 0 {
		return logErr("modify SRQ", s.srq.Arm(uint32(a.srq_limit)))
	}
	return 0
}

//export gv_query_srq
func gv_query_srq(h C.uintptr_t, a *C.struct_ibv_srq_attr) C.int {
	s := handle[*sharedRQ](h)
	if s == nil {
		return C.EINVAL
	}
	got := s.srq.Query()
	a.max_wr, a.max_sge, a.srq_limit = C.uint32_t(got.MaxWR), C.uint32_t(got.MaxSGE), C.uint32_t(got.SRQLimit)
	return 0
}

//export gv_destroy_srq
func gv_destroy_srq(h C.uintptr_t) C.int {
	s := handle[*sharedRQ](h)
	if s == nil {
		return C.EINVAL
	}
	if err := s.srq.Close(); err != nil {
		return logErr("destroy SRQ", err) // EBUSY while a QP uses it
	}
	s.ctx.mu.Lock()
	delete(s.ctx.srqs, s.srq)
	s.ctx.mu.Unlock()
	dropHandle(h)
	return 0
}

// ahAttr converts an address vector. RoCE addresses by GID: one without a GRH
// (is_global 0) has no destination, as on any RoCE device.
func ahAttr(a *C.struct_ibv_ah_attr) (verbs.AHAttr, error) {
	if a.is_global == 0 {
		return verbs.AHAttr{}, errors.New("RoCE address vector without a GRH (is_global 0)")
	}
	g := &a.grh
	return verbs.AHAttr{
		DGID: *(*verbs.GID)(unsafe.Add(unsafe.Pointer(g), C.gv_off_gid)), SGIDIndex: uint8(g.sgid_index),
		HopLimit: uint8(g.hop_limit), TrafficClass: uint8(g.traffic_class), FlowLabel: uint32(g.flow_label),
		SL: uint8(a.sl), Port: uint8(a.port_num),
	}, nil
}

func putAHAttr(d *C.struct_ibv_ah_attr, a *verbs.AHAttr) {
	*d = C.struct_ibv_ah_attr{}
	*(*verbs.GID)(unsafe.Add(unsafe.Pointer(&d.grh), C.gv_off_gid)) = a.DGID
	d.grh.sgid_index = C.uint8_t(a.SGIDIndex)
	d.grh.hop_limit = C.uint8_t(a.HopLimit)
	d.grh.traffic_class = C.uint8_t(a.TrafficClass)
	d.grh.flow_label = C.uint32_t(a.FlowLabel)
	d.sl = C.uint8_t(a.SL)
	d.port_num = C.uint8_t(a.Port)
	if !a.DGID.IsZero() {
		d.is_global = 1
	}
}

//export gv_create_ah
func gv_create_ah(ph C.uintptr_t, a *C.struct_ibv_ah_attr, out *C.uintptr_t) C.int {
	p := handle[*protDomain](ph)
	if p == nil {
		return C.EINVAL
	}
	attr, err := ahAttr(a)
	if err != nil {
		return logErr("create AH", err)
	}
	ah, err := p.pd.CreateAH(attr)
	if err != nil {
		return logErr("create AH", err)
	}
	*out = newHandle(ah)
	return 0
}

//export gv_destroy_ah
func gv_destroy_ah(h C.uintptr_t) C.int {
	return closeHandle[*verbs.AH](h, "destroy AH")
}

// gv_init_ah_from_wc builds the address vector answering a UD receive from the GRH
// area of its buffer (ibv_init_ah_from_wc).
//
//export gv_init_ah_from_wc
func gv_init_ah_from_wc(port C.uint8_t, wc *C.struct_ibv_wc, grh unsafe.Pointer, out *C.struct_ibv_ah_attr) C.int {
	w := verbs.WC{Flags: verbs.WCFlags(wc.wc_flags), QPN: uint32(wc.qp_num), SrcQP: uint32(wc.src_qp)}
	a, err := verbs.AHAttrFromWC(&w, unsafe.Slice((*byte)(grh), verbs.GRHLen), uint8(port))
	if err != nil {
		return logErr("init AH from WC", err)
	}
	putAHAttr(out, &a)
	return 0
}

//export gv_alloc_mw
func gv_alloc_mw(ph C.uintptr_t, typ C.int, out *C.uintptr_t, rkey *C.uint32_t) C.int {
	p := handle[*protDomain](ph)
	if p == nil || typ != C.IBV_MW_TYPE_1 && typ != C.IBV_MW_TYPE_2 {
		return C.EINVAL
	}
	mw, err := p.pd.AllocMW(verbs.MWType(typ))
	if err != nil {
		return logErr("alloc MW", err)
	}
	*rkey = C.uint32_t(mw.RKey())
	*out = newHandle(mw)
	return 0
}

//export gv_dealloc_mw
func gv_dealloc_mw(h C.uintptr_t) C.int {
	return closeHandle[*verbs.MW](h, "dealloc MW")
}

// mwBind converts a binding; a nil MR (an unbind) is allowed.
func mwBind(b *C.struct_ibv_mw_bind_info) (verbs.MWBind, bool) {
	out := verbs.MWBind{Addr: uint64(b.addr), Length: uint64(b.length), Access: verbs.Access(b.mw_access_flags)}
	if b.mr != nil {
		mr := handle[*verbs.MR]((*C.struct_gv_mr)(unsafe.Pointer(b.mr)).h)
		if mr == nil {
			return out, false
		}
		out.MR = mr
	}
	return out, true
}

// gv_bind_mw binds a type 1 window through a QP's send queue (ibv_bind_mw) and returns
// the rkey the window has once the bind executes.
//
//export gv_bind_mw
func gv_bind_mw(qh, mwh C.uintptr_t, bind *C.struct_ibv_mw_bind, rkey *C.uint32_t) C.int {
	q, mw := handle[*queuePair](qh), handle[*verbs.MW](mwh)
	if q == nil || mw == nil {
		return C.EINVAL
	}
	b, ok := mwBind(&bind.bind_info)
	if !ok {
		return C.EINVAL
	}
	k, err := q.qp.BindMW(mw, uint64(bind.wr_id), verbs.SendFlags(bind.send_flags), b)
	if err != nil {
		return logErr("bind MW", err)
	}
	*rkey = C.uint32_t(k)
	return 0
}

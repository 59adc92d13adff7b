//go:build ibverbs

package ibverbs

/*
#include "shim.h"
*/
import "C"

import (
	"fmt"
	"runtime"
	"sync"
	"syscall"
	"unsafe"

	"github.com/goverbs/goverbs/verbs/driver"
)

// The destroy order of Device.Close (object.rank).
const (
	rankQP = iota
	rankSRQ
	rankXRCD
	rankMW
	rankAH
	rankMR
	rankCQ
	rankPD
)

// pd is a protection domain (struct ibv_pd).
type pd struct {
	dev *device
	mu  sync.Mutex
	pd  *C.struct_ibv_pd // nil once closed
}

func (p *pd) rank() int { return rankPD }

// enter starts a call that creates an object in the PD (the device's enter, and the PD
// open) and returns the C PD; the caller ends it with p.dev.exit.
func (p *pd) enter() (*C.struct_ibv_pd, error) {
	if err := p.dev.enter(); err != nil {
		return nil, err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.pd == nil {
		p.dev.exit()
		return nil, errClosed("PD")
	}
	return p.pd, nil
}

func (p *pd) Close() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.pd == nil {
		return nil
	}
	if rc := C.ibv_dealloc_pd(p.pd); rc != 0 {
		return rcErr("ibv_dealloc_pd", int(rc)) // EBUSY while objects use it
	}
	p.dev.remove(p, nil)
	p.pd = nil
	return nil
}

// mr is a memory region over the caller's memory (struct ibv_mr).
type mr struct {
	dev    *device
	mu     sync.Mutex
	mr     *C.struct_ibv_mr
	pin    runtime.Pinner // keeps Go memory in place while the device may DMA into it
	lkey   uint32
	rkey   uint32
	addr   uint64
	length uint64
	closed bool
}

func (m *mr) rank() int { return rankMR }

// RegMR registers buf where it lies. A Go heap buffer is pinned for the region's life:
// the device keeps its address, which cgo allows C to do only with a pinned object
// (runtime.Pinner); memory outside the Go heap (verbs.Mmap) passes through the pin
// untouched.
func (p *pd) RegMR(buf []byte, access driver.Access) (driver.MR, error) {
	h, err := p.enter()
	if err != nil {
		return nil, err
	}
	defer p.dev.exit()
	m := &mr{dev: p.dev}
	var addr unsafe.Pointer
	if len(buf) > 0 {
		addr = unsafe.Pointer(unsafe.SliceData(buf))
		m.pin.Pin(addr)
	}
	r, err := C.ibv_reg_mr(h, addr, C.size_t(len(buf)), C.int(access))
	if r == nil {
		m.pin.Unpin()
		return nil, ibvErr("ibv_reg_mr", err)
	}
	m.mr, m.lkey, m.rkey, m.addr, m.length = r, uint32(r.lkey), uint32(r.rkey), uint64(uintptr(addr)), uint64(len(buf))
	p.dev.add(m)
	return m, nil
}

func (m *mr) Close() error {
	rc := m.dereg()
	if rc == 0 {
		return nil
	}
	// A region with a window bound to it cannot go: the spec's EBUSY
	// (IBA 10.6.7.2.6), which rxe reports as EINVAL. Both are verbs.ErrBusy when a window
	// of this device was last bound to the region. Asked after m.mu is let go: a bind
	// holds its window's lock while it takes the region's.
	if rc == C.EINVAL && m.dev.windowOn(m) {
		return &driver.Error{Kind: driver.ErrBusy, Err: fmt.Errorf("ibv_dereg_mr: a window is bound to the region: %w", syscall.Errno(rc))}
	}
	return rcErr("ibv_dereg_mr", int(rc))
}

// dereg deregisters m, unpinning its memory; it returns ibv_dereg_mr's errno.
func (m *mr) dereg() C.int {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return 0
	}
	if rc := C.ibv_dereg_mr(m.mr); rc != 0 {
		return rc
	}
	m.closed = true
	m.pin.Unpin()
	m.dev.remove(m, nil)
	return 0
}

func (m *mr) LKey() uint32 { return m.lkey }
func (m *mr) RKey() uint32 { return m.rkey }
func (m *mr) Addr() uint64 { return m.addr }

// handle returns the C region for a binding; the caller holds no lock, as ibv_bind_mw
// and a BIND_MW work request only name it.
func (m *mr) handle() (*C.struct_ibv_mr, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return nil, errClosed("MR")
	}
	return m.mr, nil
}

// ah is an address handle (struct ibv_ah).
type ah struct {
	dev *device
	mu  sync.Mutex
	ah  *C.struct_ibv_ah
}

func (a *ah) rank() int { return rankAH }

// setAH fills an ibv_ah_attr: RoCE always has a GRH, and a zero hop limit (which no
// router forwards) becomes 64, as for the software device.
func setAH(dst *C.struct_ibv_ah_attr, a *driver.AHAttr, defPort uint8) {
	hop := a.HopLimit
	if hop == 0 {
		hop = 64
	}
	port := a.Port
	if port == 0 {
		port = defPort
	}
	C.gv_set_ah(dst, (*C.uint8_t)(unsafe.Pointer(&a.DGID[0])), C.uint8_t(a.SGIDIndex), C.uint8_t(hop),
		C.uint8_t(a.TrafficClass), C.uint32_t(a.FlowLabel), C.uint8_t(a.SL), C.uint8_t(port))
}

func (p *pd) CreateAH(attr *driver.AHAttr) (driver.AH, error) {
	h, err := p.enter()
	if err != nil {
		return nil, err
	}
	defer p.dev.exit()
	var a C.struct_ibv_ah_attr
	setAH(&a, attr, 1)
	c, err := C.ibv_create_ah(h, &a)
	if c == nil {
		return nil, ibvErr("ibv_create_ah", err)
	}
	o := &ah{dev: p.dev, ah: c}
	p.dev.add(o)
	return o, nil
}

func (a *ah) Close() error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.ah == nil {
		return nil
	}
	if rc := C.ibv_destroy_ah(a.ah); rc != 0 {
		return rcErr("ibv_destroy_ah", int(rc))
	}
	a.ah = nil
	a.dev.remove(a, nil)
	return nil
}

// windowOn reports whether a live window of d was last bound to m. The windows are
// gathered first: a window's Close holds its lock while it takes d.mu.
func (d *device) windowOn(m *mr) bool {
	var ws []*mw
	d.mu.Lock()
	for o := range d.live {
		if w, ok := o.(*mw); ok {
			ws = append(ws, w)
		}
	}
	d.mu.Unlock()
	for _, w := range ws {
		w.mu.Lock()
		on := w.bound == m
		w.mu.Unlock()
		if on {
			return true
		}
	}
	return false
}

// mw is a memory window (struct ibv_mw).
type mw struct {
	dev   *device
	mu    sync.Mutex
	mw    *C.struct_ibv_mw
	bound *mr // the region of the last bind, which an unbind names again
}

func (w *mw) rank() int { return rankMW }

func (p *pd) AllocMW(t driver.MWType) (driver.MW, error) {
	h, err := p.enter()
	if err != nil {
		return nil, err
	}
	defer p.dev.exit()
	c, err := C.ibv_alloc_mw(h, C.enum_ibv_mw_type(t))
	if c == nil {
		return nil, ibvErr("ibv_alloc_mw", err)
	}
	o := &mw{dev: p.dev, mw: c}
	p.dev.add(o)
	return o, nil
}

// RKey reads the window's current rkey: a BIND_MW work request changes it when the
// device executes it.
func (w *mw) RKey() uint32 {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.mw == nil {
		return 0
	}
	return uint32(w.mw.rkey)
}

func (w *mw) Close() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.mw == nil {
		return nil
	}
	if rc := C.ibv_dealloc_mw(w.mw); rc != 0 {
		return rcErr("ibv_dealloc_mw", int(rc))
	}
	w.mw = nil
	w.dev.remove(w, nil)
	return nil
}

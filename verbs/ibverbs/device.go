//go:build ibverbs

package ibverbs

/*
#include <stdlib.h>
#include "shim.h"
*/
import "C"

import (
	"fmt"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/goverbs/goverbs/verbs/driver"
)

// device is an opened RDMA device (struct ibv_context).
type device struct {
	name string
	ctx  *C.struct_ibv_context
	attr driver.DeviceAttr
	path string // the device's sysfs directory, for counters
	// kernelWCFlags: completions carry the kernel's flag values (rxe), see gv_poll_cq.
	kernelWCFlags C.int
	// postsRunTransport: a send doorbell runs the transport in the kernel, in the
	// poster's thread (rxe), so posters yield now and then (yield.go).
	postsRunTransport bool

	// One completion channel serves every CQ of the device; its events are read by a
	// goroutine parked in the netpoller on chFile, as the async events are on asyncFile.
	ch        *C.struct_ibv_comp_channel
	chFile    *os.File
	asyncFile *os.File
	pumps     sync.WaitGroup
	events    chan driver.AsyncEvent
	lost      atomic.Uint64 // async events dropped because nobody read them

	// life is held shared by every call that uses the context (creating objects, querying)
	// and exclusively by Close to set closed: nothing reaches a closed context.
	life   sync.RWMutex
	closed bool

	mu   sync.Mutex // guards the maps
	live map[object]struct{}
	mrs  map[uint32]*mr         // by lkey, for checking inline SGEs
	cqs  map[unsafe.Pointer]*cq // by C pointer, for events
	qps  map[unsafe.Pointer]*qp
	srqs map[unsafe.Pointer]*srq
}

// object is what Device.Close destroys; rank orders it (QPs before the SRQs and CQs they
// use, everything before its PD).
type object interface {
	Close() error
	rank() int
}

func openDevice(d *C.struct_ibv_device, name string) (*device, error) {
	ctx, err := C.ibv_open_device(d)
	if ctx == nil {
		return nil, &driver.Error{Kind: driver.ErrUnavailable, Err: ibvErr("ibv_open_device "+name, err)}
	}
	dev := &device{
		name: name, ctx: ctx, path: C.GoString(&d.ibdev_path[0]),
		events: make(chan driver.AsyncEvent, 256),
		live:   map[object]struct{}{},
		mrs:    map[uint32]*mr{},
		cqs:    map[unsafe.Pointer]*cq{}, qps: map[unsafe.Pointer]*qp{}, srqs: map[unsafe.Pointer]*srq{},
	}
	var a C.struct_ibv_device_attr
	if rc := C.ibv_query_device(ctx, &a); rc != 0 {
		C.ibv_close_device(ctx)
		return nil, rcErr("ibv_query_device", int(rc))
	}
	dev.attr = deviceAttr(&a)
	if dev.attr.VendorID == rxeVendorID {
		dev.kernelWCFlags = 1
		dev.postsRunTransport = true
	}
	if err := dev.startPumps(); err != nil {
		dev.pumps.Wait()
		if dev.ch != nil {
			C.ibv_destroy_comp_channel(dev.ch)
		}
		C.ibv_close_device(ctx)
		return nil, err
	}
	return dev, nil
}

// rxeVendorID is the vendor ID Linux Soft-RoCE reports (RXE_VENDOR_ID).
const rxeVendorID = 0xffffff

func deviceAttr(a *C.struct_ibv_device_attr) driver.DeviceAttr {
	return driver.DeviceAttr{
		FWVer:                 C.GoString(&a.fw_ver[0]),
		NodeGUID:              uint64(C.gv_be64(C.uint64_t(a.node_guid))),
		SysImageGUID:          uint64(C.gv_be64(C.uint64_t(a.sys_image_guid))),
		MaxMRSize:             uint64(a.max_mr_size),
		PageSizeCap:           uint64(a.page_size_cap),
		VendorID:              uint32(a.vendor_id),
		VendorPartID:          uint32(a.vendor_part_id),
		HWVer:                 uint32(a.hw_ver),
		MaxQP:                 int(a.max_qp),
		MaxQPWR:               int(a.max_qp_wr),
		DeviceCapFlags:        uint32(a.device_cap_flags),
		MaxSGE:                int(a.max_sge),
		MaxSGERd:              int(a.max_sge_rd),
		MaxCQ:                 int(a.max_cq),
		MaxCQE:                int(a.max_cqe),
		MaxMR:                 int(a.max_mr),
		MaxPD:                 int(a.max_pd),
		MaxQPRdAtom:           int(a.max_qp_rd_atom),
		MaxQPInitRdAtom:       int(a.max_qp_init_rd_atom),
		MaxSRQ:                int(a.max_srq),
		MaxSRQWR:              int(a.max_srq_wr),
		MaxSRQSGE:             int(a.max_srq_sge),
		MaxAH:                 int(a.max_ah),
		MaxMcastGrp:           int(a.max_mcast_grp),
		MaxMcastQPAttach:      int(a.max_mcast_qp_attach),
		MaxTotalMcastQPAttach: int(a.max_total_mcast_qp_attach),
		MaxMW:                 int(a.max_mw),
		AtomicCap:             driver.AtomicCap(a.atomic_cap),
		PhysPortCnt:           uint8(a.phys_port_cnt),
		MaxPKeys:              uint16(a.max_pkeys),
	}
}

// Close destroys what is still open on the device, then the device: the kernel would
// release its part on its own, but not the provider library's memory or our pins.
func (d *device) Close() error {
	d.life.Lock()
	if d.closed {
		d.life.Unlock()
		return nil
	}
	d.closed = true
	d.life.Unlock()
	d.mu.Lock()
	objs := make([]object, 0, len(d.live))
	for o := range d.live {
		objs = append(objs, o)
	}
	d.mu.Unlock()

	d.stopPumps()
	slices.SortStableFunc(objs, func(a, b object) int { return a.rank() - b.rank() })
	for _, o := range objs {
		o.Close() // best effort: the device goes regardless
	}
	C.ibv_destroy_comp_channel(d.ch)
	if rc := C.ibv_close_device(d.ctx); rc != 0 {
		return rcErr("ibv_close_device", int(rc))
	}
	return nil
}

// enter starts a call that uses the device's context; exit ends it.
func (d *device) enter() error {
	d.life.RLock()
	if d.closed {
		d.life.RUnlock()
		return errClosed("device " + d.name)
	}
	return nil
}

func (d *device) exit() { d.life.RUnlock() }

// add records a new object, made between enter and exit.
func (d *device) add(o object) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.live[o] = struct{}{}
	switch o := o.(type) {
	case *mr:
		d.mrs[o.lkey] = o
	case *cq:
		d.cqs[unsafe.Pointer(o.cq)] = o
	case *qp:
		d.qps[unsafe.Pointer(o.qp)] = o
	case *srq:
		d.srqs[unsafe.Pointer(o.srq)] = o
	}
}

// remove forgets an object once it is destroyed. A destroyer must not hold d.mu:
// libibverbs' destroy calls wait for the events the pumps acknowledge, and the pumps take
// d.mu.
func (d *device) remove(o object, key unsafe.Pointer) {
	d.mu.Lock()
	defer d.mu.Unlock()
	delete(d.live, o)
	// A destroyed object's address may already be a new object's: delete only our own.
	switch o := o.(type) {
	case *mr:
		if d.mrs[o.lkey] == o {
			delete(d.mrs, o.lkey)
		}
	case *cq:
		if d.cqs[key] == o {
			delete(d.cqs, key)
		}
	case *qp:
		if d.qps[key] == o {
			delete(d.qps, key)
		}
	case *srq:
		if d.srqs[key] == o {
			delete(d.srqs, key)
		}
	}
}

// covered reports whether a live region's lkey is the SGE's and the region holds it.
func (d *device) covered(s *driver.SGE) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	m := d.mrs[s.LKey]
	return m != nil && s.Addr >= m.addr && s.Addr-m.addr+uint64(s.Length) <= m.length
}

func (d *device) Query() driver.DeviceAttr { return d.attr }

func (d *device) QueryPort(port uint8) driver.PortAttr {
	if d.enter() != nil {
		return driver.PortAttr{State: driver.PortDown}
	}
	defer d.exit()
	return d.queryPort(port)
}

func (d *device) queryPort(port uint8) driver.PortAttr {
	var a C.struct_ibv_port_attr
	if C.gv_query_port(d.ctx, C.uint8_t(port), &a) != 0 {
		return driver.PortAttr{State: driver.PortDown}
	}
	return driver.PortAttr{
		State:        driver.PortState(a.state),
		MaxMTU:       driver.MTU(a.max_mtu),
		ActiveMTU:    driver.MTU(a.active_mtu),
		GIDTblLen:    int(a.gid_tbl_len),
		PortCapFlags: uint32(a.port_cap_flags),
		MaxMsgSz:     uint32(a.max_msg_sz),
		PKeyTblLen:   uint16(a.pkey_tbl_len),
		LID:          uint16(a.lid),
		SMLID:        uint16(a.sm_lid),
		LMC:          uint8(a.lmc),
		PhysState:    uint8(a.phys_state),
		LinkLayer:    linkLayerName(a.link_layer),
		ActiveSpeed:  speedName(uint8(a.active_speed)),
		ActiveWidth:  widthName(uint8(a.active_width)),
	}
}

func linkLayerName(l C.uint8_t) string {
	if l == C.IBV_LINK_LAYER_ETHERNET {
		return "Ethernet"
	}
	return "InfiniBand"
}

// speedName and widthName give the texts ibv_devinfo prints for the encoded port speed
// and width (IBTA 14.2.5.6, PortInfo).
func speedName(s uint8) string {
	switch s {
	case 1:
		return "2.5 Gbps"
	case 2:
		return "5.0 Gbps"
	case 4, 8:
		return "10.0 Gbps"
	case 16:
		return "14.0 Gbps"
	case 32:
		return "25.0 Gbps"
	case 64:
		return "50.0 Gbps"
	case 128:
		return "100.0 Gbps"
	}
	return fmt.Sprintf("invalid speed (%d)", s)
}

func widthName(w uint8) string {
	switch w {
	case 1:
		return "1X"
	case 2:
		return "4X"
	case 4:
		return "8X"
	case 8:
		return "12X"
	case 16:
		return "2X"
	}
	return fmt.Sprintf("invalid width (%d)", w)
}

// GIDTable returns the port's GID table with entry i at index i; unused entries below
// the last valid one are zero, so that QueryGID's index is the device's.
func (d *device) GIDTable(port uint8) []driver.GIDEntry {
	if d.enter() != nil {
		return nil
	}
	defer d.exit()
	n := d.queryPort(port).GIDTblLen * int(d.attr.PhysPortCnt) // the call lists every port's
	if n <= 0 {
		return nil
	}
	entries := make([]C.struct_ibv_gid_entry, n)
	got := C.ibv_query_gid_table(d.ctx, &entries[0], C.size_t(n), 0)
	if got <= 0 {
		return nil
	}
	var out []driver.GIDEntry
	for _, e := range entries[:got] {
		if uint8(e.port_num) != port {
			continue
		}
		i := int(e.gid_index)
		for len(out) <= i {
			out = append(out, driver.GIDEntry{Index: len(out)})
		}
		out[i].GID = *(*driver.GID)(unsafe.Pointer(&e.gid))
		out[i].Type = gidTypeName(e.gid_type)
	}
	return out
}

func gidTypeName(t C.uint32_t) string {
	switch t {
	case C.IBV_GID_TYPE_IB:
		return "IB"
	case C.IBV_GID_TYPE_ROCE_V1:
		return "RoCE v1"
	case C.IBV_GID_TYPE_ROCE_V2:
		return "RoCE v2"
	}
	return "unknown"
}

// Progress does nothing: the device's hardware (or kernel) drives itself.
func (d *device) Progress() bool { return false }

func (d *device) AllocPD() (driver.PD, error) {
	if err := d.enter(); err != nil {
		return nil, err
	}
	defer d.exit()
	p, err := C.ibv_alloc_pd(d.ctx)
	if p == nil {
		return nil, ibvErr("ibv_alloc_pd", err)
	}
	o := &pd{dev: d, pd: p}
	d.add(o)
	return o, nil
}

func (d *device) Events() <-chan driver.AsyncEvent { return d.events }

//go:build goverbs_capi

package main

/*
#include <errno.h>
#include <string.h>
#include "gv.h"
*/
import "C"

import (
	"encoding/binary"
	"fmt"
	"os"
	"strings"
	"sync"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/goverbs/goverbs/verbs"
	"github.com/goverbs/goverbs/verbs/attach"
)

// devContext is an opened device (ibv_context) and the C objects its async events name.
// Contexts of one device share its verbs.Device: a program (pyverbs' tests, a library
// beside the program) may open a device many times, and a software device is a socket
// on ADDR:4791 that can be bound once.
type devContext struct {
	dev     *verbs.Device
	shared  *sharedDevice
	asyncFD int // write end of the async event pipe

	mu   sync.Mutex
	qps  map[*verbs.QP]unsafe.Pointer // the C ibv_qp of each QP
	cqs  map[*verbs.CQ]unsafe.Pointer
	srqs map[*verbs.SRQ]unsafe.Pointer
}

// sharedDevice is an open device and the contexts that use it.
type sharedDevice struct {
	name string
	dev  *verbs.Device
	ctxs map[*devContext]struct{} // under devicesMu
	done chan struct{}            // closed when the event pump has stopped
}

var (
	devicesMu sync.Mutex
	devices   = map[string]*sharedDevice{}
)

// gv_devices writes the names and node GUIDs of the devices GOVERBS_DEVICES lists, as
// package verbs reads it, and returns how many, or -1 after printing why the variable
// cannot be read.
//
//export gv_devices
func gv_devices(names *C.char, nameLen C.int, guids *C.uint64_t, max C.int) C.int {
	list, err := verbs.Devices()
	if err != nil {
		fmt.Fprintf(os.Stderr, "goverbs: %v\n", err)
		return -1
	}
	n := min(len(list), int(max))
	out := unsafe.Slice((*byte)(unsafe.Pointer(names)), int(nameLen)*n)
	g := unsafe.Slice((*uint64)(unsafe.Pointer(guids)), n)
	for i := range n {
		dst := out[i*int(nameLen) : (i+1)*int(nameLen)]
		clear(dst)
		copy(dst[:len(dst)-1], list[i].Name)
		g[i] = list[i].NodeGUID
	}
	return C.int(n)
}

// gv_open opens the named device; its async events are written to asyncFD as struct
// ibv_async_event records (the read end is the context's async_fd).
//
//export gv_open
func gv_open(name *C.char, asyncFD C.int, out *C.uintptr_t) C.int {
	n := C.GoString(name)
	devicesMu.Lock()
	defer devicesMu.Unlock()
	sd := devices[n]
	if sd == nil {
		dev, err := openDevice(n)
		if err != nil {
			return logErr("open device", err)
		}
		sd = &sharedDevice{name: n, dev: dev, ctxs: map[*devContext]struct{}{}, done: make(chan struct{})}
		devices[n] = sd
		go sd.pumpEvents()
	}
	c := &devContext{
		dev: sd.dev, shared: sd, asyncFD: int(asyncFD),
		qps: map[*verbs.QP]unsafe.Pointer{}, cqs: map[*verbs.CQ]unsafe.Pointer{}, srqs: map[*verbs.SRQ]unsafe.Pointer{},
	}
	sd.ctxs[c] = struct{}{}
	*out = newHandle(c)
	return 0
}

// EnvBusyPoll turns busy polling off ("0") or on (anything else; the default) for the
// devices the C library opens. C programs poll their CQs in a loop, as they would read
// an RNIC's CQ memory, and that poll reads the socket itself in either mode; in
// busy-poll mode the socket is never in the netpoller and posts wait for the next poll
// (doorbell batching).
const EnvBusyPoll = "GOVERBS_BUSY_POLL"

// C programs attached to goverbs serve keep the daemon's engine, as the C flavour's do
// (capi/attach): a Go program's default is an engine of its own on the daemon's address
// (verbs/attach), which would give C programs of this flavour other XRC sharing and
// listings than the other flavour's. GOVERBS_ATTACH_ENGINE=1 still asks for one.
func init() { attach.SetOwnEngineDefault(false) }

// openDevice opens a listed device: a software one in busy-poll mode unless EnvBusyPoll
// is "0".
func openDevice(name string) (*verbs.Device, error) {
	list, err := verbs.Devices()
	if err != nil {
		return nil, err
	}
	for _, info := range list {
		if info.Name != name {
			continue
		}
		cfg, ok := info.SoftConfig()
		if !ok {
			return verbs.Open(name)
		}
		cfg.BusyPoll = os.Getenv(EnvBusyPoll) != "0"
		return verbs.OpenSoft(cfg)
	}
	return nil, fmt.Errorf("%w: %q", verbs.ErrNoDevice, name)
}

// pumpEvents writes each async event to the async fd of the context whose object it
// names, or of every context for a port event, for ibv_get_async_event to read. An event
// that finds a pipe full (64 KiB of unread events) is dropped.
func (sd *sharedDevice) pumpEvents() {
	defer close(sd.done)
	for ev := range sd.dev.Events() {
		var rec C.struct_ibv_async_event
		rec.event_type = C.enum_ibv_event_type(ev.Type)
		rb := unsafe.Slice((*byte)(unsafe.Pointer(&rec)), unsafe.Sizeof(rec))
		devicesMu.Lock()
		for c := range sd.ctxs {
			var obj unsafe.Pointer
			c.mu.Lock()
			switch {
			case ev.QP != nil:
				obj = c.qps[ev.QP]
			case ev.CQ != nil:
				obj = c.cqs[ev.CQ]
			case ev.SRQ != nil:
				obj = c.srqs[ev.SRQ]
			}
			c.mu.Unlock()
			switch {
			case obj != nil:
				*(*unsafe.Pointer)(unsafe.Pointer(&rec.element)) = obj
			case ev.QP != nil || ev.CQ != nil || ev.SRQ != nil:
				continue // not this context's object (or being destroyed)
			default:
				*(*unsafe.Pointer)(unsafe.Pointer(&rec.element)) = nil
				*(*C.int)(unsafe.Pointer(&rec.element)) = C.int(ev.Port)
			}
			unix.Write(c.asyncFD, rb)
		}
		devicesMu.Unlock()
	}
}

// gv_close closes a context, and the device with its last context; when it returns,
// nothing is written to the context's async fd any more.
//
//export gv_close
func gv_close(h C.uintptr_t) C.int {
	c := handle[*devContext](h)
	if c == nil {
		return C.EINVAL
	}
	sd := c.shared
	devicesMu.Lock()
	delete(sd.ctxs, c)
	last := len(sd.ctxs) == 0
	if last {
		delete(devices, sd.name)
	}
	devicesMu.Unlock()
	dropHandle(h)
	if !last {
		return 0
	}
	err := sd.dev.Close()
	<-sd.done
	if v := os.Getenv(EnvStats); v != "" && v != "0" {
		printStats(sd.dev)
	}
	return logErr("close device", err)
}

// EnvStats asks for each device's counters on stderr when it closes, as the goverbs
// tools print them (GOVERBS_STATS, in the layout of iproute2's `rdma statistic show`).
const EnvStats = "GOVERBS_STATS"

func printStats(dev *verbs.Device) {
	var b strings.Builder
	fmt.Fprintf(&b, "link %s/1", dev.Name())
	for _, c := range dev.Counters() {
		fmt.Fprintf(&b, " %s %d", c.Name, c.Value)
	}
	fmt.Fprintln(os.Stderr, b.String())
}

//export gv_query_device
func gv_query_device(h C.uintptr_t, a *C.struct_ibv_device_attr) C.int {
	c := handle[*devContext](h)
	if c == nil {
		return C.EINVAL
	}
	d := c.dev.Query()
	*a = C.struct_ibv_device_attr{}
	fw := unsafe.Slice((*byte)(unsafe.Pointer(&a.fw_ver[0])), len(a.fw_ver))
	copy(fw[:len(fw)-1], d.FWVer)
	putBE64(unsafe.Pointer(&a.node_guid), d.NodeGUID)
	putBE64(unsafe.Pointer(&a.sys_image_guid), d.SysImageGUID)
	a.max_mr_size = C.uint64_t(d.MaxMRSize)
	a.page_size_cap = C.uint64_t(d.PageSizeCap)
	a.vendor_id = C.uint32_t(d.VendorID)
	a.vendor_part_id = C.uint32_t(d.VendorPartID)
	a.hw_ver = C.uint32_t(d.HWVer)
	a.max_qp = C.int(d.MaxQP)
	a.max_qp_wr = C.int(d.MaxQPWR)
	a.device_cap_flags = C.uint(d.DeviceCapFlags)
	a.max_sge = C.int(d.MaxSGE)
	a.max_sge_rd = C.int(d.MaxSGERd)
	a.max_cq = C.int(d.MaxCQ)
	a.max_cqe = C.int(d.MaxCQE)
	a.max_mr = C.int(d.MaxMR)
	a.max_pd = C.int(d.MaxPD)
	a.max_qp_rd_atom = C.int(d.MaxQPRdAtom)
	a.max_res_rd_atom = C.int(d.MaxQPRdAtom * d.MaxQP)
	a.max_qp_init_rd_atom = C.int(d.MaxQPInitRdAtom)
	a.atomic_cap = C.enum_ibv_atomic_cap(d.AtomicCap)
	a.max_mw = C.int(d.MaxMW)
	a.max_ah = C.int(d.MaxAH)
	a.max_mcast_grp = C.int(d.MaxMcastGrp)
	a.max_mcast_qp_attach = C.int(d.MaxMcastQPAttach)
	a.max_total_mcast_qp_attach = C.int(d.MaxTotalMcastQPAttach)
	a.max_srq = C.int(d.MaxSRQ)
	a.max_srq_wr = C.int(d.MaxSRQWR)
	a.max_srq_sge = C.int(d.MaxSRQSGE)
	a.max_pkeys = C.uint16_t(d.MaxPKeys)
	a.phys_port_cnt = C.uint8_t(d.PhysPortCnt)
	return 0
}

// gv_query_port fills a port's attributes (ibv_query_port).
//
//export gv_query_port
func gv_query_port(h C.uintptr_t, port C.uint8_t, a *C.struct_ibv_port_attr) C.int {
	c := handle[*devContext](h)
	if c == nil {
		return C.EINVAL
	}
	p, err := c.dev.QueryPort(uint8(port))
	if err != nil {
		return logErr("query port", err)
	}
	*a = C.struct_ibv_port_attr{}
	a.state = C.enum_ibv_port_state(p.State)
	a.max_mtu = C.enum_ibv_mtu(p.MaxMTU)
	a.active_mtu = C.enum_ibv_mtu(p.ActiveMTU)
	a.gid_tbl_len = C.int(p.GIDTblLen)
	a.port_cap_flags = C.uint32_t(p.PortCapFlags)
	a.max_msg_sz = C.uint32_t(p.MaxMsgSz)
	a.pkey_tbl_len = C.uint16_t(p.PKeyTblLen)
	a.lid = C.uint16_t(p.LID)
	a.sm_lid = C.uint16_t(p.SMLID)
	a.lmc = C.uint8_t(p.LMC)
	a.max_vl_num = 1
	a.phys_state = C.uint8_t(p.PhysState)
	a.link_layer = C.IBV_LINK_LAYER_ETHERNET
	if p.LinkLayer == "InfiniBand" {
		a.link_layer = C.IBV_LINK_LAYER_INFINIBAND
	}
	// A software port has no lane width or signalling rate; report 1X at 25 Gb/s
	// (EDR encoding), what Linux rxe reports on a link it cannot measure.
	a.active_width = 1
	a.active_speed = 32
	return 0
}

//export gv_query_gid
func gv_query_gid(h C.uintptr_t, port C.uint8_t, index C.int, gid *C.union_ibv_gid) C.int {
	c := handle[*devContext](h)
	if c == nil {
		return C.EINVAL
	}
	g, err := c.dev.QueryGID(uint8(port), int(index))
	if err != nil {
		return logErr("query GID", err)
	}
	*(*verbs.GID)(unsafe.Pointer(gid)) = g
	return 0
}

// gv_gid_count is the length of a port's GID table, or -errno.
//
//export gv_gid_count
func gv_gid_count(h C.uintptr_t, port C.uint8_t) C.int {
	c := handle[*devContext](h)
	if c == nil {
		return -C.EINVAL
	}
	t, err := c.dev.GIDTable(uint8(port))
	if err != nil {
		return -logErr("query GID table", err)
	}
	return C.int(len(t))
}

func putBE64(p unsafe.Pointer, v uint64) {
	binary.BigEndian.PutUint64(unsafe.Slice((*byte)(p), 8), v)
}

//go:build ibverbs

package cm

/*
#cgo LDFLAGS: -lrdmacm -libverbs
#include "kernel_ibverbs.h"
*/
import "C"

import (
	"errors"
	"fmt"
	"net/netip"
	"os"
	"sync"
	"syscall"
	"time"
	"unsafe"

	"github.com/goverbs/goverbs/verbs"
	"github.com/goverbs/goverbs/verbs/ibverbs"
)

// The event numbers kernel.go uses are librdmacm's.
var _ = [1]struct{}{}[evAddrResolved-C.RDMA_CM_EVENT_ADDR_RESOLVED]
var _ = [1]struct{}{}[evConnectRequest-C.RDMA_CM_EVENT_CONNECT_REQUEST]
var _ = [1]struct{}{}[evRejected-C.RDMA_CM_EVENT_REJECTED]
var _ = [1]struct{}{}[evTimewaitExit-C.RDMA_CM_EVENT_TIMEWAIT_EXIT]

// newKernel makes the agent of dev when it is a kernel device (ok true), with its
// event channel waited on in Go's netpoller.
func newKernel(dev *verbs.Device, cfg *Config) (*Agent, bool, error) {
	if dev.Info().Provider != ibverbs.ProviderName {
		return nil, false, nil
	}
	b, err := openLibrdmacm()
	if err != nil {
		return nil, true, err
	}
	a, err := startKernelAgent(dev, b, cfg)
	return a, true, err
}

// librdmacm is kernelBackend over the system's librdmacm: one event channel, its
// events read by one goroutine parked in the netpoller (no thread waits in C).
type librdmacm struct {
	ch   *C.struct_rdma_event_channel
	file *os.File // a duplicate of the channel's fd, in the netpoller
	loop sync.WaitGroup

	// busy is held shared by every call into librdmacm with an id or the channel,
	// exclusively to destroy them: an Agent.Close or a peer's disconnection may destroy
	// an id while a Dial is in rdma_resolve_route with it.
	busy sync.RWMutex

	mu     sync.Mutex
	ids    map[uint64]*C.struct_rdma_cm_id
	next   uint64
	closed bool
}

func openLibrdmacm() (*librdmacm, error) {
	ch, err := C.rdma_create_event_channel()
	if ch == nil {
		return nil, fmt.Errorf("cm: rdma_create_event_channel (is rdma_ucm loaded?): %w", errnoErr(err))
	}
	// Non-blocking, rdma_get_cm_event fails with EAGAIN when no event is there.
	f, err := ibverbs.PollableFD(int(ch.fd), "rdma_cm event channel")
	if err != nil {
		C.rdma_destroy_event_channel(ch)
		return nil, fmt.Errorf("cm: %w", err)
	}
	return &librdmacm{ch: ch, file: f, ids: map[uint64]*C.struct_rdma_cm_id{}}, nil
}

func errnoErr(err error) error {
	if err == nil {
		return errors.New("failed without an errno")
	}
	return err
}

// start runs the event loop: each time the channel is readable it reads events until
// EAGAIN and hands each to handle, already acknowledged.
func (b *librdmacm) start(handle func(kevent)) {
	rc, err := b.file.SyscallConn()
	if err != nil {
		return
	}
	b.loop.Add(1)
	go func() {
		defer b.loop.Done()
		var ev C.struct_gv_cm_event
		rc.Read(func(uintptr) bool {
			for {
				if r, err := C.gv_get_event(b.ch, &ev); r != 0 {
					// EAGAIN: drained, wait for more; EINTR: again; anything else
					// (the channel is being destroyed) ends the loop.
					if errors.Is(err, syscall.EINTR) {
						continue
					}
					return !errors.Is(err, syscall.EAGAIN)
				}
				handle(b.convert(&ev))
			}
		})
	}()
}

// convert turns a flattened event into a kevent; a CONNECT_REQUEST's new id gets a
// token of its own (librdmacm gave it the listener's context).
func (b *librdmacm) convert(ev *C.struct_gv_cm_event) kevent {
	e := kevent{kind: cmEvent(ev.event), status: int(ev.status), tok: uint64(ev.tok), listen: uint64(ev.listen_tok)}
	if n := int(ev.priv_len); n > 0 {
		e.priv = C.GoBytes(unsafe.Pointer(&ev.priv[0]), C.int(min(n, len(ev.priv))))
	}
	e.param = kparam{responderResources: uint8(ev.responder_resources), initiatorDepth: uint8(ev.initiator_depth),
		retryCount: uint8(ev.retry_count), rnrRetryCount: uint8(ev.rnr_retry_count), srq: ev.srq != 0,
		qpn: uint32(ev.qp_num) & 0xffffff}
	if ev.ud != 0 {
		e.param = kparam{}
		e.ud = udParam{qpn: uint32(ev.qp_num) & 0xffffff, qkey: uint32(ev.qkey), ah: verbs.AHAttr{
			DGID: *(*verbs.GID)(unsafe.Pointer(&ev.dgid)), SGIDIndex: uint8(ev.sgid_index),
			HopLimit: uint8(ev.hop_limit), TrafficClass: uint8(ev.traffic_class),
			FlowLabel: uint32(ev.flow_label), SL: uint8(ev.sl), Port: uint8(ev.port_num)}}
	}
	if e.kind == evConnectRequest && ev.id != nil {
		e.local = sockAddr(&ev.local_ip, ev.local_port, ev.local_family)
		e.remote = sockAddr(&ev.remote_ip, ev.remote_port, ev.remote_family)
		b.mu.Lock()
		b.next++
		e.tok = b.next
		b.ids[e.tok] = ev.id
		b.mu.Unlock()
		C.gv_set_tok(ev.id, C.uint64_t(e.tok))
	}
	return e
}

func sockAddr(ip *[16]C.uint8_t, port C.uint16_t, family C.int) netip.AddrPort {
	if family == 0 {
		return netip.AddrPort{}
	}
	a := netip.AddrFrom16(*(*[16]byte)(unsafe.Pointer(ip)))
	if family == C.AF_INET {
		a = a.Unmap()
	}
	return netip.AddrPortFrom(a, uint16(port))
}

// with runs f with the id tok, which stays alive meanwhile.
func (b *librdmacm) with(tok uint64, f func(*C.struct_rdma_cm_id) error) error {
	b.busy.RLock()
	defer b.busy.RUnlock()
	b.mu.Lock()
	id := b.ids[tok]
	b.mu.Unlock()
	if id == nil {
		return ErrClosed
	}
	return f(id)
}

func (b *librdmacm) newID(udp bool) (uint64, error) {
	b.busy.RLock()
	defer b.busy.RUnlock()
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return 0, ErrClosed
	}
	b.next++
	tok := b.next
	b.mu.Unlock()
	var id *C.struct_rdma_cm_id
	u := C.int(0)
	if udp {
		u = 1
	}
	if r, err := C.gv_create_id(b.ch, &id, C.uint64_t(tok), u); r != 0 {
		return 0, fmt.Errorf("cm: rdma_create_id: %w", errnoErr(err))
	}
	b.mu.Lock()
	b.ids[tok] = id
	b.mu.Unlock()
	return tok, nil
}

// call runs a librdmacm call that returns -1 with errno on failure.
func (b *librdmacm) call(tok uint64, op string, f func(*C.struct_rdma_cm_id) (C.int, error)) error {
	return b.with(tok, func(id *C.struct_rdma_cm_id) error {
		if r, err := f(id); r != 0 {
			return fmt.Errorf("cm: %s: %w", op, errnoErr(err))
		}
		return nil
	})
}

func ip16(a netip.Addr) (v4 C.int, ip [16]byte) {
	if a.Unmap().Is4() {
		v4 = 1
	}
	return v4, a.As16()
}

func (b *librdmacm) resolveAddr(tok uint64, src netip.Addr, dst netip.AddrPort, timeout time.Duration) error {
	v4, s := ip16(src)
	dv4, d := ip16(dst.Addr())
	if v4 != dv4 {
		return fmt.Errorf("cm: %v and %v are of different address families", src, dst.Addr())
	}
	return b.call(tok, "rdma_resolve_addr", func(id *C.struct_rdma_cm_id) (C.int, error) {
		r, err := C.gv_resolve_addr(id, v4, (*C.uint8_t)(&s[0]), (*C.uint8_t)(&d[0]), C.uint16_t(dst.Port()),
			C.int(timeout.Milliseconds()))
		return r, err
	})
}

func (b *librdmacm) bind(tok uint64, addr netip.Addr) error {
	v4, ip := ip16(addr)
	return b.call(tok, "rdma_bind_addr", func(id *C.struct_rdma_cm_id) (C.int, error) {
		r, err := C.gv_bind(id, v4, (*C.uint8_t)(&ip[0]))
		return r, err
	})
}

func (b *librdmacm) join(tok uint64, group netip.Addr, sendOnly bool) error {
	v4, ip := ip16(group)
	so := C.int(0)
	if sendOnly {
		so = 1
	}
	return b.call(tok, "rdma_join_multicast", func(id *C.struct_rdma_cm_id) (C.int, error) {
		r, err := C.gv_join(id, v4, (*C.uint8_t)(&ip[0]), so)
		return r, err
	})
}

func (b *librdmacm) resolveRoute(tok uint64, timeout time.Duration) error {
	return b.call(tok, "rdma_resolve_route", func(id *C.struct_rdma_cm_id) (C.int, error) {
		r, err := C.rdma_resolve_route(id, C.int(timeout.Milliseconds()))
		return r, err
	})
}

func (b *librdmacm) device(tok uint64) (name string, guid uint64, err error) {
	err = b.with(tok, func(id *C.struct_rdma_cm_id) error {
		var g C.uint64_t
		n := C.gv_id_device(id, &g)
		if n == nil {
			return errors.New("cm: the kernel's rdma_cm bound the id to no device")
		}
		name, guid = C.GoString(n), uint64(g)
		return nil
	})
	return name, guid, err
}

func (b *librdmacm) localAddr(tok uint64) (a netip.AddrPort) {
	b.with(tok, func(id *C.struct_rdma_cm_id) error {
		var ip [16]C.uint8_t
		var port C.uint16_t
		var family C.int
		C.gv_local_addr(id, &ip[0], &port, &family)
		a = sockAddr(&ip, port, family)
		return nil
	})
	return a
}

func (b *librdmacm) listen(tok uint64, addr netip.AddrPort, backlog int) (uint16, error) {
	v4, ip := ip16(addr.Addr())
	var got C.uint16_t
	err := b.call(tok, "rdma_bind_addr/rdma_listen", func(id *C.struct_rdma_cm_id) (C.int, error) {
		r, err := C.gv_bind_listen(id, v4, (*C.uint8_t)(&ip[0]), C.uint16_t(addr.Port()), C.int(backlog), &got)
		return r, err
	})
	return uint16(got), err
}

func (b *librdmacm) conn(tok uint64, accept bool, p *kparam, priv []byte) error {
	var pp *C.uint8_t
	if len(priv) > 0 {
		pp = (*C.uint8_t)(&priv[0])
	}
	acc, op := C.int(0), "rdma_connect"
	if accept {
		acc, op = 1, "rdma_accept"
	}
	srq := C.uint8_t(0)
	if p.srq {
		srq = 1
	}
	return b.call(tok, op, func(id *C.struct_rdma_cm_id) (C.int, error) {
		r, err := C.gv_conn(id, acc, pp, C.int(len(priv)), C.uint8_t(p.responderResources), C.uint8_t(p.initiatorDepth),
			C.uint8_t(p.retryCount), C.uint8_t(p.rnrRetryCount), srq, C.uint32_t(p.qpn))
		return r, err
	})
}

func (b *librdmacm) connect(tok uint64, p *kparam, priv []byte) error {
	return b.conn(tok, false, p, priv)
}
func (b *librdmacm) accept(tok uint64, p *kparam, priv []byte) error {
	return b.conn(tok, true, p, priv)
}

func (b *librdmacm) reject(tok uint64, priv []byte) error {
	var pp unsafe.Pointer
	if len(priv) > 0 {
		pp = unsafe.Pointer(&priv[0])
	}
	return b.call(tok, "rdma_reject", func(id *C.struct_rdma_cm_id) (C.int, error) {
		r, err := C.rdma_reject(id, pp, C.uint8_t(len(priv)))
		return r, err
	})
}

func (b *librdmacm) establish(tok uint64) error {
	return b.call(tok, "rdma_establish", func(id *C.struct_rdma_cm_id) (C.int, error) {
		r, err := C.rdma_establish(id)
		return r, err
	})
}

func (b *librdmacm) setOption(tok uint64, opt Option, val uint32) error {
	return b.call(tok, "rdma_set_option "+opt.String(), func(id *C.struct_rdma_cm_id) (C.int, error) {
		r, err := C.gv_set_option(id, C.int(opt), C.uint32_t(val))
		return r, err
	})
}

func (b *librdmacm) disconnect(tok uint64) error {
	return b.call(tok, "rdma_disconnect", func(id *C.struct_rdma_cm_id) (C.int, error) {
		r, err := C.rdma_disconnect(id)
		return r, err
	})
}

func (b *librdmacm) initQPAttr(tok uint64, state verbs.QPState) (verbs.QPAttr, verbs.QPAttrMask, error) {
	var a C.struct_ibv_qp_attr
	var mask C.int
	err := b.call(tok, "rdma_init_qp_attr "+state.String(), func(id *C.struct_rdma_cm_id) (C.int, error) {
		r, err := C.gv_init_qp_attr(id, C.int(state), &a, &mask)
		return r, err
	})
	if err != nil {
		return verbs.QPAttr{}, 0, err
	}
	return ibverbs.QPAttrFromC(unsafe.Pointer(&a)), verbs.QPAttrMask(mask), nil
}

// destroy destroys the id: librdmacm waits until its events read so far are
// acknowledged, which the loop does before handing them on, so it may be called from
// the loop's handler too.
func (b *librdmacm) destroy(tok uint64) {
	b.busy.Lock()
	defer b.busy.Unlock()
	b.mu.Lock()
	id := b.ids[tok]
	delete(b.ids, tok)
	b.mu.Unlock()
	if id != nil {
		C.rdma_destroy_id(id)
	}
}

// close stops the loop, destroys the ids left and then the channel; calls after it
// find no id (ErrClosed).
func (b *librdmacm) close() error {
	b.mu.Lock()
	b.closed = true
	b.mu.Unlock()
	b.file.Close() // wakes the loop's wait with an error
	b.loop.Wait()
	b.busy.Lock()
	defer b.busy.Unlock()
	b.mu.Lock()
	ids := b.ids
	b.ids = map[uint64]*C.struct_rdma_cm_id{}
	b.mu.Unlock()
	for _, id := range ids {
		C.rdma_destroy_id(id)
	}
	C.rdma_destroy_event_channel(b.ch)
	return nil
}

// kernelDeviceFor names the kernel device the kernel's rdma_cm binds addr to. Not for
// a loopback address: rdma_cm binds those to whichever device has an active port, whose
// GIDs are other addresses, where a program on 127.0.0.1 means a software device.
func kernelDeviceFor(addr netip.Addr) (verbs.DeviceInfo, bool) {
	addr = addr.Unmap()
	if !addr.IsValid() || addr.IsLoopback() || addr.IsUnspecified() {
		return verbs.DeviceInfo{}, false
	}
	v4, ip := ip16(addr)
	name := C.gv_bound_device(v4, (*C.uint8_t)(&ip[0]))
	if name == nil {
		return verbs.DeviceInfo{}, false
	}
	want := C.GoString(name)
	list, err := verbs.Devices()
	if err != nil {
		return verbs.DeviceInfo{}, false
	}
	for _, d := range list {
		if d.Provider == ibverbs.ProviderName && d.Name == want {
			return d, true
		}
	}
	return verbs.DeviceInfo{}, false
}

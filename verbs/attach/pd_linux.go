package attach

import (
	"sync/atomic"
	"unsafe"

	"github.com/goverbs/goverbs/internal/attach"
	"github.com/goverbs/goverbs/verbs/driver"
)

// PD is a protection domain in the daemon.
type PD struct {
	d *Device
	h uint32
}

func (p *PD) Close() error {
	_, err := p.d.call(attach.OpDeallocPD, func(w *attach.Writer) { w.U32(p.h) })
	return err
}

// MR is a registered region: buf's pages, shared with the daemon.
type MR struct {
	closed     atomic.Bool
	d          *Device
	h          uint32
	lkey, rkey uint32
	addr       uint64
	span       *sharedSpan
}

// RegMR shares buf's pages with the daemon (share) and registers them there under
// buf's address, which is what peers and SGEs name.
func (p *PD) RegMR(buf []byte, access driver.Access) (driver.MR, error) {
	if len(buf) == 0 {
		return nil, driver.NewError(driver.ErrInvalidAttr, "memory region is empty")
	}
	if p.d.gone() {
		return nil, errGone
	}
	sp, off, err := share(buf)
	if err != nil {
		return nil, err
	}
	addr := uint64(uintptr(unsafe.Pointer(unsafe.SliceData(buf))))
	r, files, err := p.d.ctl.call(attach.OpRegMR, func(w *attach.Writer) {
		w.U32(p.h)
		w.U32(uint32(access))
		w.U64(addr)
		w.U64(uint64(len(buf)))
		w.U64(off)
	}, int(sp.reg.File().Fd()))
	if err == nil {
		err = want(&r, files, 0)
	}
	if err != nil {
		unshare(sp)
		return nil, err
	}
	return &MR{d: p.d, h: r.U32(), lkey: r.U32(), rkey: r.U32(), addr: addr, span: sp}, nil
}

// Close deregisters the region and gives its pages back to private memory (unshare)
// once no other registration shares them. A device whose daemon has gone has nothing to
// deregister, and neither has one the program closed; the pages go back all the same.
func (m *MR) Close() error {
	_, err := m.d.call(attach.OpDeregMR, func(w *attach.Writer) { w.U32(m.h) })
	if err != nil && !m.d.gone() && !m.d.closed.Load() {
		return err
	}
	if !m.closed.CompareAndSwap(false, true) {
		return err
	}
	if uerr := unshare(m.span); err == nil {
		err = uerr
	}
	return err
}
func (m *MR) LKey() uint32 { return m.lkey }
func (m *MR) RKey() uint32 { return m.rkey }
func (m *MR) Addr() uint64 { return m.addr }

// AH is an address handle in the daemon.
type AH struct {
	closed atomic.Bool
	d      *Device
	h      uint32
}

func (p *PD) CreateAH(a *driver.AHAttr) (driver.AH, error) {
	r, err := p.d.call(attach.OpCreateAH, func(w *attach.Writer) {
		w.U32(p.h)
		w.PutAH(a)
	})
	if err != nil {
		return nil, err
	}
	return &AH{d: p.d, h: r.U32()}, nil
}

func (a *AH) Close() error {
	_, err := a.d.call(attach.OpDestroyAH, func(w *attach.Writer) { w.U32(a.h) })
	if err == nil {
		a.closed.Store(true)
	}
	return err
}

// MW is a memory window in the daemon. Its rkey is the one its last bind gave it.
type MW struct {
	closed atomic.Bool
	d      *Device
	h      uint32
	rkey   atomic.Uint32
}

func (p *PD) AllocMW(t driver.MWType) (driver.MW, error) {
	r, err := p.d.call(attach.OpAllocMW, func(w *attach.Writer) {
		w.U32(p.h)
		w.U8(uint8(t))
	})
	if err != nil {
		return nil, err
	}
	m := &MW{d: p.d, h: r.U32()}
	m.rkey.Store(r.U32())
	return m, nil
}

func (m *MW) Close() error {
	_, err := m.d.call(attach.OpDeallocMW, func(w *attach.Writer) { w.U32(m.h) })
	if err == nil {
		m.closed.Store(true)
	}
	return err
}
func (m *MW) RKey() uint32 { return m.rkey.Load() }

// The handles of a work request's objects, which must be this provider's; ok is
// false for one already closed (a post naming it fails at once, as the engine's does).
func ahHandle(r driver.AHRef) (uint32, bool) {
	if r == nil {
		return 0, true
	}
	a, ok := r.DriverAH().(*AH)
	if !ok || a == nil {
		return 0, true
	}
	return a.h, !a.closed.Load()
}

func mwOf(r driver.MWRef) *MW {
	if r == nil {
		return nil
	}
	m, _ := r.DriverMW().(*MW)
	return m
}

func mrHandle(r driver.MRRef) (uint32, bool) {
	if r == nil {
		return 0, true
	}
	m, ok := r.DriverMR().(*MR)
	if !ok || m == nil {
		return 0, true
	}
	return m.h, !m.closed.Load()
}

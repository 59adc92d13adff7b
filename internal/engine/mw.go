// Memory windows, type 1 and type 2 (IBTA 10.6.7): allocation, binding and
// invalidation.

package engine

import (
	"sync"
	"sync/atomic"

	"github.com/goverbs/goverbs/verbs/driver"
)

var (
	ErrMWType   = driver.NewError(driver.ErrInvalidAttr, "memory window type must be 1 or 2")
	ErrMRBusy   = driver.NewError(driver.ErrBusy, "memory region has memory windows bound to it")
	ErrMWClosed = driver.NewError(driver.ErrClosed, "memory window is closed")
	ErrMRClosed = driver.NewError(driver.ErrClosed, "memory region is closed")
)

// MW is a memory window (IBTA 10.6.7): a remotely accessible view of part of a memory
// region, with its own rkey, bound and unbound through a QP's send queue. Type 1 windows
// are bound with a bind call and stay until rebound; type 2 windows are bound with a
// BIND_MW work request and revoked by LOCAL_INV or a peer's SEND_WITH_INV.
//
// The window's key-table slot always holds its current binding as an immutable region;
// binding stores a new region, so the receive path never sees a half-made binding.
type MW struct {
	dev *Device
	pd  *PD
	typ uint8
	idx uint32

	mu     sync.Mutex
	cur    *region     // the slot's current content (a placeholder when unbound)
	mr     *MR         // the region it is bound to, if any
	closed atomic.Bool // written under mu; a post reads it without
}

// BindMW describes a binding (struct ibv_mw_bind_info, plus the new rkey for type 2).
type BindMW struct {
	MW     *MW
	MR     *MR
	Addr   uint64
	Length uint64
	Access driver.Access
	RKey   uint32 // type 2: the new rkey (same index, new 8-bit key); type 1: set by the engine
}

// AllocMW allocates an unbound memory window (ibv_alloc_mw).
func (pd *PD) AllocMW(typ driver.MWType) (driver.MW, error) {
	mw, err := pd.allocMW(uint8(typ))
	if err != nil {
		return nil, err
	}
	return mw, nil
}

func (pd *PD) allocMW(typ uint8) (*MW, error) {
	if pd.closed.Load() {
		return nil, ErrPDClosed
	}
	if typ != 1 && typ != 2 {
		return nil, ErrMWType
	}
	mw := &MW{dev: pd.dev, pd: pd, typ: typ}
	placeholder := &region{pd: pd, window: true, mwType: typ}
	if err := pd.dev.keys.add(placeholder); err != nil {
		return nil, err
	}
	placeholder.valid.Store(false) // unbound: the key names nothing yet
	mw.idx = placeholder.key >> keyIndexBits
	mw.cur = placeholder
	pd.refs.Add(1)
	return mw, nil
}

// RKey returns the window's current rkey.
func (mw *MW) RKey() uint32 {
	mw.mu.Lock()
	defer mw.mu.Unlock()
	return mw.cur.key
}

// DriverMW returns the window as the driver reference a BIND_MW request names.
func (mw *MW) DriverMW() driver.MW {
	if mw == nil {
		return nil
	}
	return mw
}

// Type returns 1 or 2.
func (mw *MW) Type() uint8 { return mw.typ }

// Close deallocates the window; its rkey stops working at once (ibv_dealloc_mw).
func (mw *MW) Close() error {
	mw.mu.Lock()
	defer mw.mu.Unlock()
	if mw.closed.Load() {
		return nil
	}
	mw.closed.Store(true)
	mw.dev.keys.remove(mw.cur) // invalidates and waits for accesses in progress
	if mw.mr != nil {
		mw.mr.windows.Add(-1)
		mw.mr = nil
	}
	mw.pd.refs.Add(-1)
	return nil
}

// bind executes a bind for a QP of pd (IBTA 10.6.7.2). It returns false for a binding
// the spec forbids, which completes with MW_BIND_ERR.
func (mw *MW) bind(pd *PD, b *BindMW) bool {
	mw.mu.Lock()
	defer mw.mu.Unlock()
	if mw.closed.Load() || mw.pd != pd {
		return false
	}
	if mw.typ == 2 && mw.cur.valid.Load() {
		return false // a type 2 window is rebound only after invalidation (C10-...: MW must be free)
	}
	if b.RKey>>keyIndexBits != mw.idx {
		return false // only the 8-bit key may change
	}
	if b.Length == 0 && mw.typ == 1 { // unbind
		mw.replace(&region{pd: pd, window: true, mwType: mw.typ, key: b.RKey}, nil, false)
		return true
	}
	mr := b.MR
	if mr == nil || !mr.valid.Load() || mr.pd != pd || mr.access&driver.AccessMWBind == 0 {
		return false
	}
	if b.Access&(driver.AccessRemoteWrite|driver.AccessRemoteAtomic) != 0 && mr.access&driver.AccessLocalWrite == 0 {
		return false
	}
	if b.Addr < mr.va || b.Length > uint64(len(mr.buf)) || b.Addr-mr.va > uint64(len(mr.buf))-b.Length {
		return false
	}
	off := b.Addr - mr.va
	r := &region{
		pd: pd, buf: mr.buf[off : off+b.Length : off+b.Length], va: b.Addr, key: b.RKey,
		access: b.Access & (driver.AccessRemoteWrite | driver.AccessRemoteRead | driver.AccessRemoteAtomic),
		window: true, mwType: mw.typ,
	}
	mw.replace(r, mr, true)
	return true
}

// replace installs r as the window's binding. mw.mu is held.
func (mw *MW) replace(r *region, mr *MR, valid bool) {
	old := mw.cur
	old.invalidate()
	r.valid.Store(valid)
	mw.dev.keys.slots[mw.idx].Store(r)
	mw.cur = r
	if mw.mr != nil {
		mw.mr.windows.Add(-1)
	}
	mw.mr = mr
	if mr != nil {
		mr.windows.Add(1)
	}
}

// BindMW posts the bind of a type 1 window on qp's send queue (ibv_bind_mw) and
// returns the rkey the window will have. A binding without a region unbinds; one that
// names another device's window or region is refused.
func (qp *QP) BindMW(mw driver.MW, id uint64, flags driver.SendFlags, b driver.MWBind) (uint32, error) {
	m, ok := mw.(*MW)
	if !ok {
		return 0, ErrBadBind
	}
	eb := BindMW{MW: m, Addr: b.Addr, Length: b.Length, Access: b.Access}
	if b.MR != nil {
		if eb.MR, ok = b.MR.DriverMR().(*MR); !ok || eb.MR == nil {
			return 0, ErrBadBind
		}
	}
	return qp.bindType1(id, flags, eb)
}

func (qp *QP) bindType1(id uint64, flags driver.SendFlags, b BindMW) (uint32, error) {
	if b.MW == nil || b.MW.typ != 1 {
		return 0, ErrMWType
	}
	b.RKey = driver.IncRKey(b.MW.RKey())
	bw := &driver.MWBindWR{MW: b.MW, RKey: b.RKey, MWBind: driver.MWBind{Addr: b.Addr, Length: b.Length, Access: b.Access}}
	if b.MR != nil {
		bw.MR = b.MR
	}
	wr := driver.SendWR{ID: id, Opcode: driver.WRBindMW, Flags: flags, Bind: bw}
	if err := qp.PostSend([]driver.SendWR{wr}); err != nil {
		return 0, err
	}
	return b.RKey, nil
}

// invalidate implements LOCAL_INV and SEND_WITH_INV on a type 2 memory window of pd
// (IBTA 10.6.6.2, 10.6.7.2.4). Ordinary memory regions and type 1 windows cannot be
// invalidated this way.
func (d *Device) invalidate(pd *PD, rkey uint32) bool {
	reg := d.keys.lookup(rkey)
	if reg == nil || reg.pd != pd || !reg.window || reg.mwType != 2 {
		return false
	}
	reg.invalidate()
	return true
}

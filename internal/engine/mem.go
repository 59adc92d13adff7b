// Memory: protection domains, memory regions and the key table (lkey/rkey), region
// pinning per access, and scatter/gather lists resolved to registered memory.

package engine

import (
	"runtime"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/goverbs/goverbs/verbs/driver"
)

// Memory keys (IBTA 10.6.3): the upper 24 bits index the device's key table, the low 8
// bits are a variable "key" part that changes every time a slot is reused, so a stale key
// held by a peer never reaches a new registration by accident.
const (
	maxRegions   = 1 << 16
	keyIndexBits = 8
)

var (
	ErrPDClosed     = driver.NewError(driver.ErrClosed, "protection domain is closed")
	ErrPDBusy       = driver.NewError(driver.ErrBusy, "protection domain still has resources")
	ErrTooManyMRs   = driver.NewError(driver.ErrLimit, "memory key table is full")
	ErrEmptyRegion  = driver.NewError(driver.ErrInvalidAttr, "memory region is empty")
	ErrInvalidFlags = driver.NewError(driver.ErrInvalidAttr, "invalid access flags: remote write or atomic needs local write (IBTA 10.6.3.1)")
)

// PD is a protection domain: regions and queue pairs must share one to be used together.
type PD struct {
	dev    *Device
	handle uint32
	refs   atomic.Int32 // MRs and QPs that belong to it
	closed atomic.Bool
}

// region is what a memory key names: a memory region, or (later) a memory window bound
// inside one. Remote and local accesses both resolve keys to a region and then to a slice
// of its buffer; nothing outside buf is ever reachable through a key.
type region struct {
	pd     *PD
	buf    []byte
	va     uint64 // virtual address of buf[0], as ibv_reg_mr reports it
	key    uint32
	access driver.Access
	valid  atomic.Bool
	window bool  // a memory window
	mwType uint8 // 1 or 2; only type 2 windows are invalidated by LOCAL_INV or SEND_WITH_INV

	// use counts accesses in progress. Every copy into or out of the region happens
	// between acquire and release, and invalidation (deregistration, LOCAL_INV, unbind)
	// waits for use to drain, so when MR.Close returns no packet can touch the memory
	// again: the caller may unmap it.
	use atomic.Int32
}

// acquire pins the region for one access, or reports that it is no longer valid.
// Go's atomics are sequentially consistent, so an acquire either sees the invalidation
// or is waited for by it.
func (r *region) acquire() bool {
	r.use.Add(1)
	if !r.valid.Load() {
		r.use.Add(-1)
		return false
	}
	return true
}

func (r *region) release() { r.use.Add(-1) }

// invalidate stops all further access and waits for accesses in progress to finish.
// They are single packet copies, which take no lock, so the wait is short.
func (r *region) invalidate() {
	r.valid.Store(false)
	for r.use.Load() != 0 {
		runtime.Gosched()
	}
}

// Pin, Slice and Unpin make the region a netio.Lender: a same-host reader in this
// process copying a payload this device sent from the region (commitGather's loans)
// pins it as it reads. Pin is false when the region was invalidated meanwhile: the
// datagram is lost, and RC's retry finds the key gone.
func (r *region) Pin() bool { return r.acquire() }
func (r *region) Unpin()    { r.release() }

// Slice returns the region's n bytes at off, which the caller has pinned.
func (r *region) Slice(off, n int) ([]byte, bool) {
	if off < 0 || n < 0 || off > len(r.buf) || n > len(r.buf)-off {
		return nil, false
	}
	return r.buf[off : off+n : off+n], true
}

// offsetOf is where piece, a slice of r's memory, starts in it.
func (r *region) offsetOf(piece []byte) int {
	return int(uintptr(unsafe.Pointer(unsafe.SliceData(piece))) - uintptr(unsafe.Pointer(unsafe.SliceData(r.buf))))
}

// MR is a registered memory region.
type MR struct {
	region
	dev     *Device
	windows atomic.Int32 // memory windows bound to it
}

// LKey and RKey return the region's keys. As in Linux rxe both are the same value.
func (m *MR) LKey() uint32          { return m.key }
func (m *MR) RKey() uint32          { return m.key }
func (m *MR) Addr() uint64          { return m.va }
func (m *MR) Buf() []byte           { return m.buf }
func (m *MR) Access() driver.Access { return m.access }

// DriverMR returns the region as the driver reference a binding names.
func (m *MR) DriverMR() driver.MR {
	if m == nil {
		return nil
	}
	return m
}

// keyTable maps memory keys to regions with a lock-free lookup on the data path.
type keyTable struct {
	mu    sync.Mutex
	slots [maxRegions]atomic.Pointer[region]
	gen   [maxRegions]uint8
	next  uint32
	inUse int
}

func (t *keyTable) add(r *region) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.inUse >= maxRegions-1 {
		return ErrTooManyMRs
	}
	// Slot 0 is never used so that key 0 (a common uninitialised value) never resolves.
	for {
		t.next++
		if t.next >= maxRegions {
			t.next = 1
		}
		if t.slots[t.next].Load() == nil {
			break
		}
	}
	idx := t.next
	t.gen[idx]++
	r.key = idx<<keyIndexBits | uint32(t.gen[idx])
	r.valid.Store(true)
	t.slots[idx].Store(r)
	t.inUse++
	return nil
}

func (t *keyTable) remove(r *region) {
	r.invalidate()
	t.mu.Lock()
	defer t.mu.Unlock()
	idx := r.key >> keyIndexBits
	if t.slots[idx].Load() == r {
		t.slots[idx].Store(nil)
		t.inUse--
	}
}

// lookup returns the valid region named by key, or nil.
func (t *keyTable) lookup(key uint32) *region {
	idx := key >> keyIndexBits
	if idx == 0 || idx >= maxRegions {
		return nil
	}
	r := t.slots[idx].Load()
	if r == nil || r.key != key || !r.valid.Load() {
		return nil
	}
	return r
}

// AllocPD allocates a protection domain (driver.Device).
func (d *Device) AllocPD() (driver.PD, error) {
	pd, err := d.allocPD()
	if err != nil {
		return nil, err
	}
	return pd, nil
}

func (d *Device) allocPD() (*PD, error) {
	if d.closed.Load() {
		return nil, ErrDeviceClosed
	}
	return &PD{dev: d, handle: d.pdHandles.Add(1)}, nil
}

// Close deallocates the PD; like ibv_dealloc_pd it fails while resources still use it.
func (pd *PD) Close() error {
	if pd.refs.Load() != 0 {
		return ErrPDBusy
	}
	pd.closed.Store(true)
	return nil
}

// RegMR registers buf. The region's address is buf's virtual address, which is what the
// peer puts in a RETH (as with ibv_reg_mr).
func (pd *PD) RegMR(buf []byte, access driver.Access) (driver.MR, error) {
	mr, err := pd.regMR(buf, access)
	if err != nil {
		return nil, err
	}
	return mr, nil
}

// RegMRAt registers buf under the virtual address va instead of buf's own (as
// ibv_reg_mr_iova does): the shared-device daemon maps a client's memory at an address
// of its own, and peers must name it by the client's. va must be congruent to buf's
// address modulo 8, since atomics rely on the alignment carrying over.
func (pd *PD) RegMRAt(buf []byte, va uint64, access driver.Access) (*MR, error) {
	if len(buf) > 0 && (va^uint64(uintptr(unsafe.Pointer(unsafe.SliceData(buf)))))&7 != 0 {
		return nil, driver.NewError(driver.ErrInvalidAttr, "region address misaligned with its memory")
	}
	return pd.regMRAt(buf, va, access)
}

func (pd *PD) regMR(buf []byte, access driver.Access) (*MR, error) {
	return pd.regMRAt(buf, uint64(uintptr(unsafe.Pointer(unsafe.SliceData(buf)))), access)
}

func (pd *PD) regMRAt(buf []byte, va uint64, access driver.Access) (*MR, error) {
	if pd.closed.Load() {
		return nil, ErrPDClosed
	}
	if pd.dev.closed.Load() {
		return nil, ErrDeviceClosed
	}
	if len(buf) == 0 {
		return nil, ErrEmptyRegion
	}
	if access&(driver.AccessRemoteWrite|driver.AccessRemoteAtomic) != 0 && access&driver.AccessLocalWrite == 0 {
		return nil, ErrInvalidFlags
	}
	mr := &MR{dev: pd.dev}
	mr.pd = pd
	mr.buf = buf
	mr.va = va
	mr.access = access
	if err := pd.dev.keys.add(&mr.region); err != nil {
		return nil, err
	}
	pd.refs.Add(1)
	return mr, nil
}

// Close deregisters the region. Its keys stop resolving at once: a request that arrives
// afterwards is refused with a remote access error.
func (m *MR) Close() error {
	if !m.valid.Load() {
		return nil
	}
	if m.windows.Load() > 0 {
		return ErrMRBusy // ibv_dereg_mr: EBUSY while windows are bound
	}
	m.dev.keys.remove(&m.region)
	m.pd.refs.Add(-1)
	return nil
}

// span returns the part of r covering [va, va+n) if r belongs to pd and grants need.
func (r *region) span(pd *PD, va uint64, n uint32, need driver.Access) ([]byte, bool) {
	if r.pd != pd || r.access&need != need {
		return nil, false
	}
	if va < r.va {
		return nil, false
	}
	off := va - r.va
	if off > uint64(len(r.buf)) || uint64(n) > uint64(len(r.buf))-off {
		return nil, false
	}
	return r.buf[off : off+uint64(n) : off+uint64(n)], true
}

// sgl is a scatter/gather list resolved to byte slices, with the regions they lie in.
type sgl struct {
	segs  [][]byte
	regs  []*region
	total int
}

// acquire pins every region of the list for one packet's copy (see region.acquire).
func (l *sgl) acquire() bool {
	for i, r := range l.regs {
		if !r.acquire() {
			for _, q := range l.regs[:i] {
				q.release()
			}
			return false
		}
	}
	return true
}

func (l *sgl) release() {
	for _, r := range l.regs {
		r.release()
	}
}

// resolveSGL checks every SGE against the key table (lkey, PD, bounds, and local write
// when the engine is going to write into it) and records the slices. IBTA 10.7.2.2.
func (d *Device) resolveSGL(pd *PD, in []driver.SGE, write bool, out *sgl) bool {
	out.segs = out.segs[:0]
	out.regs = out.regs[:0]
	out.total = 0
	need := driver.Access(0)
	if write {
		need = driver.AccessLocalWrite
	}
	for _, s := range in {
		if s.Length == 0 {
			continue
		}
		r := d.keys.lookup(s.LKey)
		if r == nil || r.window {
			// A window's key is an R_Key only: an L_Key names a memory region (IBTA
			// 10.6.3), as in rxe, whose windows are not in its MR pool.
			return false
		}
		b, ok := r.span(pd, s.Addr, s.Length, need)
		if !ok {
			return false
		}
		out.segs = append(out.segs, b)
		out.regs = append(out.regs, r)
		out.total += len(b)
	}
	return true
}

// at locates byte offset off of the list: segment i, offset o within it (i ==
// len(segs) past the end).
func (l *sgl) at(off int) (i, o int) {
	for i < len(l.segs) && off >= len(l.segs[i]) {
		off -= len(l.segs[i])
		i++
	}
	return i, off
}

// slices appends to out the pieces of the list that hold n bytes from byte offset off.
// The caller has checked that off+n fits, and pins the regions while the pieces are used.
func (l *sgl) slices(off, n int, out [][]byte) [][]byte {
	for i, o := l.at(off); n > 0 && i < len(l.segs); i, o = i+1, 0 {
		k := min(len(l.segs[i])-o, n)
		out = append(out, l.segs[i][o:o+k])
		n -= k
	}
	return out
}

// copyOut gathers len(dst) bytes starting at byte offset off of the list into dst. The
// caller pins the regions (sendPackets holds one pin for all the packets it copies).
func (l *sgl) copyOut(dst []byte, off int) {
	for i, o := l.at(off); len(dst) > 0 && i < len(l.segs); i, o = i+1, 0 {
		dst = dst[copy(dst, l.segs[i][o:]):]
	}
}

// copyIn scatters src into the list starting at byte offset off. The caller has checked
// that off+len(src) fits. It reports false, copying nothing, when a region has been
// invalidated.
func (l *sgl) copyIn(src []byte, off int) bool {
	if !l.acquire() {
		return false
	}
	defer l.release()
	for i, o := l.at(off); len(src) > 0 && i < len(l.segs); i, o = i+1, 0 {
		src = src[copy(l.segs[i][o:], src):]
	}
	return true
}

package shm

import (
	"encoding/binary"
	"errors"
	"fmt"
	"sync/atomic"
	"unsafe"
)

// A ring's memory starts with a control block, then its data area.
//
//	off   0  head      uint64  the producer's published index (bytes or slots)
//	off 128  tail      uint64  the consumer's published index
//	off 192  sleeping  uint32  1 while the consumer waits (or may wait) for a wake-up
//
// head and tail sit 128 bytes apart so that the two sides' stores never share a cache
// line nor an adjacent-line prefetch pair; sleeping is the consumer's, beside tail.
const (
	offHead     = 0
	offTail     = 128
	offSleeping = 192
	// CtrlSize is the size of a ring's control block; the data area follows it.
	CtrlSize = 256
)

// ErrCorrupt is returned when a ring's shared state is inconsistent: the peer wrote
// an index or a record header that no well-behaved peer could have. What the ring held
// is dropped.
var ErrCorrupt = errors.New("shm: ring corrupt: records dropped")

// ErrLayout is returned for memory that cannot hold the ring asked for.
var ErrLayout = errors.New("shm: memory does not fit the ring's layout")

// ctrl is the control block's words.
type ctrl struct {
	head, tail *atomic.Uint64
	sleeping   *atomic.Uint32
}

// attachCtrl points at the control block at the start of mem, which must be 8-byte
// aligned and at least CtrlSize long.
func attachCtrl(mem []byte) (ctrl, error) {
	if len(mem) < CtrlSize || uintptr(unsafe.Pointer(unsafe.SliceData(mem)))%8 != 0 {
		return ctrl{}, ErrLayout
	}
	// Safe: the three words lie inside mem (checked above), at offsets that are
	// multiples of 8 from an 8-aligned base, as sync/atomic requires. The memory is a
	// shared mapping (or a Go slice in tests) that the caller keeps mapped for as long
	// as the ring is used (Region.Close comes after the ring's last use). The peer
	// writing to these words concurrently is the point: every access is atomic.
	base := unsafe.Pointer(unsafe.SliceData(mem))
	return ctrl{
		head:     (*atomic.Uint64)(unsafe.Add(base, offHead)),
		tail:     (*atomic.Uint64)(unsafe.Add(base, offTail)),
		sleeping: (*atomic.Uint32)(unsafe.Add(base, offSleeping)),
	}, nil
}

// initCtrl resets the control block: empty, and the consumer counted as sleeping, so
// that a consumer that is already waiting when a ring is attached gets its first
// wake-up (a spurious one costs one eventfd read).
func (c ctrl) init() {
	c.head.Store(0)
	c.tail.Store(0)
	c.sleeping.Store(1)
}

// wake reports whether the producer, having published, must wake the consumer, and
// takes the consumer's flag down so that one wake-up serves a whole sleep.
func (c ctrl) wake() bool { return c.sleeping.Load() != 0 && c.sleeping.Swap(0) != 0 }

// RecordRingSize is the memory a RecordRing of capacity data bytes takes.
func RecordRingSize(capacity int) int { return CtrlSize + capacity }

// recHdr is a record's header: its length (uint32, little-endian) and its kind. Records
// start 8-byte aligned and never wrap: one that would is preceded by a pad record that
// fills the data area's end.
const (
	recHdr  = 8
	kindRec = 0x52454331 // "REC1"
	kindPad = 0x50414431 // "PAD1"
)

func align8(n uint64) uint64 { return (n + 7) &^ 7 }

// recordRing is what both ends of a RecordRing share.
type recordRing struct {
	c    ctrl
	data []byte
	size uint64 // len(data), a power of two
	mask uint64
}

func attachRecordRing(mem []byte, capacity int) (recordRing, error) {
	if capacity < 64 || capacity&(capacity-1) != 0 || capacity > 1<<30 || len(mem) < RecordRingSize(capacity) {
		return recordRing{}, fmt.Errorf("%w: record ring of %d bytes in %d", ErrLayout, capacity, len(mem))
	}
	c, err := attachCtrl(mem)
	if err != nil {
		return recordRing{}, err
	}
	return recordRing{c: c, data: mem[CtrlSize : CtrlSize+capacity : CtrlSize+capacity], size: uint64(capacity), mask: uint64(capacity - 1)}, nil
}

// InitRecordRing makes mem an empty RecordRing of capacity bytes (a power of two, at
// least 64). The side that creates the memory does this once, before either end attaches.
func InitRecordRing(mem []byte, capacity int) error {
	r, err := attachRecordRing(mem, capacity)
	if err != nil {
		return err
	}
	r.c.init()
	return nil
}

// MaxRecord is the longest record a ring of capacity bytes takes.
func MaxRecord(capacity int) int { return capacity/2 - recHdr }

// RecordProducer writes records into a RecordRing. One goroutine at a time.
type RecordProducer struct {
	r       recordRing
	head    uint64 // private: what we have written
	tail    uint64 // the consumer's tail as last read
	pending uint64 // the reserved record's size, header and alignment included
}

// NewRecordProducer attaches the producing end of the RecordRing in mem.
func NewRecordProducer(mem []byte, capacity int) (*RecordProducer, error) {
	r, err := attachRecordRing(mem, capacity)
	if err != nil {
		return nil, err
	}
	h := r.c.head.Load()
	return &RecordProducer{r: r, head: h, tail: h}, nil
}

// Reserve returns room for a record of n bytes, to be filled and then committed
// (Commit) before the next Reserve. It returns ok false when the ring has no room now
// (the consumer is behind), and ErrCorrupt when the consumer's published tail is not
// one it could have published.
func (p *RecordProducer) Reserve(n int) (buf []byte, ok bool, err error) {
	if n < 0 || n > MaxRecord(int(p.r.size)) {
		return nil, false, nil
	}
	need := recHdr + align8(uint64(n))
	pos := p.head & p.r.mask
	total := need
	if room := p.r.size - pos; room < need {
		total += room // a pad record to the end, then the record at 0
	}
	if p.r.size-(p.head-p.tail) < total {
		t := p.r.c.tail.Load()
		if p.head-t > p.r.size { // also catches t > head, by wrapping
			return nil, false, ErrCorrupt
		}
		p.tail = t
		if p.r.size-(p.head-p.tail) < total {
			return nil, false, nil
		}
	}
	if room := p.r.size - pos; room < need {
		binary.LittleEndian.PutUint32(p.r.data[pos:], uint32(room-recHdr))
		binary.LittleEndian.PutUint32(p.r.data[pos+4:], kindPad)
		p.head += room
		pos = 0
	}
	binary.LittleEndian.PutUint32(p.r.data[pos:], uint32(n))
	binary.LittleEndian.PutUint32(p.r.data[pos+4:], kindRec)
	p.pending = need
	return p.r.data[pos+recHdr : pos+recHdr+uint64(n)], true, nil
}

// Commit adds the reserved record to what the next Publish makes visible.
func (p *RecordProducer) Commit() {
	p.head += p.pending
	p.pending = 0
}

// Publish makes the committed records visible to the consumer and reports whether it
// must be woken (its eventfd written): it said it would wait.
func (p *RecordProducer) Publish() (wake bool) {
	p.r.c.head.Store(p.head)
	return p.r.c.wake()
}

// RecordConsumer reads records from a RecordRing. One goroutine at a time.
type RecordConsumer struct {
	r       recordRing
	tail    uint64 // private: what we have consumed
	head    uint64 // the producer's head as last read
	pending uint64 // the current record's size, header and alignment included
	dirty   bool   // tail moved since the last Publish
	corrupt uint64
}

// NewRecordConsumer attaches the consuming end of the RecordRing in mem.
func NewRecordConsumer(mem []byte, capacity int) (*RecordConsumer, error) {
	r, err := attachRecordRing(mem, capacity)
	if err != nil {
		return nil, err
	}
	t := r.c.tail.Load()
	return &RecordConsumer{r: r, tail: t, head: t}, nil
}

// Next returns the next record, or nil when the ring is empty. The record is a view of
// shared memory that the peer can still write: copy it before trusting its contents,
// then Release it. ErrCorrupt means the ring's state was inconsistent and everything
// published so far was dropped (Corrupt counts these).
func (c *RecordConsumer) Next() ([]byte, error) {
	for {
		if c.tail == c.head {
			h := c.r.c.head.Load()
			if h-c.tail > c.r.size {
				return nil, c.drop(h)
			}
			if h == c.tail {
				return nil, nil
			}
			c.head = h
		}
		avail := c.head - c.tail
		pos := c.tail & c.r.mask
		if avail < recHdr || c.r.size-pos < recHdr {
			return nil, c.drop(c.head)
		}
		// Read once: the peer may change the header while we look at it.
		n := uint64(binary.LittleEndian.Uint32(c.r.data[pos:]))
		kind := binary.LittleEndian.Uint32(c.r.data[pos+4:])
		switch kind {
		case kindPad:
			skip := c.r.size - pos
			if n != skip-recHdr || skip > avail {
				return nil, c.drop(c.head)
			}
			c.tail += skip
			c.dirty = true
			continue
		case kindRec:
			need := recHdr + align8(n)
			if need > c.r.size-pos || need > avail {
				return nil, c.drop(c.head)
			}
			c.pending = need
			return c.r.data[pos+recHdr : pos+recHdr+n : pos+recHdr+n], nil
		}
		return nil, c.drop(c.head)
	}
}

// drop discards everything up to head and counts a corruption.
func (c *RecordConsumer) drop(head uint64) error {
	c.tail, c.head, c.pending = head, head, 0
	c.corrupt++
	c.r.c.tail.Store(c.tail)
	c.dirty = false
	return ErrCorrupt
}

// Release consumes the record Next returned.
func (c *RecordConsumer) Release() {
	c.tail += c.pending
	c.pending = 0
	c.dirty = true
}

// Publish gives the released records' room back to the producer.
func (c *RecordConsumer) Publish() {
	if c.dirty {
		c.r.c.tail.Store(c.tail)
		c.dirty = false
	}
}

// Corrupt is how many times the ring was found inconsistent.
func (c *RecordConsumer) Corrupt() uint64 { return c.corrupt }

// Empty reports whether nothing is published beyond what was consumed.
func (c *RecordConsumer) Empty() bool { return c.tail == c.head && c.r.c.head.Load() == c.tail }

// Idle reports whether the producer has published nothing beyond the tail the consumer
// published: Empty, once the consumer has published what it released, read from the
// shared words alone, so that it may be called by a goroutine other than the
// consumer's while the consumer reads.
func (c *RecordConsumer) Idle() bool { return c.r.c.head.Load() == c.r.c.tail.Load() }

// Sleep tells the producer that the consumer may wait for a wake-up; call Empty after
// it, and wait only if the ring is still empty.
func (c *RecordConsumer) Sleep() { c.r.c.sleeping.Store(1) }

// Awake tells the producer the consumer is polling again: no wake-ups needed.
func (c *RecordConsumer) Awake() { c.r.c.sleeping.Store(0) }

// SlotRingSize is the memory a SlotRing of n slots of size bytes takes.
func SlotRingSize(n, size int) int { return CtrlSize + n*size }

// slotRing is what both ends of a SlotRing share.
type slotRing struct {
	c    ctrl
	data []byte
	n    uint64 // slots, a power of two
	size uint64 // bytes per slot, a multiple of 8
}

func attachSlotRing(mem []byte, n, size int) (slotRing, error) {
	if n < 1 || n&(n-1) != 0 || n > 1<<24 || size < 8 || size%8 != 0 || size > 1<<16 || len(mem) < SlotRingSize(n, size) {
		return slotRing{}, fmt.Errorf("%w: %d slots of %d bytes in %d", ErrLayout, n, size, len(mem))
	}
	c, err := attachCtrl(mem)
	if err != nil {
		return slotRing{}, err
	}
	end := SlotRingSize(n, size)
	return slotRing{c: c, data: mem[CtrlSize:end:end], n: uint64(n), size: uint64(size)}, nil
}

// InitSlotRing makes mem an empty SlotRing of n slots (a power of two) of size bytes
// (a multiple of 8).
func InitSlotRing(mem []byte, n, size int) error {
	r, err := attachSlotRing(mem, n, size)
	if err != nil {
		return err
	}
	r.c.init()
	return nil
}

func (r *slotRing) slot(i uint64) []byte {
	off := (i & (r.n - 1)) * r.size
	return r.data[off : off+r.size : off+r.size]
}

// SlotProducer fills a SlotRing's slots: a work queue's poster, a completion queue's
// writer. One goroutine at a time.
type SlotProducer struct {
	r    slotRing
	head uint64
	tail uint64
}

// NewSlotProducer attaches the producing end of the SlotRing in mem.
func NewSlotProducer(mem []byte, n, size int) (*SlotProducer, error) {
	r, err := attachSlotRing(mem, n, size)
	if err != nil {
		return nil, err
	}
	h := r.c.head.Load()
	return &SlotProducer{r: r, head: h, tail: h}, nil
}

// Slot returns the next free slot to fill, ok false when the ring is full, ErrCorrupt
// when the consumer's published tail is impossible. Commit it when filled.
func (p *SlotProducer) Slot() (buf []byte, ok bool, err error) {
	if p.head-p.tail >= p.r.n {
		t := p.r.c.tail.Load()
		if p.head-t > p.r.n {
			return nil, false, ErrCorrupt
		}
		p.tail = t
		if p.head-p.tail >= p.r.n {
			return nil, false, nil
		}
	}
	return p.r.slot(p.head), true, nil
}

// Commit adds the filled slot to what the next Publish makes visible.
func (p *SlotProducer) Commit() { p.head++ }

// Pending is how many published slots the consumer has not taken, as its published
// tail says (clamped to the ring's size when the tail is impossible).
func (p *SlotProducer) Pending() int {
	d := p.head - p.r.c.tail.Load()
	if d > p.r.n {
		return int(p.r.n)
	}
	return int(d)
}

// Publish makes the committed slots visible and reports whether to wake the consumer.
func (p *SlotProducer) Publish() (wake bool) {
	p.r.c.head.Store(p.head)
	return p.r.c.wake()
}

// SlotConsumer takes a SlotRing's slots in order. One goroutine at a time.
type SlotConsumer struct {
	r       slotRing
	tail    uint64
	head    uint64
	corrupt uint64
}

// NewSlotConsumer attaches the consuming end of the SlotRing in mem.
func NewSlotConsumer(mem []byte, n, size int) (*SlotConsumer, error) {
	r, err := attachSlotRing(mem, n, size)
	if err != nil {
		return nil, err
	}
	t := r.c.tail.Load()
	return &SlotConsumer{r: r, tail: t, head: t}, nil
}

// Peek returns the oldest filled slot, or nil when there is none; a view of shared
// memory, to be copied before it is trusted, then released (Release). ErrCorrupt: the
// producer's head was impossible, and the slots it claimed are dropped.
func (c *SlotConsumer) Peek() ([]byte, error) {
	if c.tail == c.head {
		h := c.r.c.head.Load()
		if h-c.tail > c.r.n {
			c.tail, c.head = h, h
			c.corrupt++
			c.r.c.tail.Store(h)
			return nil, ErrCorrupt
		}
		if h == c.tail {
			return nil, nil
		}
		c.head = h
	}
	return c.r.slot(c.tail), nil
}

// Release consumes the slot Peek returned.
func (c *SlotConsumer) Release() { c.tail++ }

// Publish gives the released slots back to the producer.
func (c *SlotConsumer) Publish() { c.r.c.tail.Store(c.tail) }

// Corrupt is how many times the ring was found inconsistent.
func (c *SlotConsumer) Corrupt() uint64 { return c.corrupt }

// Empty reports whether no filled slot waits.
func (c *SlotConsumer) Empty() bool { return c.tail == c.head && c.r.c.head.Load() == c.tail }

// Sleep and Awake are RecordConsumer's, for a slot ring.
func (c *SlotConsumer) Sleep() { c.r.c.sleeping.Store(1) }

// Awake: see Sleep.
func (c *SlotConsumer) Awake() { c.r.c.sleeping.Store(0) }

// Package handles is a table of Go values that C code names by number: the C drop-in's
// objects (struct ibv_cq, ibv_qp, ...) each keep the number of the Go object they stand
// for, and every verb a C program calls looks it up.
//
// It replaces runtime/cgo's Handle for that job. cgo.Handle's Value is a lookup in a
// concurrent map keyed by an interface value (hashing, comparing, boxing the number),
// 19-31 ns a call in a loop that keeps it all in cache, against 3.1-5.7 ns here (an
// index and an atomic load; BenchmarkGet; each over three runs on the AMD VM). ibv_poll_cq is called in a spin loop, and
// ibv_post_send and ibv_post_recv once a message: the map's lookups were about 5% of
// Debian's ib_send_lat's samples on the drop-in (perf, 2026-11-28). And where
// cgo.Handle panics on a number it does not hold (a C program calling a verb on an
// object it destroyed), Get returns nil: the verb fails with an error instead.
//
// A number is a slot and the slot's generation: a slot is reused after Delete, with the
// next generation, so a stale number (the destroyed object's) never names the object
// that took its slot.
package handles

import (
	"sync"
	"sync/atomic"
)

const (
	chunkBits = 10
	chunkSize = 1 << chunkBits
)

// Table holds values by number. The zero Table is empty and ready. Get may run beside
// New and Delete; New and Delete serialize on a mutex.
type Table struct {
	mu   sync.Mutex
	top  atomic.Pointer[[]*chunk] // replaced, never changed, when it grows
	used uint32                   // slots ever handed out (mu)
	free []uint32                 // slots given back (mu)
}

type chunk struct {
	slots [chunkSize]atomic.Pointer[entry]
	gens  [chunkSize]uint32 // the generation the slot's next entry gets (Table.mu)
}

// entry is one value and its generation; never changed once stored.
type entry struct {
	gen uint32
	v   any
}

// New stores v and returns its number, never 0.
func (t *Table) New(v any) uint64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	var slot uint32
	if n := len(t.free); n > 0 {
		slot = t.free[n-1]
		t.free = t.free[:n-1]
	} else {
		slot = t.used
		t.used++
	}
	c := t.chunk(slot)
	i := slot & (chunkSize - 1)
	if c.gens[i] == 0 {
		c.gens[i] = 1
	}
	gen := c.gens[i]
	c.slots[i].Store(&entry{gen: gen, v: v})
	return uint64(gen)<<32 | uint64(slot)
}

// chunk returns slot's chunk, growing the table to hold it; t.mu is held.
func (t *Table) chunk(slot uint32) *chunk {
	k := int(slot >> chunkBits)
	var top []*chunk
	if p := t.top.Load(); p != nil {
		top = *p
	}
	if k < len(top) {
		return top[k]
	}
	grown := make([]*chunk, k+1)
	copy(grown, top)
	for j := len(top); j <= k; j++ {
		grown[j] = new(chunk)
	}
	t.top.Store(&grown)
	return grown[k]
}

// lookup returns h's slot in its chunk and the entry it holds, or a nil entry when h
// names no slot.
func (t *Table) lookup(h uint64) (*atomic.Pointer[entry], *entry) {
	p := t.top.Load()
	if p == nil {
		return nil, nil
	}
	slot := uint32(h)
	if k := int(slot >> chunkBits); k < len(*p) {
		s := &(*p)[k].slots[slot&(chunkSize-1)]
		return s, s.Load()
	}
	return nil, nil
}

// Get returns the value numbered h, or nil when h is not a number New returned or its
// value was deleted.
func (t *Table) Get(h uint64) any {
	if _, e := t.lookup(h); e != nil && e.gen == uint32(h>>32) {
		return e.v
	}
	return nil
}

// Delete forgets the value numbered h and reports whether there was one. Its slot goes
// to a later New, with the next generation.
func (t *Table) Delete(h uint64) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	s, e := t.lookup(h)
	if e == nil || e.gen != uint32(h>>32) {
		return false
	}
	s.Store(nil)
	slot := uint32(h)
	c := (*t.top.Load())[slot>>chunkBits]
	i := slot & (chunkSize - 1)
	if c.gens[i]++; c.gens[i] == 0 {
		c.gens[i] = 1 // a number is never 0
	}
	t.free = append(t.free, slot)
	return true
}

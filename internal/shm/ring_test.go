package shm

import (
	"bytes"
	"encoding/binary"
	"math/rand/v2"
	"testing"
	"unsafe"
)

// mem8 is an 8-byte aligned buffer, as a mapping is.
func mem8(n int) []byte {
	w := make([]uint64, (n+7)/8)
	return unsafe.Slice((*byte)(unsafe.Pointer(&w[0])), n)
}

func TestRecordRingRoundTrip(t *testing.T) {
	const capacity = 1024
	mem := mem8(RecordRingSize(capacity))
	if err := InitRecordRing(mem, capacity); err != nil {
		t.Fatal(err)
	}
	p, _ := NewRecordProducer(mem, capacity)
	c, _ := NewRecordConsumer(mem, capacity)
	rng := rand.New(rand.NewPCG(1, 2))
	sent, got := 0, 0
	var queue [][]byte
	for round := 0; round < 2000; round++ {
		for k := rng.IntN(5); k > 0; k-- {
			rec := make([]byte, rng.IntN(200))
			for i := range rec {
				rec[i] = byte(rng.Uint32())
			}
			buf, ok, err := p.Reserve(len(rec))
			if err != nil {
				t.Fatal(err)
			}
			if !ok {
				break
			}
			copy(buf, rec)
			p.Commit()
			queue = append(queue, rec)
			sent++
		}
		p.Publish()
		for k := rng.IntN(6); k > 0; k-- {
			rec, err := c.Next()
			if err != nil {
				t.Fatal(err)
			}
			if rec == nil {
				if len(queue) != 0 {
					t.Fatalf("ring empty with %d records queued", len(queue))
				}
				break
			}
			if !bytes.Equal(rec, queue[0]) {
				t.Fatalf("record %d differs", got)
			}
			queue = queue[1:]
			c.Release()
			got++
		}
		c.Publish()
	}
	if got < 1000 {
		t.Fatalf("only %d of %d records went round", got, sent)
	}
}

func TestRecordRingFull(t *testing.T) {
	const capacity = 256
	mem := mem8(RecordRingSize(capacity))
	InitRecordRing(mem, capacity)
	p, _ := NewRecordProducer(mem, capacity)
	if _, ok, _ := p.Reserve(MaxRecord(capacity) + 1); ok {
		t.Fatal("reserved more than MaxRecord")
	}
	n := 0
	for {
		_, ok, err := p.Reserve(24)
		if err != nil {
			t.Fatal(err)
		}
		if !ok {
			break
		}
		p.Commit()
		n++
	}
	if n != capacity/32 {
		t.Fatalf("%d records of 32 bytes in %d", n, capacity)
	}
	if !p.Publish() {
		t.Fatal("a fresh ring's consumer counts as sleeping: the first publish must wake it")
	}
	if p.Publish() {
		t.Fatal("woke twice for one sleep")
	}
}

// TestRecordRingGarbage writes random bytes over the whole ring, control block
// included, between operations of both ends: nothing may panic or read outside the
// ring, and corruption must be reported and counted.
func TestRecordRingGarbage(t *testing.T) {
	const capacity = 512
	mem := mem8(RecordRingSize(capacity) + 64)
	ring := mem[:RecordRingSize(capacity)]
	InitRecordRing(ring, capacity)
	guard := mem[RecordRingSize(capacity):]
	for i := range guard {
		guard[i] = 0xA5
	}
	p, _ := NewRecordProducer(ring, capacity)
	c, _ := NewRecordConsumer(ring, capacity)
	rng := rand.New(rand.NewPCG(3, 4))
	for i := 0; i < 200000; i++ {
		switch rng.IntN(4) {
		case 0:
			if buf, ok, err := p.Reserve(rng.IntN(100)); ok && err == nil {
				for j := range buf {
					buf[j] = 1
				}
				p.Commit()
				p.Publish()
			}
		case 1:
			rec, err := c.Next()
			if err == nil && rec != nil {
				_ = rec[len(rec)-1:]
				c.Release()
				c.Publish()
			}
		case 2: // the hostile peer: random words anywhere, indices included
			off := rng.IntN(len(ring)/4) * 4
			binary.LittleEndian.PutUint32(ring[off:], rng.Uint32())
		case 3:
			binary.LittleEndian.PutUint64(ring[offHead:], rng.Uint64()%(3*capacity))
		}
	}
	for i := range guard {
		if guard[i] != 0xA5 {
			t.Fatal("wrote outside the ring")
		}
	}
	if c.Corrupt() == 0 {
		t.Fatal("garbage went unnoticed")
	}
}

func TestSlotRing(t *testing.T) {
	const n, size = 8, 64
	mem := mem8(SlotRingSize(n, size))
	InitSlotRing(mem, n, size)
	p, _ := NewSlotProducer(mem, n, size)
	c, _ := NewSlotConsumer(mem, n, size)
	for round := 0; round < 100; round++ {
		k := 0
		for {
			s, ok, err := p.Slot()
			if err != nil {
				t.Fatal(err)
			}
			if !ok {
				break
			}
			binary.LittleEndian.PutUint64(s, uint64(round*100+k))
			p.Commit()
			k++
		}
		if k != n && round == 0 {
			t.Fatalf("%d slots free in a ring of %d", k, n)
		}
		p.Publish()
		for j := 0; ; j++ {
			s, err := c.Peek()
			if err != nil {
				t.Fatal(err)
			}
			if s == nil {
				break
			}
			if got := binary.LittleEndian.Uint64(s); got != uint64(round*100+j) {
				t.Fatalf("slot %d of round %d holds %d", j, round, got)
			}
			c.Release()
		}
		c.Publish()
	}
	binary.LittleEndian.PutUint64(mem[offHead:], 1<<40)
	if _, err := c.Peek(); err != ErrCorrupt {
		t.Fatalf("impossible head: %v", err)
	}
}

package engine

import (
	"testing"

	"github.com/goverbs/goverbs/wire"
)

// TestRingLen: a queue's ring is the power of two at or above its depth, so that its
// cursors find their slots with a mask (sendQueue), and a full queue is full at its depth,
// not at the ring's length.
func TestRingLen(t *testing.T) {
	for _, c := range []struct{ depth, want uint32 }{{0, 0}, {1, 1}, {2, 2}, {3, 4}, {100, 128}, {128, 128}, {129, 256}, {MaxQPWR - 1, MaxQPWR}, {MaxQPWR, MaxQPWR}} {
		if got := ringLen(c.depth); got != int(c.want) {
			t.Errorf("ringLen(%d) = %d, want %d", c.depth, got, c.want)
		}
	}
	var q sendQueue
	q.init(100)
	seen := map[*sendWQE]bool{}
	for i := uint64(0); i < 100; i++ {
		if q.full() {
			t.Fatalf("full with %d of 100 WQEs", i)
		}
		w := q.at(q.tail)
		if seen[w] {
			t.Fatalf("slot of WQE %d reused while the queue holds it", i)
		}
		seen[w] = true
		q.tail++
	}
	if !q.full() {
		t.Fatal("not full at its depth")
	}
	// The cursors count on without wrapping; the slots cycle through the ring.
	q.head, q.tail = 1<<40+5, 1<<40+5+100
	if !q.full() || q.at(q.head) != q.at(q.head+128) {
		t.Fatal("cursors far along: wrong fullness or slot")
	}
}

// TestWindowByMTU: the requester's window keeps 512 KiB in flight at every path MTU, at
// least MaxUnackedPSNs packets.
func TestWindowByMTU(t *testing.T) {
	for _, m := range []wire.MTU{wire.MTU256, wire.MTU512, wire.MTU1024, wire.MTU2048, wire.MTU4096} {
		qp := &QP{mtu: m.Bytes()}
		if got, want := qp.window(), int32(max(MaxUnackedPSNs, MaxUnackedPSNs*4096/m.Bytes())); got != want {
			t.Errorf("window at MTU %d: %d, want %d", m.Bytes(), got, want)
		}
	}
	if got := (&QP{}).window(); got != MaxUnackedPSNs {
		t.Errorf("window without a path MTU: %d, want %d", got, MaxUnackedPSNs)
	}
}

// TestPacketsFor: a message's packet count at each path MTU, one for an empty message.
func TestPacketsFor(t *testing.T) {
	for _, m := range []wire.MTU{wire.MTU256, wire.MTU1024, wire.MTU4096} {
		qp := &QP{mtu: m.Bytes()}
		for _, n := range []int{0, 1, m.Bytes() - 1, m.Bytes(), m.Bytes() + 1, 5*m.Bytes() + 7, MaxMsgSize} {
			want := uint32((n + m.Bytes() - 1) / m.Bytes())
			if want == 0 {
				want = 1
			}
			if got := qp.packetsFor(n); got != want {
				t.Errorf("%d bytes at MTU %d: %d packets, want %d", n, m.Bytes(), got, want)
			}
		}
	}
}

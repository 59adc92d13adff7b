package engine

import (
	"testing"

	"github.com/goverbs/goverbs/wire"
)

// TestWQRing: a queue of any depth holds that many WQEs in distinct slots and is full
// then; its cursors count on without wrapping, and the slots cycle with the depth, found
// by a mask for a power of two and by a remainder otherwise.
func TestWQRing(t *testing.T) {
	for _, depth := range []uint32{1, 3, 100, 128, MaxQPWR} {
		var q sendQueue
		q.init(depth)
		if pow2 := depth&(depth-1) == 0; q.pow2 != pow2 {
			t.Errorf("depth %d: pow2 %v", depth, q.pow2)
		}
		seen := map[*sendWQE]bool{}
		for i := uint32(0); i < depth; i++ {
			if q.full() {
				t.Fatalf("depth %d: full with %d WQEs", depth, i)
			}
			w := q.at(q.tail)
			if seen[w] {
				t.Fatalf("depth %d: slot of WQE %d reused while the queue holds it", depth, i)
			}
			seen[w] = true
			q.tail++
		}
		if !q.full() {
			t.Fatalf("depth %d: not full", depth)
		}
		q.head, q.tail = 1<<40+5, 1<<40+5+uint64(depth)
		if !q.full() || q.at(q.head) != q.at(q.head+uint64(depth)) || depth > 1 && q.at(q.head) == q.at(q.head+1) {
			t.Fatalf("depth %d: cursors far along: wrong fullness or slot", depth)
		}
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

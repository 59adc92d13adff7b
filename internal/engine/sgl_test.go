package engine

import (
	"bytes"
	"math/rand/v2"
	"testing"
)

// TestSGLWalk: slices, copyOut and copyIn see a scatter/gather list as the one flat byte
// string its segments make, from any offset, across segment boundaries and over empty
// segments.
func TestSGLWalk(t *testing.T) {
	r := rand.New(rand.NewPCG(9, 9))
	for round := range 300 {
		var l sgl
		var flat []byte
		for range 1 + r.IntN(5) {
			s := make([]byte, r.IntN(40)) // empty segments too
			for i := range s {
				s[i] = byte(r.Uint32())
			}
			l.segs = append(l.segs, s)
			flat = append(flat, s...)
		}
		off := r.IntN(len(flat) + 1)
		n := r.IntN(len(flat) - off + 1)

		var got []byte
		for _, p := range l.slices(off, n, nil) {
			got = append(got, p...)
		}
		if !bytes.Equal(got, flat[off:off+n]) {
			t.Fatalf("round %d: slices(%d, %d) = %x, want %x", round, off, n, got, flat[off:off+n])
		}
		out := make([]byte, n)
		if l.copyOut(out, off); !bytes.Equal(out, flat[off:off+n]) {
			t.Fatalf("round %d: copyOut(%d) = %x, want %x", round, off, out, flat[off:off+n])
		}
		src := make([]byte, n)
		for i := range src {
			src[i] = ^flat[off+i]
		}
		if !l.copyIn(src, off) {
			t.Fatal("copyIn refused")
		}
		copy(flat[off:], src)
		var now []byte
		for _, s := range l.segs {
			now = append(now, s...)
		}
		if !bytes.Equal(now, flat) {
			t.Fatalf("round %d: copyIn(%d, %d bytes) left %x, want %x", round, off, n, now, flat)
		}
	}
}

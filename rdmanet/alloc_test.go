package rdmanet

import (
	"io"
	"testing"
)

// A request/response over a Conn allocates nothing on either side once running:
// Write, the completions, the credits and Read reuse what they have.
func TestStreamAllocatesNothing(t *testing.T) {
	if raceEnabled {
		t.Skip("allocation counts are meaningless under the race detector (sync.Pool drops items)")
	}
	a, b := pair(t)
	go func() {
		buf := make([]byte, 64)
		for {
			if _, err := io.ReadFull(b, buf); err != nil {
				return
			}
			if _, err := b.Write(buf); err != nil {
				return
			}
		}
	}()
	buf := make([]byte, 64)
	rr := func() {
		if _, err := a.Write(buf); err != nil {
			t.Fatal(err)
		}
		if _, err := io.ReadFull(a, buf); err != nil {
			t.Fatal(err)
		}
	}
	for range 5000 { // past the first credits and every pool's warm-up
		rr()
	}
	if n := testing.AllocsPerRun(2000, rr); n != 0 {
		t.Fatalf("%v allocations per request/response", n)
	}
}

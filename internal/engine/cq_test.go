package engine

import (
	"errors"
	"testing"

	"github.com/goverbs/goverbs/verbs/driver"
)

// TestCQOrderAcrossDrains: a drained CQ starts again at its first slot (Take), which
// must not reorder, lose or duplicate a completion whatever the polls took, and must
// leave the overrun where it was: at exactly depth completions held.
func TestCQOrderAcrossDrains(t *testing.T) {
	const depth = 5
	cq := &CQ{dev: &Device{}, ring: make([]driver.WC, depth)}
	next, want := uint64(0), uint64(0)
	out := make([]driver.WC, depth+1)
	take := func(max int) int {
		t.Helper()
		k, err := cq.Take(out[:max])
		if err != nil {
			t.Fatal(err)
		}
		for _, wc := range out[:k] {
			if wc.ID != want {
				t.Fatalf("took completion %d, want %d", wc.ID, want)
			}
			want++
		}
		return k
	}
	// Pushes and partial polls that wrap the ring at every offset, drained now and then.
	for round := range 40 {
		for range round%depth + 1 {
			if cq.n == depth {
				break
			}
			cq.push(&driver.WC{ID: next}, false)
			next++
		}
		take(round%3 + 1)
		if round%4 == 3 {
			take(depth)
			if cq.n != 0 || cq.head != 0 {
				t.Fatalf("round %d: drained CQ holds %d from slot %d, want 0 from 0", round, cq.n, cq.head)
			}
		}
	}
	take(depth)
	if want != next {
		t.Fatalf("took %d completions of %d pushed", want, next)
	}
	// Full at depth, after a drain, and an overrun beyond.
	for range depth {
		cq.push(&driver.WC{ID: next}, false)
		next++
	}
	if cq.overflow {
		t.Fatalf("overrun at %d completions, depth %d", depth, depth)
	}
	cq.push(&driver.WC{ID: next}, false)
	if !cq.overflow {
		t.Fatal("no overrun at depth+1 completions")
	}
	if take(depth+1) != depth {
		t.Fatalf("an overrun CQ gave back other than its %d completions", depth)
	}
	if _, err := cq.Take(out); !errors.Is(err, ErrCQOverflow) {
		t.Fatalf("empty overrun CQ: %v, want ErrCQOverflow", err)
	}
}

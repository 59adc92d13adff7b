package handles

import (
	"sync"
	"testing"
)

func TestNewGetDelete(t *testing.T) {
	var tab Table
	if v := tab.Get(0); v != nil {
		t.Fatalf("empty table: Get(0) = %v", v)
	}
	a, b := tab.New("a"), tab.New(42)
	if a == 0 || b == 0 || a == b {
		t.Fatalf("numbers %#x and %#x", a, b)
	}
	if tab.Get(a) != "a" || tab.Get(b) != 42 {
		t.Fatalf("Get: %v, %v", tab.Get(a), tab.Get(b))
	}
	if !tab.Delete(a) {
		t.Fatal("Delete of a live number refused")
	}
	if v := tab.Get(a); v != nil {
		t.Fatalf("deleted number still gives %v", v)
	}
	if tab.Delete(a) {
		t.Fatal("a second Delete of one number succeeded")
	}
	// The slot comes back with the next generation: the stale number names nothing.
	c := tab.New("c")
	if uint32(c) != uint32(a) {
		t.Fatalf("slot not reused: %#x after %#x", c, a)
	}
	if c == a || tab.Get(a) != nil || tab.Get(c) != "c" {
		t.Fatalf("stale %#x gives %v, new %#x gives %v", a, tab.Get(a), c, tab.Get(c))
	}
	if tab.Get(b) != 42 {
		t.Fatal("an unrelated value moved")
	}
}

func TestNumbersNotHeld(t *testing.T) {
	var tab Table
	h := tab.New(1)
	for _, x := range []uint64{0, 1, h + 1, h ^ 1<<32, 1 << 40, ^uint64(0), uint64(chunkSize) << 20} {
		if v := tab.Get(x); v != nil {
			t.Errorf("Get(%#x) = %v", x, v)
		}
		if tab.Delete(x) {
			t.Errorf("Delete(%#x) succeeded", x)
		}
	}
}

func TestGrowsAcrossChunks(t *testing.T) {
	var tab Table
	hs := make([]uint64, 3*chunkSize+5)
	for i := range hs {
		hs[i] = tab.New(i)
	}
	for i, h := range hs {
		if tab.Get(h) != i {
			t.Fatalf("value %d: %v", i, tab.Get(h))
		}
	}
}

// TestConcurrent runs lookups beside New and Delete (go test -race): a reader sees a
// value it was given, or nil once it is deleted, never another.
func TestConcurrent(t *testing.T) {
	var tab Table
	const n = 4 * chunkSize
	keep := make([]uint64, n)
	for i := range keep {
		keep[i] = tab.New(i)
	}
	var wg sync.WaitGroup
	for w := 0; w < 4; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for r := 0; r < 20; r++ {
				for i, h := range keep {
					if v := tab.Get(h); v != i {
						t.Errorf("Get(%#x) = %v, want %d", h, v, i)
						return
					}
				}
			}
		}()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; i < 10*n; i++ {
			h := tab.New(-i)
			if tab.Get(h) != -i || !tab.Delete(h) || tab.Get(h) != nil {
				t.Errorf("churn %d", i)
				return
			}
		}
	}()
	wg.Wait()
}

func BenchmarkGet(b *testing.B) {
	var tab Table
	h := tab.New(b)
	for b.Loop() {
		if tab.Get(h) == nil {
			b.Fatal("lost")
		}
	}
}

package engine

import "testing"

type fakeRings bool

func (f fakeRings) FromRings() bool { return bool(f) }

// TestSpinBudgetLongerAfterRings: the receive goroutine's spin (spinRx) polls on for
// rxSpinRings after a batch from the same-host rings, where a poll makes no system call
// and a receiver that slept cost the sender a wake-up of some 40 µs on the VM, and for
// rxSpin after one from a socket, where the spin takes the core the sender's kernel work
// needs.
func TestSpinBudgetLongerAfterRings(t *testing.T) {
	for _, c := range []struct {
		name string
		d    *Device
		want int64
	}{
		{"no rings", &Device{}, int64(rxSpin)},
		{"socket batch", &Device{rings: fakeRings(false)}, int64(rxSpin)},
		{"ring batch", &Device{rings: fakeRings(true)}, int64(rxSpinRings)},
	} {
		if got := c.d.spinBudget(); got != c.want {
			t.Errorf("%s: spin budget %v, want %v", c.name, got, c.want)
		}
	}
}

package engine

import (
	"testing"

	"github.com/goverbs/goverbs/verbs/driver"
)

// TestQPNumbers: a device numbers its QPs from a random start (so that a restarted
// process does not reuse its previous run's QPNs, randomQPN), upwards, and wraps from
// the last QPN to the first without handing out the multicast QPN 0xFFFFFF (IBTA 10.5)
// or QP0 and QP1.
func TestQPNumbers(t *testing.T) {
	starts := map[uint32]bool{}
	for range 4 {
		d := openUDPDevice(t)
		pd, _ := d.allocPD()
		cq, _ := d.newCQ(16)
		mk := func() uint32 {
			qp, err := d.CreateQP(pd, QPInit{Type: driver.QPTypeUD, SendCQ: cq, RecvCQ: cq,
				Cap: driver.QPCap{MaxSendWR: 1, MaxRecvWR: 1, MaxSendSGE: 1, MaxRecvSGE: 1}})
			if err != nil {
				t.Fatal(err)
			}
			return qp.QPN()
		}
		first := mk()
		if first < firstQPN || first > lastQPN {
			t.Fatalf("first QPN %#x outside [%#x, %#x]", first, firstQPN, lastQPN)
		}
		starts[first] = true
		if next := mk(); next != first+1 && !(first == lastQPN && next == firstQPN) {
			t.Fatalf("QPNs %#x then %#x", first, next)
		}
		d.qpMu.Lock()
		d.nextQPN = lastQPN
		d.qpMu.Unlock()
		if a, b := mk(), mk(); a != lastQPN || b != firstQPN {
			t.Fatalf("at the top of the range: %#x then %#x, want %#x then %#x", a, b, lastQPN, firstQPN)
		}
	}
	// Four devices starting at the same QPN: one chance in 2^72 or so.
	if len(starts) == 1 {
		t.Fatalf("four devices all started at QPN %v", starts)
	}
}

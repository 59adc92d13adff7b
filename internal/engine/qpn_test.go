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

// TestSetQPNs: a device confined to a range (goverbs serve's split of one address
// between engines) numbers inside it, wraps inside it, and refuses a QP beyond it
// rather than loop for a free number; a range outside the QPN space, or one set
// after QPs exist, is refused.
func TestSetQPNs(t *testing.T) {
	d := openUDPDevice(t)
	if err := d.SetQPNs(0x5, 0x20); err == nil {
		t.Fatal("SetQPNs took a range that holds QP0/QP1's neighbours below 0x11")
	}
	if err := d.SetQPNs(0x20000, 0x1ffff); err == nil {
		t.Fatal("SetQPNs took an empty range")
	}
	if err := d.SetQPNs(0x30000, 0x30002); err != nil {
		t.Fatal(err)
	}
	pd, _ := d.allocPD()
	cq, _ := d.newCQ(16)
	mk := func() (uint32, error) {
		qp, err := d.CreateQP(pd, QPInit{Type: driver.QPTypeUD, SendCQ: cq, RecvCQ: cq,
			Cap: driver.QPCap{MaxSendWR: 1, MaxRecvWR: 1, MaxSendSGE: 1, MaxRecvSGE: 1}})
		if err != nil {
			return 0, err
		}
		return qp.QPN(), nil
	}
	got := map[uint32]bool{}
	for range 3 {
		n, err := mk()
		if err != nil {
			t.Fatal(err)
		}
		if n < 0x30000 || n > 0x30002 {
			t.Fatalf("QPN %#x outside 0x30000-0x30002", n)
		}
		got[n] = true
	}
	if len(got) != 3 {
		t.Fatalf("QPNs %v: not three distinct", got)
	}
	if _, err := mk(); err != ErrTooManyQPs {
		t.Fatalf("a fourth QP in a range of three: %v, want ErrTooManyQPs", err)
	}
	if err := d.SetQPNs(0x40000, 0x4ffff); err == nil {
		t.Fatal("SetQPNs took a new range on a device with QPs")
	}
}

package congestion

import (
	"encoding/binary"
	"testing"
	"time"

	"github.com/goverbs/goverbs/wire"
)

// FuzzRP drives a reaction point and a notification point with operations decoded
// from the input (CNP, send, advance, budget, CE; times that may run backwards):
// nothing panics and MinRate ≤ Rc ≤ Rt ≤ LineRate, 0 ≤ α ≤ 1 hold throughout (α decays
// to 0 after long enough without a CNP).
func FuzzRP(f *testing.F) {
	f.Add([]byte{0, 10, 1, 200, 2, 255, 3, 5, 0, 0, 4, 9})
	f.Add([]byte{0, 0, 0, 0, 0, 1, 0, 2, 2, 255, 2, 255, 2, 255})
	f.Fuzz(func(t *testing.T, ops []byte) {
		for _, cfg := range []Config{PaperConfig(10e9), ConnectXConfig(25e9)} {
			r := NewRP(cfg, t0)
			np := NewNP(cfg)
			now := t0
			for i := 0; i+1 < len(ops); i += 2 {
				arg := int(ops[i+1])
				switch ops[i] % 6 {
				case 0:
					r.CNP(now)
				case 1:
					r.Sent(now, arg<<12)
				case 2:
					now = now.Add(time.Duration(arg) * time.Duration(arg) * 100 * time.Nanosecond)
					r.Advance(now)
				case 3:
					_ = r.Budget(now)
					_ = r.NextSend(now)
				case 4:
					np.CE(now)
				default:
					now = now.Add(-time.Duration(arg) * time.Microsecond) // a clock that jumps back
				}
				if !(cfg.MinRate <= r.Rate() && r.Rate() <= r.Target() && r.Target() <= cfg.LineRate) || !(r.Alpha() >= 0 && r.Alpha() <= 1) {
					t.Fatalf("op %d: Rc %v Rt %v α %v", i/2, r.Rate(), r.Target(), r.Alpha())
				}
			}
		}
	})
}

// FuzzSelectiveRepeat feeds a Tracker arbitrary PSNs and a SendWindow arbitrary
// acknowledgements, NAKs and timeouts: nothing panics, the window's counts stay within
// its bounds, and whatever Next hands out lies in it.
func FuzzSelectiveRepeat(f *testing.F) {
	f.Add([]byte{0, 0, 0, 1, 0, 0, 2, 2, 0, 0, 1, 3})
	f.Add([]byte{255, 255, 255, 0, 0, 5, 1, 0, 0, 3})
	f.Fuzz(func(t *testing.T, in []byte) {
		first := wire.PSN(wire.PSNMask - 3)
		tr := NewTracker(first, 16)
		w := NewSendWindow(first, 4)
		for len(in) >= 4 {
			op, v := in[0], binary.BigEndian.Uint32(in[:4])&wire.PSNMask
			in = in[4:]
			p := first.Add(v & 0x3f) // mostly near the window, sometimes across the wrap
			if op&0x80 != 0 {
				p = wire.PSN(v)
			}
			tr.Receive(p)
			switch op % 5 {
			case 0:
				if q, ok := w.Next(); ok && !(q.Diff(w.Una()) >= 0 && q.Diff(w.NextNew()) < 0) {
					t.Fatalf("Next handed out %v outside [%v, %v)", q, w.Una(), w.NextNew())
				}
			case 1:
				w.ACK(p)
			case 2:
				w.NAK(p, p.Add(v>>20))
			case 3:
				w.Timeout()
			default:
				_ = w.CanSend()
			}
			if o, f := w.Outstanding(), w.InFlight(); o < 0 || o > w.Span() || f < 0 || f > o {
				t.Fatalf("outstanding %d, in flight %d, span %d", o, f, w.Span())
			}
			if tr.Kept() < 0 || tr.Kept() > 16 {
				t.Fatalf("kept %d", tr.Kept())
			}
		}
	})
}

package wire

import "testing"

func TestCRCConstants(t *testing.T) {
	if crcSeed != 0xdebb20e3 {
		t.Errorf("seed %#x, want rxe's 0xdebb20e3", crcSeed)
	}
	const one, x = 1 << 31, 1 << 30 // reflected: bit 31 is x^0
	if got := mulMod(xInv, x); got != one {
		t.Errorf("x^-1 * x = %#x", got)
	}
	for k := 1; k < 8; k++ {
		// x^(2^k) * x^(-2^k) == 1
		p := uint32(x)
		for range k {
			p = mulMod(p, p)
		}
		if got := mulMod(p, xInvPow[k]); got != one {
			t.Errorf("k=%d: %#x", k, got)
		}
	}
}

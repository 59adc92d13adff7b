package wire

import (
	"strconv"
	"testing"
)

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

// TestCRCLong: crcLong (four-accumulator folding where the CPU has VPCLMULQDQ) advances
// the register as hash/crc32 does, for every length from foldMin to a few KiB, at every
// alignment of the first byte, from any register.
func TestCRCLong(t *testing.T) {
	t.Logf("four-accumulator folding in use: 512-bit %v, 256-bit %v", foldWholes, foldHalves)
	buf := make([]byte, 5000+64)
	x := uint32(0x12345678)
	for i := range buf {
		x = x*1664525 + 1013904223
		buf[i] = byte(x >> 24)
	}
	for n := foldMin; n <= 5000; n++ {
		off := n % 64
		p := buf[off : off+n]
		reg := uint32(n) * 0x9e3779b9
		if got, want := crcLong(reg, p), crcHash(reg, p); got != want {
			t.Fatalf("%d bytes at offset %d: %#x, want %#x", n, off, got, want)
		}
	}
}

// BenchmarkCRCLong: crcLong against hash/crc32 on a packet's lengths at MTU 1024 and 4096.
func BenchmarkCRCLong(b *testing.B) {
	for _, n := range []int{1040, 4112} {
		p := make([]byte, n)
		b.Run("hash/"+strconv.Itoa(n), func(b *testing.B) {
			b.SetBytes(int64(n))
			for b.Loop() {
				crcHash(1, p)
			}
		})
		b.Run("long/"+strconv.Itoa(n), func(b *testing.B) {
			b.SetBytes(int64(n))
			for b.Loop() {
				crcLong(1, p)
			}
		})
	}
}

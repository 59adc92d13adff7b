package wire

import (
	"testing"
	"unsafe"

	"golang.org/x/sys/cpu"
)

// TestFoldKeys: the keys computed for foldAVX512 are the multiplication constants
// hash/crc32 (and Intel's paper on CRC with PCLMULQDQ) use for 64, 128 and 512 bits.
func TestFoldKeys(t *testing.T) {
	if fold.k512[0] != 0x154442bd4 || fold.k512[1] != 0x1c6e41596 || fold.k128[0] != 0x1751997d0 ||
		fold.k128[1] != 0x0ccaa009e || fold.k64[0] != 0x163cd6124 {
		t.Fatalf("fold keys %#x %#x %#x", fold.k512[:2], fold.k128, fold.k64)
	}
}

// TestFoldKeyOffsets: the offsets fold_amd64.s loads the keys from.
func TestFoldKeyOffsets(t *testing.T) {
	for _, c := range []struct {
		name      string
		off, want uintptr
	}{
		{"k512", unsafe.Offsetof(fold.k512), 64},
		{"k128", unsafe.Offsetof(fold.k128), 128},
		{"k64", unsafe.Offsetof(fold.k64), 144},
		{"barret", unsafe.Offsetof(fold.barret), 160},
		{"k1024", unsafe.Offsetof(fold.k1024), 176},
		{"k256", unsafe.Offsetof(fold.k256), 208},
	} {
		if c.off != c.want {
			t.Errorf("foldKeys.%s at %d, fold_amd64.s reads it at %d", c.name, c.off, c.want)
		}
	}
}

// TestFoldAVX2: the 256-bit folding advances the register as hash/crc32 does, for
// every multiple of 16 from its shortest input (128 bytes) to a few KiB, at every
// alignment, from any register: run wherever the CPU has it, AVX-512 or not (crcLong
// prefers foldAVX512 there, so TestCRCLong alone would not reach it).
func TestFoldAVX2(t *testing.T) {
	if !cpu.X86.HasAVX2 || !cpu.X86.HasPCLMULQDQ || cpuid7ecx()&(1<<10) == 0 {
		t.Skip("no VPCLMULQDQ on 256-bit registers here")
	}
	buf := make([]byte, 5000+64)
	x := uint32(0x9e3779b9)
	for i := range buf {
		x = x*1664525 + 1013904223
		buf[i] = byte(x >> 24)
	}
	for n := 128; n <= 5000; n += 16 {
		off := (n / 16) % 64
		p := buf[off : off+n]
		reg := uint32(n) * 0x85ebca6b
		if got, want := foldAVX2(reg, &p[0], n, &fold), crcHash(reg, p); got != want {
			t.Fatalf("%d bytes at offset %d: %#x, want %#x", n, off, got, want)
		}
	}
}

package wire

import "golang.org/x/sys/cpu"

// foldAVX512 is in fold_amd64.s.
//
//go:noescape
func foldAVX512(crc uint32, p *byte, n int, k *foldKeys) uint32

// foldAVX2 is foldAVX512's folding on 256-bit registers, in fold_amd64.s.
//
//go:noescape
func foldAVX2(crc uint32, p *byte, n int, k *foldKeys) uint32

// foldTail is the end both folds jump to, in fold_amd64.s: declared for its frame's
// layout (go vet's asmdecl), never called.
//
//go:noescape
func foldTail(crc uint32, p *byte, n int, k *foldKeys) uint32

// cpuid7ecx is in fold_amd64.s.
func cpuid7ecx() uint32

// foldKeys are the carry-less multiplication constants foldAVX512 moves 128-bit lanes
// forward with: for a distance of D bits, x^(D+32) and x^(D-32) mod the polynomial,
// bit-reflected and shifted left by one (the low and high halves of a lane), the pair
// repeated for each lane of a 512-bit register.
type foldKeys struct {
	k2048  [8]uint64
	k512   [8]uint64
	k128   [2]uint64
	k64    [2]uint64 // x^64 (the high half unused)
	barret [2]uint64 // the polynomial (reflected, 33 bits) and x^64 / P, as hash/crc32 has them
	// foldAVX2's, for 256-bit registers (two lanes each); after the others, whose
	// offsets foldAVX512 uses.
	k1024 [4]uint64
	k256  [4]uint64
}

var (
	fold       foldKeys
	foldWholes = cpu.X86.HasAVX512F && cpu.X86.HasAVX512VPCLMULQDQ && cpu.X86.HasPCLMULQDQ && cpu.X86.HasAVX
	// foldHalves: VPCLMULQDQ on 256-bit registers without AVX-512 (AMD Zen 3), where
	// hash/crc32 folds 128 bits at a time and ran a 4 KiB packet at 9 GB/s.
	// golang.org/x/sys/cpu sets HasAVX512VPCLMULQDQ only with AVX-512, so the bit is
	// read here; AVX2 says that leaf 7 exists and that the OS saves the YMM registers.
	foldHalves = !foldWholes && cpu.X86.HasAVX2 && cpu.X86.HasPCLMULQDQ && cpuid7ecx()&(1<<10) != 0
)

func initFold() {
	key := func(e int) uint64 { return uint64(xPowMod(e)) << 1 }
	for i := 0; i < 8; i += 2 {
		fold.k2048[i], fold.k2048[i+1] = key(2048+32), key(2048-32)
		fold.k512[i], fold.k512[i+1] = key(512+32), key(512-32)
	}
	for i := 0; i < 4; i += 2 {
		fold.k1024[i], fold.k1024[i+1] = key(1024+32), key(1024-32)
		fold.k256[i], fold.k256[i+1] = key(256+32), key(256-32)
	}
	fold.k128[0], fold.k128[1] = key(128+32), key(128-32)
	fold.k64[0] = key(64)
	fold.barret = [2]uint64{0x1db710641, 0x1f7011641}
}

// crcLong advances the register over p, at least foldMin bytes: hash/crc32 (whose
// AVX-512 loop folds one 512-bit accumulator, a multiplication's latency per 64 bytes)
// or, where the CPU has VPCLMULQDQ, four accumulators in flight: 256 bytes a step with
// AVX-512, 128 without. Measured (BenchmarkCRCLong, in cache) on the 2-core VM's Xeon: a
// 1 KiB packet's 1040 bytes in 21 ns with hash/crc32, 15 with foldAVX512, a 4 KiB
// packet's 4112 in 77 and 41; on the AMD EPYC (Zen 3) VM, whose hash/crc32 folds 128
// bits at a time: 136 and 70 ns with foldAVX2, 477 and 216-247.
func crcLong(crc uint32, p []byte) uint32 {
	n := len(p) &^ 15
	switch {
	case foldWholes:
		return crcRaw(foldAVX512(crc, &p[0], n, &fold), p[n:])
	case foldHalves:
		return crcRaw(foldAVX2(crc, &p[0], n, &fold), p[n:])
	}
	return crcHash(crc, p)
}

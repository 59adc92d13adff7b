#include "textflag.h"

// func foldAVX512(crc uint32, p *byte, n int, k *foldKeys) uint32
//
// Advances the CRC register crc over the n bytes at p (n a multiple of 16, at least
// 256): the register XORed into their first four, the bytes folded with four 512-bit
// accumulators, 256 bytes a step (foldKeys.k2048), then one (k512), then one 128-bit
// lane (k128), 16 bytes a step, and the last 128 bits reduced to the register (k64, then
// Barrett with the polynomial and its quotient, as hash/crc32's ieeeCLMUL finishes): the
// last two in foldTail, which foldAVX2 ends in too.
TEXT ·foldAVX512(SB), NOSPLIT, $0-36
	MOVQ p+8(FP), SI
	MOVQ n+16(FP), CX
	MOVQ k+24(FP), DX

	MOVL    crc+0(FP), X4
	VMOVAPS X4, X5 // the register in the low 32 bits of Z5, the rest zero

	VMOVDQU64 (SI), Z0
	VMOVDQU64 64(SI), Z1
	VMOVDQU64 128(SI), Z2
	VMOVDQU64 192(SI), Z3
	VPXORQ    Z5, Z0, Z0
	ADDQ      $256, SI
	SUBQ      $256, CX

	VMOVDQU64 (DX), Z8 // fold by 2048 bits, each lane
	CMPQ      CX, $256
	JL        fold4

loop256:
	VMOVDQU64  (SI), Z9
	VMOVDQU64  64(SI), Z10
	VMOVDQU64  128(SI), Z11
	VMOVDQU64  192(SI), Z12
	VPCLMULQDQ $0x00, Z8, Z0, Z4
	VPCLMULQDQ $0x11, Z8, Z0, Z0
	VPCLMULQDQ $0x00, Z8, Z1, Z5
	VPCLMULQDQ $0x11, Z8, Z1, Z1
	VPCLMULQDQ $0x00, Z8, Z2, Z6
	VPCLMULQDQ $0x11, Z8, Z2, Z2
	VPCLMULQDQ $0x00, Z8, Z3, Z7
	VPCLMULQDQ $0x11, Z8, Z3, Z3
	VPTERNLOGD $0x96, Z9, Z4, Z0
	VPTERNLOGD $0x96, Z10, Z5, Z1
	VPTERNLOGD $0x96, Z11, Z6, Z2
	VPTERNLOGD $0x96, Z12, Z7, Z3
	ADDQ       $256, SI
	SUBQ       $256, CX
	CMPQ       CX, $256
	JGE        loop256

fold4:
	VMOVDQU64  64(DX), Z8 // fold by 512 bits: one accumulator onto the next
	VPCLMULQDQ $0x00, Z8, Z0, Z4
	VPCLMULQDQ $0x11, Z8, Z0, Z5
	VPTERNLOGD $0x96, Z4, Z5, Z1
	VPCLMULQDQ $0x00, Z8, Z1, Z4
	VPCLMULQDQ $0x11, Z8, Z1, Z5
	VPTERNLOGD $0x96, Z4, Z5, Z2
	VPCLMULQDQ $0x00, Z8, Z2, Z4
	VPCLMULQDQ $0x11, Z8, Z2, Z5
	VPTERNLOGD $0x96, Z4, Z5, Z3
	CMPQ       CX, $64
	JL         fold1

loop64:
	VMOVDQU64  (SI), Z9
	VPCLMULQDQ $0x00, Z8, Z3, Z4
	VPCLMULQDQ $0x11, Z8, Z3, Z3
	VPTERNLOGD $0x96, Z9, Z4, Z3
	ADDQ       $64, SI
	SUBQ       $64, CX
	CMPQ       CX, $64
	JGE        loop64

fold1:
	VMOVDQU       128(DX), X8 // fold by 128 bits
	VEXTRACTI32X4 $1, Z3, X1
	VEXTRACTI32X4 $2, Z3, X2
	VEXTRACTI32X4 $3, Z3, X6
	VPCLMULQDQ    $0x00, X8, X3, X4
	VPCLMULQDQ    $0x11, X8, X3, X5
	VPXOR         X4, X1, X1
	VPXOR         X5, X1, X1
	VPCLMULQDQ    $0x00, X8, X1, X4
	VPCLMULQDQ    $0x11, X8, X1, X5
	VPXOR         X4, X2, X2
	VPXOR         X5, X2, X2
	VPCLMULQDQ    $0x00, X8, X2, X4
	VPCLMULQDQ    $0x11, X8, X2, X5
	VPXOR         X4, X6, X6
	VPXOR         X5, X6, X6
	JMP           ·foldTail(SB)

// func foldAVX2(crc uint32, p *byte, n int, k *foldKeys) uint32
//
// foldAVX512's folding for a CPU with VPCLMULQDQ but no AVX-512 (AMD Zen 3, Intel
// Alder Lake's cores): four 256-bit accumulators, two 128-bit lanes each, 128 bytes a
// step (foldKeys.k1024), then one (k256), 32 bytes a step, then one 128-bit lane (k128),
// 16 bytes a step (foldTail, as foldAVX512 ends), and the same reduction to the
// register. n is a multiple of 16, at least 128.
TEXT ·foldAVX2(SB), NOSPLIT, $0-36
	MOVQ p+8(FP), SI
	MOVQ n+16(FP), CX
	MOVQ k+24(FP), DX

	MOVL    crc+0(FP), X4
	VMOVAPS X4, X5 // the register in the low 32 bits of Y5, the rest zero

	VMOVDQU (SI), Y0
	VMOVDQU 32(SI), Y1
	VMOVDQU 64(SI), Y2
	VMOVDQU 96(SI), Y3
	VPXOR   Y5, Y0, Y0
	ADDQ    $128, SI
	SUBQ    $128, CX

	VMOVDQU 176(DX), Y8 // fold by 1024 bits, each lane
	CMPQ    CX, $128
	JL      yfold4

yloop128:
	VMOVDQU    (SI), Y9
	VMOVDQU    32(SI), Y10
	VMOVDQU    64(SI), Y11
	VMOVDQU    96(SI), Y12
	VPCLMULQDQ $0x00, Y8, Y0, Y4
	VPCLMULQDQ $0x11, Y8, Y0, Y0
	VPCLMULQDQ $0x00, Y8, Y1, Y5
	VPCLMULQDQ $0x11, Y8, Y1, Y1
	VPCLMULQDQ $0x00, Y8, Y2, Y6
	VPCLMULQDQ $0x11, Y8, Y2, Y2
	VPCLMULQDQ $0x00, Y8, Y3, Y7
	VPCLMULQDQ $0x11, Y8, Y3, Y3
	VPXOR      Y9, Y4, Y4
	VPXOR      Y4, Y0, Y0
	VPXOR      Y10, Y5, Y5
	VPXOR      Y5, Y1, Y1
	VPXOR      Y11, Y6, Y6
	VPXOR      Y6, Y2, Y2
	VPXOR      Y12, Y7, Y7
	VPXOR      Y7, Y3, Y3
	ADDQ       $128, SI
	SUBQ       $128, CX
	CMPQ       CX, $128
	JGE        yloop128

yfold4:
	VMOVDQU    208(DX), Y8 // fold by 256 bits: one accumulator onto the next
	VPCLMULQDQ $0x00, Y8, Y0, Y4
	VPCLMULQDQ $0x11, Y8, Y0, Y5
	VPXOR      Y4, Y1, Y1
	VPXOR      Y5, Y1, Y1
	VPCLMULQDQ $0x00, Y8, Y1, Y4
	VPCLMULQDQ $0x11, Y8, Y1, Y5
	VPXOR      Y4, Y2, Y2
	VPXOR      Y5, Y2, Y2
	VPCLMULQDQ $0x00, Y8, Y2, Y4
	VPCLMULQDQ $0x11, Y8, Y2, Y5
	VPXOR      Y4, Y3, Y3
	VPXOR      Y5, Y3, Y3
	CMPQ       CX, $32
	JL         yfold1

yloop32:
	VMOVDQU    (SI), Y9
	VPCLMULQDQ $0x00, Y8, Y3, Y4
	VPCLMULQDQ $0x11, Y8, Y3, Y3
	VPXOR      Y9, Y4, Y4
	VPXOR      Y4, Y3, Y3
	ADDQ       $32, SI
	SUBQ       $32, CX
	CMPQ       CX, $32
	JGE        yloop32

yfold1:
	VMOVDQU      128(DX), X8 // fold by 128 bits
	VEXTRACTI128 $1, Y3, X6
	VPCLMULQDQ   $0x00, X8, X3, X4
	VPCLMULQDQ   $0x11, X8, X3, X5
	VPXOR        X4, X6, X6
	VPXOR        X5, X6, X6
	JMP          ·foldTail(SB)

// func cpuid7ecx() uint32: CPUID leaf 7, subleaf 0's ECX (bit 10: VPCLMULQDQ), which
// golang.org/x/sys/cpu reports only on CPUs with AVX-512.
TEXT ·cpuid7ecx(SB), NOSPLIT, $0-4
	MOVL $7, AX
	MOVL $0, CX
	CPUID
	MOVL CX, ret+0(FP)
	RET

// func foldTail(crc uint32, p *byte, n int, k *foldKeys) uint32
//
// The end both folds jump to, never called: the 128-bit lane in X6 folded on over the
// last bytes (SI, CX: fewer than 64 or 32 left, a multiple of 16) with k128 (DX), and
// reduced to the register, which it returns in their frame.
TEXT ·foldTail(SB), NOSPLIT, $0-36
	VMOVDQU 128(DX), X8 // fold by 128 bits
	CMPQ    CX, $16
	JL      done

loop16:
	VMOVDQU    (SI), X9
	VPCLMULQDQ $0x00, X8, X6, X4
	VPCLMULQDQ $0x11, X8, X6, X5
	VPXOR      X4, X9, X9
	VPXOR      X5, X9, X6
	ADDQ       $16, SI
	SUBQ       $16, CX
	CMPQ       CX, $16
	JGE        loop16

done:
	VZEROUPPER
	MOVOU     X6, X1
	MOVOU     128(DX), X0 // k128
	PCMPEQB   X3, X3
	PCLMULQDQ $1, X1, X0  // 128 bits to 96
	PSRLDQ    $8, X1
	PXOR      X0, X1
	MOVOU     X1, X2
	MOVQ      144(DX), X0 // k64: 96 bits to 64
	PSRLQ     $32, X3     // the low 32 bits of each half
	PSRLDQ    $4, X2
	PAND      X3, X1
	PCLMULQDQ $0, X0, X1
	PXOR      X2, X1
	MOVOU     160(DX), X0 // Barrett: the polynomial, its quotient
	MOVOU     X1, X2
	PAND      X3, X1
	PCLMULQDQ $0x10, X0, X1
	PAND      X3, X1
	PCLMULQDQ $0, X0, X1
	PXOR      X2, X1
	PEXTRD    $1, X1, AX
	MOVL      AX, ret+32(FP)
	RET

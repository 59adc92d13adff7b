#include "textflag.h"

// func prefetchLines(p *byte, n uintptr): PREFETCHT0 of each 64-byte line of [p, p+n).
TEXT ·prefetchLines(SB), NOSPLIT, $0-16
	MOVQ p+0(FP), AX
	MOVQ n+8(FP), CX
	ADDQ AX, CX
ploop:
	CMPQ AX, CX
	JAE  pdone
	PREFETCHT0 (AX)
	ADDQ $64, AX
	JMP  ploop
pdone:
	RET

// func demoteLines(p *byte, n uintptr): CLDEMOTE of each 64-byte line of [p, p+n) (a
// hint-NOP where the CPU lacks it).
TEXT ·demoteLines(SB), NOSPLIT, $0-16
	MOVQ p+0(FP), AX
	MOVQ n+8(FP), CX
	ADDQ AX, CX
dloop:
	CMPQ AX, CX
	JAE  ddone
	BYTE $0x0F; BYTE $0x1C; BYTE $0x00 // CLDEMOTE (AX)
	ADDQ $64, AX
	JMP  dloop
ddone:
	RET

// func ntcopy64(dst, src *byte, n uintptr): n bytes (a multiple of 64) with
// non-temporal 64-byte stores (AVX-512), then SFENCE.
TEXT ·ntcopy64(SB), NOSPLIT, $0-24
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n+16(FP), CX
	ADDQ DI, CX
nloop:
	CMPQ DI, CX
	JAE  ndone
	VMOVDQU64 (SI), Z0
	VMOVNTDQ  Z0, (DI)
	ADDQ $64, SI
	ADDQ $64, DI
	JMP  nloop
ndone:
	SFENCE
	VZEROUPPER
	RET

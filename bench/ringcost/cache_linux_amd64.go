package main

import "golang.org/x/sys/cpu"

//go:noescape
func prefetchLines(p *byte, n uintptr)

//go:noescape
func demoteLines(p *byte, n uintptr)

//go:noescape
func ntcopy64(dst, src *byte, n uintptr)

func prefetch(b []byte) {
	if len(b) > 0 {
		prefetchLines(&b[0], uintptr(len(b)))
	}
}

func cldemote(b []byte) {
	if len(b) > 0 {
		demoteLines(&b[0], uintptr(len(b)))
	}
}

// ntcopy copies src into dst (len(dst) a multiple of 64) with non-temporal stores, or
// with copy where the CPU has no AVX-512.
func ntcopy(dst, src []byte) {
	if !cpu.X86.HasAVX512F || len(dst)%64 != 0 || len(src) < len(dst) {
		copy(dst, src)
		return
	}
	ntcopy64(&dst[0], &src[0], uintptr(len(dst)))
}

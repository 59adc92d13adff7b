package attach

import (
	"sync/atomic"
	"unsafe"
)

// Word returns the 32-bit word at off of a shared mapping, for atomic access: the
// CQ's arm and overflow words, which both sides change. It returns nil if the word
// does not lie inside mem or is not 4-byte aligned.
func Word(mem []byte, off int) *atomic.Uint32 {
	if off < 0 || off > len(mem)-4 || (uintptr(unsafe.Pointer(unsafe.SliceData(mem)))+uintptr(off))%4 != 0 {
		return nil
	}
	// Safe: the word lies inside mem (checked above) at a 4-byte aligned address, as
	// sync/atomic requires; mem is a shared mapping the caller keeps mapped for as
	// long as it uses the word. The peer may write it at any time, hence atomics.
	return (*atomic.Uint32)(unsafe.Pointer(&mem[off]))
}

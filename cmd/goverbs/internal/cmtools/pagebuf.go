package cmtools

import (
	"os"
	"unsafe"
)

// pageBuf is n bytes at the start of whole pages of their own: an attached device
// (verbs/attach, goverbs serve) registers only memory that starts on a page and fills
// whole pages, since it moves those pages onto shared memory. pages gives the whole
// pages, to register.
func pageBuf(n int) []byte {
	ps := os.Getpagesize()
	size := (max(n, 1) + ps - 1) / ps * ps
	b := make([]byte, size+ps)
	off := int(-uintptr(unsafe.Pointer(unsafe.SliceData(b))) & uintptr(ps-1))
	return b[off : off+n : off+size]
}

// pages is the whole pages under a pageBuf.
func pages(b []byte) []byte { return b[:cap(b)] }

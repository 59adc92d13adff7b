package verbs

import "unsafe"

// noescape returns s unchanged, hiding from escape analysis that the result is s.
//
// Why: PostSend, PostRecv and Poll hand the caller's slice to the provider through an
// interface, and Go assumes that whatever an interface method receives escapes. The
// variadic array of every PostSend(wr) call, and every SGL a caller writes as a literal,
// would then be moved to the heap: an allocation per post with every provider. The
// provider contract (driver.QP.PostSend, driver.CQ.Poll) forbids keeping the slice or
// anything it points to after the call returns, which is what makes the caller's stack a
// safe place for it; TestPostWithSGLLiteralAllocatesNothing holds the software provider
// to it.
//
// The pointer passes through a uintptr with no call in between, so the stack it may
// point into cannot move meanwhile (runtime.noescape does the same).
func noescape[T any](s []T) []T {
	p := uintptr(unsafe.Pointer(unsafe.SliceData(s)))
	return unsafe.Slice((*T)(*(*unsafe.Pointer)(unsafe.Pointer(&p))), len(s))
}

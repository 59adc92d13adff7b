//go:build goverbs_capi

// Command capi is goverbs' libibverbs.so.1: built with -buildmode=c-shared (see build.sh),
// it lets unmodified C programs written against rdma-core's libibverbs run on goverbs'
// software RoCEv2 devices, loaded with LD_LIBRARY_PATH instead of the system library.
//
// The C entry points (the ibv_* functions, with rdma-core's prototypes and symbol
// versions) are in the .c files beside this one; they own the C objects a program
// holds and call the Go functions exported here, which drive package verbs. Every Go
// object a C object stands for is kept in a table of handles (internal/handles), its
// number stored in the C object.
//
// The build tag keeps this package out of `go build ./...`: it needs libibverbs-dev's
// headers, which a machine building the Go module does not have to have.
package main

/*
#cgo CFLAGS: -O2 -Wall -D_GNU_SOURCE
#include <errno.h>
#include "gv.h"
*/
import "C"

import (
	"errors"
	"fmt"
	"os"
	"syscall"
	"unsafe"

	"github.com/goverbs/goverbs/internal/handles"
	"github.com/goverbs/goverbs/verbs"
	_ "github.com/goverbs/goverbs/verbs/soft/xdp" // GOVERBS_DEVICES entries "NAME=ADDR@xdp:IFACE/Q"
)

func main() {}

// errno maps an error of package verbs to the errno libibverbs would return.
func errno(err error) C.int {
	var pe *verbs.PostError
	var en syscall.Errno
	switch {
	case err == nil:
		return 0
	case errors.As(err, &pe):
		return errno(pe.Err)
	case errors.Is(err, verbs.ErrNoDevice):
		return C.ENODEV
	case errors.Is(err, verbs.ErrBusy):
		return C.EBUSY
	case errors.Is(err, verbs.ErrQueueFull), errors.Is(err, verbs.ErrLimit):
		return C.ENOMEM // as providers return for a full queue or an exhausted device
	case errors.Is(err, verbs.ErrCQOverflow):
		return C.EOVERFLOW
	case errors.Is(err, errors.ErrUnsupported):
		return C.EOPNOTSUPP
	case errors.As(err, &en):
		return C.int(en) // a device that cannot bind its address: EADDRINUSE, EADDRNOTAVAIL
	case errors.Is(err, verbs.ErrUnavailable):
		return C.ENODEV
	}
	// ErrClosed, ErrInvalidPort, ErrInvalidGID, ErrInvalidState, ErrQPState,
	// ErrMissingAttr, ErrExtraAttr, ErrInvalidAttr, ErrWrongDevice, and anything else.
	return C.EINVAL
}

// logErr says why a verb failed on stderr when GOVERBS_DEBUG is set: errno alone is
// often too little to find the cause (which attribute of a modify_qp was refused).
func logErr(verb string, err error) C.int {
	if err != nil && os.Getenv("GOVERBS_DEBUG") != "" {
		fmt.Fprintf(os.Stderr, "goverbs: %s: %v\n", verb, err)
	}
	return errno(err)
}

// objects holds the Go objects the C objects stand for. A handle is 64 bits (a slot and
// its generation); the C objects keep it in a uintptr_t, which this library's platforms
// (64-bit Linux) make as wide.
var objects handles.Table

// The build fails where a uintptr_t cannot hold a handle.
const _ = uint(unsafe.Sizeof(uintptr(0)) - 8)

// handle returns the Go object behind h, or the zero T when h is zero, names no live
// object (one the program destroyed) or one of another type.
func handle[T any](h C.uintptr_t) T {
	v, _ := objects.Get(uint64(h)).(T)
	return v
}

// newHandle stores v for the C side.
func newHandle(v any) C.uintptr_t { return C.uintptr_t(objects.New(v)) }

// closeHandle closes the object behind h (ibv_dereg_mr, ibv_dealloc_mw, ibv_destroy_ah)
// and only then forgets the handle, as the C side frees its struct only on success. An
// object that refuses (EBUSY: a region with a window bound to it) keeps its handle, so
// that the program's later call finds it again instead of a deleted handle.
func closeHandle[T interface{ Close() error }](h C.uintptr_t, verb string) C.int {
	if h == 0 {
		return C.EINVAL
	}
	v, ok := objects.Get(uint64(h)).(T)
	if !ok {
		return C.EINVAL
	}
	if err := v.Close(); err != nil {
		return logErr(verb, err)
	}
	dropHandle(h)
	return 0
}

// dropHandle forgets a handle the C side is about to free.
func dropHandle(h C.uintptr_t) {
	objects.Delete(uint64(h))
}

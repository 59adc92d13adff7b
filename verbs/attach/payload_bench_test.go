//go:build linux

package attach_test

import (
	"os"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"
)

// The payload paths issue 27 asked to weigh, per 64 KiB WRITE: a staging copy
// through shared memory (one memcpy more on each side), and cross-memory attach
// (process_vm_readv, a syscall per access; here on this process, which needs no ptrace
// permission). The shared mapping the provider uses (memory_linux.go) costs neither:
// the engine copies between the packet and the client's pages directly.

func BenchmarkPayloadStagingCopy(b *testing.B) {
	src, dst := make([]byte, 64<<10), make([]byte, 64<<10)
	b.SetBytes(int64(len(src)))
	for b.Loop() {
		copy(dst, src)
	}
}

func BenchmarkPayloadCMA(b *testing.B) {
	src, dst := make([]byte, 64<<10), make([]byte, 64<<10)
	pid := os.Getpid()
	local := []unix.Iovec{{Base: &dst[0], Len: uint64(len(dst))}}
	remote := []unix.RemoteIovec{{Base: uintptr(unsafe.Pointer(&src[0])), Len: len(src)}}
	b.SetBytes(int64(len(src)))
	for b.Loop() {
		if _, err := unix.ProcessVMReadv(pid, local, remote, 0); err != nil {
			b.Skip("process_vm_readv:", err)
		}
	}
}

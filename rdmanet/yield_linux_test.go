package rdmanet

import (
	"runtime"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"
)

// leaveCPU moves the thread to another CPU and gives its affinity mask back unchanged.
func TestLeaveCPUKeepsTheMask(t *testing.T) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	var before, after unix.CPUSet
	if err := unix.SchedGetaffinity(0, &before); err != nil {
		t.Fatal(err)
	}
	if before.Count() < 2 {
		if leaveCPU() {
			t.Fatal("moved with one CPU allowed")
		}
		t.Skip("one CPU allowed")
	}
	cpu := func() int {
		var c uint32
		if _, _, e := unix.RawSyscall(unix.SYS_GETCPU, uintptrOf(&c), 0, 0); e != 0 {
			t.Fatal(e)
		}
		return int(c)
	}
	from := cpu()
	if !leaveCPU() {
		t.Fatal("did not move")
	}
	if to := cpu(); to == from {
		t.Fatalf("still on CPU %d", from)
	}
	if err := unix.SchedGetaffinity(0, &after); err != nil {
		t.Fatal(err)
	}
	if after != before {
		t.Fatalf("mask %v after the move, was %v", after, before)
	}
}

func uintptrOf(p *uint32) uintptr { return uintptr(unsafe.Pointer(p)) }

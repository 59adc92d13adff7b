package rdmanet

import (
	"runtime"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// osYield gives the processor to another runnable thread, of this process or another
// (sched_yield(2)); with none it returns at once. It is a raw system call, as the
// device's recvmmsg and sendmmsg are: through the runtime's syscall path, a yield that
// gave the core away for long let sysmon hand the spinner's P to another thread, and
// the spinning goroutine came back on another thread, wherever the kernel had put it.
func osYield() { syscall.RawSyscall(syscall.SYS_SCHED_YIELD, 0, 0, 0) }

// leaveCPU moves the calling thread off the CPU it runs on, to another its affinity
// mask allows, and leaves the mask as it was: sched_setaffinity(2) without the current
// CPU migrates the thread at once, and the mask given back does not move it again. It
// reports whether the thread moved (not where the mask allows one CPU only).
func leaveCPU() bool {
	runtime.LockOSThread() // the calls are about one thread
	defer runtime.UnlockOSThread()
	var mask unix.CPUSet
	if unix.SchedGetaffinity(0, &mask) != nil || mask.Count() < 2 {
		return false
	}
	var cpu uint32
	if _, _, e := unix.RawSyscall(unix.SYS_GETCPU, uintptr(unsafe.Pointer(&cpu)), 0, 0); e != 0 {
		return false
	}
	away := mask
	away.Clear(int(cpu))
	if away.Count() == 0 || unix.SchedSetaffinity(0, &away) != nil {
		return false
	}
	unix.SchedSetaffinity(0, &mask) // accepted a moment ago: it cannot fail now but for a race with the program
	return true
}

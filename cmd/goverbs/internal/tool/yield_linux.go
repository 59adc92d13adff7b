package tool

import (
	"time"

	"golang.org/x/sys/unix"
)

// YieldCPU offers this thread's CPU to another thread (sched_yield(2)). A spinning
// waiter calls it beside runtime.Gosched, which alone keeps the thread on its CPU (the
// Go scheduler finds the same goroutine again) while the thread the netpoller wakes to
// deliver the peer's packet waits for a CPU, as when both processes of a test spin on
// a small machine.
func YieldCPU() { unix.RawSyscall(unix.SYS_SCHED_YIELD, 0, 0, 0) }

// Nap sleeps this thread for d with nanosleep(2): the Go runtime's timers wake a
// sleeping process through epoll_wait, whose timeout is in milliseconds, so a shorter
// time.Sleep there can last a millisecond.
func Nap(d time.Duration) {
	ts := unix.NsecToTimespec(d.Nanoseconds())
	for unix.Nanosleep(&ts, &ts) == unix.EINTR {
	}
}

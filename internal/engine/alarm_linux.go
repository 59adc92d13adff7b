//go:build linux

package engine

import (
	"time"

	"golang.org/x/sys/unix"
)

// alarm is the doorbell's backstop timer: a timerfd, which the alarm goroutine waits for
// in a blocking read(2). Go's own timers cannot serve: a sleeping runtime waits for the
// next timer in epoll_pwait, whose timeout is in milliseconds, so a timer shorter than
// that fires a millisecond late. Nor can the netpoller: while every P has a goroutine to run (a
// poller that yields, say) the runtime looks at it only every 10 ms (sysmon). A thread
// blocked in read(2) is woken by the kernel at the timer's high-resolution expiry, and
// its goroutine runs on an idle P, or next to a yielding one. set is one syscall, made
// about once per alarmDelay while a stream defers, not per post. The doorbell's mutex serializes
// every method but wait; release comes after the waiter has gone.
type alarm struct {
	fd   int
	spec unix.ItimerSpec
	buf  [8]byte
	sets int64 // calls of set, for tests (AlarmSets)
}

func newAlarm() *alarm {
	fd, err := unix.TimerfdCreate(unix.CLOCK_MONOTONIC, unix.TFD_CLOEXEC)
	if err != nil {
		return nil
	}
	return &alarm{fd: fd}
}

// set makes the alarm expire after d (once).
func (a *alarm) set(d time.Duration) error {
	a.sets++
	a.spec.Value = unix.NsecToTimespec(int64(max(d, 1)))
	return unix.TimerfdSettime(a.fd, 0, &a.spec, nil)
}

// wait blocks until the alarm expires.
func (a *alarm) wait() error {
	for {
		_, err := unix.Read(a.fd, a.buf[:])
		if err != unix.EINTR {
			return err
		}
	}
}

// release closes the timer; nobody waits or sets it any more.
func (a *alarm) release() { unix.Close(a.fd) }

func alarmSets(a *alarm) int64 { return a.sets }

//go:build !linux

package tool

import "time"

// YieldCPU is sched_yield(2) where there is one (yield_linux.go); elsewhere a no-op.
func YieldCPU() {}

// Nap sleeps for d (nanosleep(2) on Linux: yield_linux.go).
func Nap(d time.Duration) { time.Sleep(d) }

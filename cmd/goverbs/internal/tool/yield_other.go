//go:build !linux

package tool

// YieldCPU is sched_yield(2) where there is one (yield_linux.go); elsewhere a no-op.
func YieldCPU() {}

//go:build !linux

package main

// yieldCPU is sched_yield(2) where there is one (yield_linux.go); elsewhere a no-op.
func yieldCPU() {}

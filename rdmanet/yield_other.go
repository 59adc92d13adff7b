//go:build !linux

package rdmanet

import "runtime"

// osYield yields to this process's goroutines only: elsewhere no portable call gives
// the processor to other processes.
func osYield() { runtime.Gosched() }

// leaveCPU cannot move a thread elsewhere: it reports false.
func leaveCPU() bool { return false }

package main

import "golang.org/x/sys/unix"

// yieldCPU offers the CPU to another thread (sched_yield(2)); see waitByte.
func yieldCPU() { unix.RawSyscall(unix.SYS_SCHED_YIELD, 0, 0, 0) }

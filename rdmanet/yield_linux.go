package rdmanet

import "syscall"

// osYield gives the processor to another runnable thread, of this process or another
// (sched_yield(2)); with none it returns at once.
func osYield() { syscall.Syscall(syscall.SYS_SCHED_YIELD, 0, 0, 0) }

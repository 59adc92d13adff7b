//go:build unix

package verbs_test

import (
	"syscall"
	"time"
)

// processCPU is the CPU time the process has used, user and system: a benchmark's cost
// on a machine whose other load makes its wall time swing.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return -1
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

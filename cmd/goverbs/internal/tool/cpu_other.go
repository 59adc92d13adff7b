//go:build !unix

package tool

import "time"

// ProcessCPU is unknown here: --cpu_util reports 0.
func ProcessCPU() time.Duration { return 0 }

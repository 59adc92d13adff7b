//go:build !unix

package main

import "time"

// processCPU is unknown here: --cpu_util reports 0.
func processCPU() time.Duration { return 0 }

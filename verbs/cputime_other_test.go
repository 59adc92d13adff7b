//go:build !unix

package verbs_test

import "time"

// processCPU is unknown here: -1 (see cputime_unix_test.go).
func processCPU() time.Duration { return -1 }

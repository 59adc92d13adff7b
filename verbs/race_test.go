//go:build race

package verbs_test

// raceEnabled: the race detector makes sync.Pool drop a quarter of what is put back, so
// pooled transmit batches are allocated again and allocation counts mean nothing.
const raceEnabled = true

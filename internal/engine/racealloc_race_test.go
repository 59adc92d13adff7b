//go:build race

package engine

// raceEnabled: the race detector makes sync.Pool drop a quarter of what is put back, so
// allocation counts mean nothing under it.
const raceEnabled = true

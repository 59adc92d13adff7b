//go:build unix && !linux

package verbs

// Other Unix systems: pages are faulted in on first touch, and there are no huge pages
// through mmap flags.
const (
	mapPopulate = 0
	mapHugeTLB  = 0
)

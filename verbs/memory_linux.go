package verbs

import "golang.org/x/sys/unix"

// Linux maps the pages at once (no fault on first touch in the data path) and has huge
// pages.
const (
	mapPopulate = unix.MAP_POPULATE
	mapHugeTLB  = unix.MAP_HUGETLB
)

package tool

import "os"

// Buffer returns n bytes or more, a whole number of pages, for a tool's registered
// memory: a device attached to goverbs serve shares registered memory by whole pages,
// which Go gives a page-multiple allocation to itself.
func Buffer(n int) []byte {
	page := os.Getpagesize()
	return make([]byte, (n+page-1)&^(page-1))
}

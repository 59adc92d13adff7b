//go:build goverbs_capi

package main

// #include <stdint.h>
import "C"

import "runtime/metrics"

// goverbs_heap_allocs returns how many heap objects the library's Go side has allocated
// so far. It is exported (version GOVERBS_PRIVATE, not an rdma-core symbol) for the test
// that keeps the data path free of allocations: a C program reads it around a loop of
// posts and polls (capi/capitest, abi_check bench).
//
//export goverbs_heap_allocs
func goverbs_heap_allocs() C.uint64_t {
	s := []metrics.Sample{{Name: "/gc/heap/allocs:objects"}}
	metrics.Read(s)
	return C.uint64_t(s[0].Value.Uint64())
}

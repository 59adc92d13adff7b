//go:build goverbs_capi && ibverbs

package main

// The C library is libibverbs.so.1. Under the ibverbs tag package verbs imports its
// provider for kernel devices (verbs/ibverbs), which links the system's libibverbs
// through cgo: the library would load, and resolve its symbols against, itself. This
// undefined name stops that build with a message.
var _ = capiCannotBeBuiltWithTheIbverbsTag

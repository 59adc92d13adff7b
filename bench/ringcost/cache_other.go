//go:build linux && !amd64

package main

func prefetch(b []byte)      {}
func cldemote(b []byte)      {}
func ntcopy(dst, src []byte) { copy(dst, src) }

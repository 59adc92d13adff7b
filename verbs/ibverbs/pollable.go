//go:build ibverbs

package ibverbs

import "C"

import "os"

// PollableFD makes fd non-blocking and returns an *os.File in Go's netpoller that
// reads the same open file (a duplicate the caller closes; fd stays its owner's). It
// is how this package waits for its completion channel and async events without a
// thread, offered to other cgo packages with a descriptor of their own to wait on:
// package cm's rdma_cm event channel, whose reads then fail with EAGAIN when empty.
func PollableFD(fd int, name string) (*os.File, error) { return pollable(C.int(fd), name) }

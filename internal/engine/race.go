//go:build race

// Race-detector annotations for the wire's ordering (with -race; norace.go without).

package engine

import "sync/atomic"

// The race detector cannot see that a datagram sent by one device and received by another
// orders their memory accesses, as the socket does in reality: a remote WRITE lands in
// memory before the ACK that completes the requester's work request is sent. Model that
// causality for the detector with a release on every send and an acquire on every
// receive, so that race reports point at real races (built only with -race).
var wireOrder atomic.Uint64

func raceReleaseWire() { wireOrder.Add(1) }
func raceAcquireWire() { wireOrder.Load() }

// streamGap under the race detector (post.go).
const streamGap = 10 * streamGapNative

//go:build !race

// Race-detector annotations compiled out (see race.go).

package engine

func raceReleaseWire() {}
func raceAcquireWire() {}

// streamGap (post.go).
const streamGap = streamGapNative

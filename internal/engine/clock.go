// The engine's clock for its hot-path decisions: a monotonic reading in nanoseconds as
// an int64, cheaper to keep and compare than a time.Time. PostSend reads it to tell a
// stream from an isolated post (deferPost), the receive goroutine to time its spin
// (spinRx). The transport's timers (the local ACK timer, the RNR wait in completer.go)
// are runtime timers and read no clock on the hot path.

package engine

import "time"

var monoStart = time.Now()

// nanotime is the time since the engine started, from the monotonic clock.
func nanotime() int64 { return int64(time.Since(monoStart)) }

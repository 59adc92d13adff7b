//go:build !goverbs_trace || !linux

package netio

import (
	"io"
	"time"
)

// Latency tracing is built only with -tags goverbs_trace (trace_linux.go); without it
// these do nothing and the compiler removes the calls.

const traceCmsgRoom = 0

func traceSocket(uintptr)           {}
func traceDatagram([]byte, int)     {}
func traceRecv(int)                 {}
func traceSendStart() (t time.Time) { return }
func traceSendDone(time.Time)       {}

// TraceReport writes the traced figures when built with -tags goverbs_trace (Linux);
// otherwise it writes nothing.
func TraceReport(io.Writer) {}

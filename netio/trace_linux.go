//go:build goverbs_trace && linux

package netio

// Latency tracing, built only with -tags goverbs_trace: where a busy-poll ping-pong's
// time goes between the kernel and the application. Three figures per process, printed
// by TraceReport:
//
//   - pickup: from the kernel's receive timestamp (SO_TIMESTAMPNS, taken when the
//     sender's loopback transmit hands the datagram over) to recvmmsg returning it,
//     per datagram size, so a reply and an ACK are told apart;
//   - turnaround: from a receive that returned data to the next send's start, the
//     application's and the stack's own work in between;
//   - send: how long WriteBatch takes; on loopback it includes delivery to the peer.
//
// The tracing reads the clock three times per message and takes a mutex, so its own
// cost is in every figure; compare builds traced alike (goverbs and bench/nettest).

import (
	"fmt"
	"io"
	"slices"
	"sync"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// traceCmsgRoom is room for the SCM_TIMESTAMPNS message beside UDP_GRO's.
const traceCmsgRoom = 40

const traceMax = 1 << 20 // samples kept per series

var trace struct {
	mu     sync.Mutex
	lastRx time.Time
	pickup map[int][]time.Duration // by datagram size
	turn   []time.Duration
	send   []time.Duration
}

func traceSocket(fd uintptr) {
	_ = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_TIMESTAMPNS, 1)
}

// traceDatagram records the pickup of one datagram of size bytes from its control data.
func traceDatagram(oob []byte, size int) {
	now := time.Now()
	for len(oob) >= unix.SizeofCmsghdr {
		h := (*unix.Cmsghdr)(unsafe.Pointer(&oob[0]))
		l := int(h.Len)
		if l < unix.SizeofCmsghdr || l > len(oob) {
			return
		}
		if h.Level == unix.SOL_SOCKET && h.Type == unix.SCM_TIMESTAMPNS && l >= unix.SizeofCmsghdr+16 {
			ts := (*unix.Timespec)(unsafe.Pointer(&oob[unix.SizeofCmsghdr]))
			trace.mu.Lock()
			if trace.pickup == nil {
				trace.pickup = make(map[int][]time.Duration)
			}
			if s := trace.pickup[size]; len(s) < traceMax {
				trace.pickup[size] = append(s, now.Sub(time.Unix(ts.Sec, ts.Nsec)))
			}
			trace.mu.Unlock()
		}
		next := (l + 7) &^ 7
		if next > len(oob) {
			return
		}
		oob = oob[next:]
	}
}

// traceRecv notes a receive call that returned n datagrams.
func traceRecv(n int) {
	if n > 0 {
		trace.mu.Lock()
		trace.lastRx = time.Now()
		trace.mu.Unlock()
	}
}

// traceSendStart notes a send's start and returns it for traceSendDone.
func traceSendStart() time.Time {
	t := time.Now()
	trace.mu.Lock()
	if !trace.lastRx.IsZero() && len(trace.turn) < traceMax {
		trace.turn = append(trace.turn, t.Sub(trace.lastRx))
	}
	trace.lastRx = time.Time{}
	trace.mu.Unlock()
	return t
}

func traceSendDone(start time.Time) {
	d := time.Since(start)
	trace.mu.Lock()
	if len(trace.send) < traceMax {
		trace.send = append(trace.send, d)
	}
	trace.mu.Unlock()
}

// TraceReport writes the traced figures (built with -tags goverbs_trace; otherwise
// it writes nothing).
func TraceReport(w io.Writer) {
	trace.mu.Lock()
	defer trace.mu.Unlock()
	line := func(what string, v []time.Duration) {
		if len(v) == 0 {
			return
		}
		slices.Sort(v)
		fmt.Fprintf(w, "trace: %-22s n=%-7d p10 %-9v p50 %-9v p90 %v\n", what, len(v),
			v[len(v)/10], v[len(v)/2], v[len(v)*9/10])
	}
	sizes := make([]int, 0, len(trace.pickup))
	for s := range trace.pickup {
		sizes = append(sizes, s)
	}
	slices.Sort(sizes)
	for _, s := range sizes {
		line(fmt.Sprintf("pickup, %d-byte", s), trace.pickup[s])
	}
	line("turnaround", trace.turn)
	line("send call", trace.send)
}

package afxdp

import (
	"fmt"
	"strconv"
	"strings"
)

// SpecPrefix starts the AF_XDP part of a device entry (see ParseSpec).
const SpecPrefix = "xdp:"

// ParseSpec parses the AF_XDP part of a device entry, "xdp:IFACE[/QUEUE[-LAST]]" (in
// GOVERBS_DEVICES, what follows the "@" of NAME=ADDR[:PORT]@xdp:IFACE[/QUEUE[-LAST]]),
// into the Options it names: Interface, Queue (0 when left out) and, for a range of
// queues, Queues (the rest of the range). The caller fills in Addr and the mode.
func ParseSpec(spec string) (Options, error) {
	rest, ok := strings.CutPrefix(spec, SpecPrefix)
	if !ok {
		return Options{}, fmt.Errorf("afxdp: %q: want %sIFACE[/QUEUE]", spec, SpecPrefix)
	}
	iface, q, hasQ := strings.Cut(rest, "/")
	if iface == "" || len(iface) > 15 || strings.ContainsAny(iface, " /:,@") {
		return Options{}, fmt.Errorf("afxdp: %q: %q is not an interface name", spec, iface)
	}
	o := Options{Interface: iface}
	if hasQ {
		first, last, isRange := strings.Cut(q, "-")
		a, err := queueNumber(first)
		if err != nil {
			return Options{}, fmt.Errorf("afxdp: %q: %w", spec, err)
		}
		o.Queue = a
		if isRange {
			b, err := queueNumber(last)
			if err != nil {
				return Options{}, fmt.Errorf("afxdp: %q: %w", spec, err)
			}
			if b < a || b-a >= MaxQueues {
				return Options{}, fmt.Errorf("afxdp: %q: queues %d-%d: want an increasing range of at most %d", spec, a, b, MaxQueues)
			}
			for i := a + 1; i <= b; i++ {
				o.Queues = append(o.Queues, i)
			}
		}
	}
	return o, nil
}

func queueNumber(s string) (int, error) {
	n, err := strconv.Atoi(s)
	if err != nil || n < 0 || n > 1<<16 {
		return 0, fmt.Errorf("%q is not a queue number", s)
	}
	return n, nil
}

package afxdp

import (
	"fmt"
	"strconv"
	"strings"
)

// SpecPrefix starts the AF_XDP part of a device entry (see ParseSpec).
const SpecPrefix = "xdp:"

// ParseSpec parses the AF_XDP part of a device entry, "xdp:IFACE[/QUEUE[-LAST]][+generic]"
// (in GOVERBS_DEVICES, what follows the "@" of NAME=ADDR[:PORT]@xdp:...), into the
// Options it names: Interface, Queue (0 when left out), for a range of queues Queues
// (the rest of the range), and with "+generic" GenericXDP (a comma would end the device entry). The caller fills in Addr and
// the mode.
func ParseSpec(spec string) (Options, error) {
	rest, ok := strings.CutPrefix(spec, SpecPrefix)
	if !ok {
		return Options{}, fmt.Errorf("afxdp: %q: want %sIFACE[/QUEUE]", spec, SpecPrefix)
	}
	rest, flags, hasFlags := strings.Cut(rest, "+")
	generic := false
	if hasFlags {
		for f := range strings.SplitSeq(flags, "+") {
			switch f {
			case "generic":
				generic = true
			default:
				return Options{}, fmt.Errorf("afxdp: %q: unknown option %q (want generic)", spec, f)
			}
		}
	}
	iface, q, hasQ := strings.Cut(rest, "/")
	if iface == "" || len(iface) > 15 || strings.ContainsAny(iface, " /:,@+") {
		return Options{}, fmt.Errorf("afxdp: %q: %q is not an interface name", spec, iface)
	}
	o := Options{Interface: iface, GenericXDP: generic}
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

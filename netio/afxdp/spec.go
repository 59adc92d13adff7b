package afxdp

import (
	"fmt"
	"strconv"
	"strings"
)

// SpecPrefix starts the AF_XDP part of a device entry (see ParseSpec).
const SpecPrefix = "xdp:"

// ParseSpec parses the AF_XDP part of a device entry, "xdp:IFACE[/QUEUE]" (in
// GOVERBS_DEVICES, what follows the "@" of NAME=ADDR[:PORT]@xdp:IFACE[/QUEUE]), into the
// Options it names: Interface, and Queue (0 when left out). The caller fills in Addr and
// the mode.
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
		n, err := strconv.Atoi(q)
		if err != nil || n < 0 || n > 1<<16 {
			return Options{}, fmt.Errorf("afxdp: %q: queue %q is not a queue number", spec, q)
		}
		o.Queue = n
	}
	return o, nil
}

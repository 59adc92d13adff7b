// Package xdp registers the AF_XDP datagram backend (netio/afxdp) with the software
// provider, so that a device can run on an AF_XDP socket instead of a UDP socket:
//
//	import _ "github.com/goverbs/goverbs/verbs/soft/xdp"
//
// then GOVERBS_DEVICES="sw0=10.0.0.1@xdp:eth0/0" (or verbs.SoftConfig{Backend:
// "xdp:eth0/0"}) opens sw0 on queue 0 of eth0. It is a package of its own so that a
// program that does not ask for AF_XDP does not carry the BPF loader. The goverbs command
// and the drop-in libibverbs.so.1 import it.
package xdp

import (
	"net/netip"

	"github.com/goverbs/goverbs/netio"
	"github.com/goverbs/goverbs/netio/afxdp"
	"github.com/goverbs/goverbs/verbs/soft"
)

// Kind is the backend's name in a Backend spec ("xdp:IFACE[/QUEUE[-LAST]]").
const Kind = "xdp"

func init() { soft.RegisterBackend(Kind, open) }

func open(args string, addr netip.AddrPort, busyPoll bool) (netio.Conn, error) {
	o, err := afxdp.ParseSpec(afxdp.SpecPrefix + args)
	if err != nil {
		return nil, err
	}
	o.Addr, o.BusyPoll = addr, busyPoll
	return afxdp.Open(o)
}

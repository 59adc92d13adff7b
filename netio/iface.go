package netio

import (
	"net"
	"net/netip"
)

// InterfaceOf returns the network interface that has addr among its addresses (an
// IPv4-mapped address matches its IPv4 form). Loopback addresses other than the ones
// configured on lo (127.0.0.2, say) belong to no interface by this test.
func InterfaceOf(addr netip.Addr) (net.Interface, bool) {
	ifs, err := net.Interfaces()
	if err != nil {
		return net.Interface{}, false
	}
	for _, ifi := range ifs {
		addrs, err := ifi.Addrs()
		if err != nil {
			continue
		}
		for _, a := range addrs {
			if p, ok := a.(*net.IPNet); ok {
				if ip, ok := netip.AddrFromSlice(p.IP); ok && ip.Unmap() == addr.Unmap() {
					return ifi, true
				}
			}
		}
	}
	return net.Interface{}, false
}

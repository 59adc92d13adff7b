package cm

import (
	"fmt"
	"net"
	"net/netip"

	"github.com/goverbs/goverbs/verbs"
)

// Address resolution on RoCE, where it is local knowledge: a GID is an IP address
// (verbs.GIDFromAddr), so no subnet manager is asked. What rdma_resolve_addr adds is
// the choice of the local device; these two functions make it.

// SourceAddr is the local address the kernel's routing would send to dst from: the
// address rdma_resolve_addr binds to when it is given no source. It sends nothing.
func SourceAddr(dst netip.Addr) (netip.Addr, error) {
	c, err := net.DialUDP("udp", nil, net.UDPAddrFromAddrPort(netip.AddrPortFrom(dst.Unmap(), 4791)))
	if err != nil {
		return netip.Addr{}, fmt.Errorf("cm: no route to %v: %w", dst, err)
	}
	defer c.Close()
	return c.LocalAddr().(*net.UDPAddr).AddrPort().Addr().Unmap(), nil
}

// DeviceFor returns the configured software device (verbs.Devices, as
// GOVERBS_DEVICES lists them) bound to addr, with ok false when none is; a program
// then opens one on addr with verbs.OpenSoft. In builds with the ibverbs tag, when no
// software device has addr, it returns the kernel RDMA device (rxe0, mlx5_0) that the
// kernel's rdma_cm binds addr to, as rdma_bind_addr does.
func DeviceFor(addr netip.Addr) (info verbs.DeviceInfo, ok bool) {
	list, err := verbs.Devices()
	if err != nil {
		return verbs.DeviceInfo{}, false
	}
	for _, d := range list {
		if sc, soft := d.SoftConfig(); soft && sc.Addr.Unmap() == addr.Unmap() {
			return d, true
		}
	}
	return kernelDeviceFor(addr)
}

package tool

import (
	"fmt"
	"net"
	"net/netip"
	"os"

	"github.com/goverbs/goverbs/cm"
	"github.com/goverbs/goverbs/cmd/goverbs/internal/control"
)

// CloseAgent stops the CM; with --stats it first prints the agent's MAD counters, in
// the layout of the device's line.
func CloseAgent(a *cm.Agent, stats bool) {
	if control.StatsWanted(stats) {
		c := a.Counters()
		fmt.Fprintf(os.Stderr, "cm %v mads_sent %d mads_rcvd %d mads_dropped %d send_err %d\n",
			a.Addr(), c.MADsSent, c.MADsReceived, c.MADsDropped, c.SendErrors)
	}
	a.Close()
}

// ResolveHost is rping's get_addr: an IP address or a host name.
func ResolveHost(s string) (netip.Addr, error) {
	if a, err := netip.ParseAddr(s); err == nil {
		return a.Unmap(), nil
	}
	ips, err := net.LookupIP(s)
	if err != nil || len(ips) == 0 {
		return netip.Addr{}, fmt.Errorf("getaddrinfo failed (%v) - invalid hostname or IP address", err)
	}
	a, _ := netip.AddrFromSlice(ips[0])
	return a.Unmap(), nil
}

package simnet

import (
	"net/netip"
	"testing"

	"github.com/goverbs/goverbs/netio"
	"github.com/goverbs/goverbs/netio/netiotest"
)

// TestConformance: a simnet Conn without faults keeps the contract every netio backend
// keeps, over IPv4 and IPv6 addresses.
func TestConformance(t *testing.T) {
	for _, tc := range []struct{ name, a, b string }{
		{"ipv4", "10.0.0.1:4791", "10.0.0.2:4791"},
		{"ipv6", "[fd00::1]:4791", "[fd00::2]:4791"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			netiotest.TestConn(t, func(t *testing.T) (netio.Conn, netio.Conn) {
				n := New(1, Faults{})
				t.Cleanup(n.Close)
				return mustListen(t, n, netip.MustParseAddrPort(tc.a)), mustListen(t, n, netip.MustParseAddrPort(tc.b))
			})
		})
	}
}

//go:build linux

package afxdp_test

import (
	"net/netip"
	"testing"

	"github.com/goverbs/goverbs/netio"
	"github.com/goverbs/goverbs/netio/afxdp"
	"github.com/goverbs/goverbs/netio/netiotest"
	"github.com/goverbs/goverbs/verbs"
	"github.com/goverbs/goverbs/verbs/verbstest"
)

// TestLocalPathConformance runs netio's suite between an AF_XDP Conn and a UDP backend
// Conn on another address of the same host (namespace A): no NIC carries their
// datagrams, the AF_XDP Conn's local path does, both ways, in both receive modes.
func TestLocalPathConformance(t *testing.T) {
	for _, busy := range []bool{false, true} {
		t.Run(map[bool]string{false: "default", true: "busypoll"}[busy], func(t *testing.T) {
			n := newTestNet(t, 3000)
			n.ip(t, "-n", n.A, "addr", "add", "192.0.2.3/24", "dev", ifA)
			netiotest.TestConn(t, func(t *testing.T) (netio.Conn, netio.Conn) {
				x := open(t, n.A, ifA, n.AddrA, side{xdp: true, busy: busy})
				if !x.(*afxdp.Conn).Info().LocalPath {
					t.Fatalf("no local path: %v", x.(*afxdp.Conn).Info().LocalPathErr)
				}
				return x, open(t, n.A, ifA, netip.MustParseAddr("192.0.2.3"), side{busy: busy})
			})
		})
	}
}

// TestLifecycleOnXDP runs verbstest's lifecycle suite on a device on AF_XDP: among its
// objects an RC QP connected to itself, whose packets to the device's own address take
// the local path.
func TestLifecycleOnXDP(t *testing.T) {
	n := newTestNet(t, 1500)
	verbstest.TestLifecycle(t, verbstest.Env{Open: func(t testing.TB) *verbs.Device {
		return openHost(t, n.A, ifA, n.AddrA, true, false).dev
	}})
}

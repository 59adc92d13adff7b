//go:build linux

package afxdp_test

import (
	"os"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/goverbs/goverbs/internal/netnstest"
)

// testNet is two network namespaces joined by a veth pair, made for one test and
// deleted after it (netnstest.Veth): side A holds va (192.0.2.1, 2001:db8::1), side B vb
// (192.0.2.2, 2001:db8::2).
type testNet struct {
	*netnstest.Veth
}

const (
	ifA = "va"
	ifB = "vb"
)

// newTestNet makes the namespaces and the veth pair with the given MTU and one queue
// each way. It skips the test without root, without ip (iproute2), or on a kernel
// without AF_XDP.
func newTestNet(t testing.TB, mtu int) *testNet {
	t.Helper()
	return newTestNetQueues(t, mtu, 1)
}

// newTestNetQueues is newTestNet with queues receive queues on va and as many transmit
// queues on vb: B's flows spread over A's queues by their hash. (One by default: the
// socket binds queue 0, and veth would otherwise spread flows over as many queues as
// the machine has cores.)
func newTestNetQueues(t testing.TB, mtu, queues int) *testNet {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root: network namespaces, XDP")
	}
	fd, err := unix.Socket(unix.AF_XDP, unix.SOCK_RAW|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Skipf("no AF_XDP sockets here: %v", err)
	}
	unix.Close(fd)
	return &testNet{netnstest.NewVeth(t, netnstest.VethOptions{Prefix: "gvxdp", MTU: mtu, Queues: queues, IPv6: true})}
}

// ip runs ip(8) with args and fails the test if it fails.
func (n *testNet) ip(t testing.TB, args ...string) string {
	t.Helper()
	return netnstest.IP(t, args...)
}

// in runs f inside namespace ns (netnstest.In).
func in(t testing.TB, ns string, f func()) {
	t.Helper()
	netnstest.In(t, ns, f)
}

// waitIPv6 waits until both ends have their link-local address: the kernel brings IPv6
// up on a new veth only once it has seen the carrier, and sends no neighbour
// solicitation (nor answers one) before.
func (n *testNet) waitIPv6(t testing.TB) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for _, end := range [][2]string{{n.A, ifA}, {n.B, ifB}} {
		for {
			out := n.ip(t, "-n", end[0], "-6", "addr", "show", "dev", end[1], "scope", "link")
			if strings.Contains(out, "fe80") && !strings.Contains(out, "tentative") {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("no IPv6 link-local address on %s: %s", end[1], out)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
}

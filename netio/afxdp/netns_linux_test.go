//go:build linux

package afxdp_test

import (
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/goverbs/goverbs/internal/netnstest"
)

// testNet is two network namespaces joined by a veth pair, made for one test and
// deleted after it (the veth pair goes with them): side A holds va (192.0.2.1,
// 2001:db8::1), side B vb (192.0.2.2, 2001:db8::2). Addresses are from the
// documentation ranges (RFC 5737, RFC 3849) and exist only inside the namespaces, so no
// test traffic leaves them.
type testNet struct {
	A, B         string // namespace names
	AddrA, AddrB netip.Addr
	V6A, V6B     netip.Addr
}

const (
	ifA = "va"
	ifB = "vb"
)

var netSeq atomic.Int32

// newTestNet makes the namespaces and the veth pair with the given MTU and one queue
// each way. It skips the test without root, without ip (iproute2), or on a kernel
// without AF_XDP.
func newTestNet(t testing.TB, mtu int) *testNet {
	t.Helper()
	return newTestNetQueues(t, mtu, 1)
}

// newTestNetQueues is newTestNet with queues receive queues on va and as many transmit
// queues on vb: B's flows spread over A's queues by their hash.
func newTestNetQueues(t testing.TB, mtu, queues int) *testNet {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root: network namespaces, XDP")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		t.Skip("needs ip (iproute2)")
	}
	fd, err := unix.Socket(unix.AF_XDP, unix.SOCK_RAW|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Skipf("no AF_XDP sockets here: %v", err)
	}
	unix.Close(fd)
	seq := netSeq.Add(1)
	n := &testNet{
		A: fmt.Sprintf("gvxdp-a-%d-%d", os.Getpid(), seq), B: fmt.Sprintf("gvxdp-b-%d-%d", os.Getpid(), seq),
		AddrA: netip.MustParseAddr("192.0.2.1"), AddrB: netip.MustParseAddr("192.0.2.2"),
		V6A: netip.MustParseAddr("2001:db8::1"), V6B: netip.MustParseAddr("2001:db8::2"),
	}
	t.Cleanup(func() {
		exec.Command("ip", "netns", "del", n.A).Run()
		exec.Command("ip", "netns", "del", n.B).Run()
	})
	m, q := fmt.Sprint(mtu), fmt.Sprint(queues)
	for _, args := range [][]string{
		{"netns", "add", n.A},
		{"netns", "add", n.B},
		// The queues asked for (one by default: the socket binds queue 0, and veth would
		// otherwise spread flows over as many queues as the machine has cores).
		{"-n", n.A, "link", "add", ifA, "mtu", m, "numtxqueues", q, "numrxqueues", q, "type", "veth",
			"peer", "name", ifB, "mtu", m, "numtxqueues", q, "numrxqueues", q, "netns", n.B},
		// No duplicate address detection on the link-local addresses either: the kernel
		// sends no neighbour solicitation before it has a usable link-local source.
		{"netns", "exec", n.A, "sh", "-c", "echo 0 > /proc/sys/net/ipv6/conf/" + ifA + "/accept_dad"},
		{"netns", "exec", n.B, "sh", "-c", "echo 0 > /proc/sys/net/ipv6/conf/" + ifB + "/accept_dad"},
		{"-n", n.A, "addr", "add", "192.0.2.1/24", "dev", ifA},
		{"-n", n.B, "addr", "add", "192.0.2.2/24", "dev", ifB},
		{"-n", n.A, "addr", "add", "2001:db8::1/64", "dev", ifA, "nodad"},
		{"-n", n.B, "addr", "add", "2001:db8::2/64", "dev", ifB, "nodad"},
		{"-n", n.A, "link", "set", "lo", "up"},
		{"-n", n.B, "link", "set", "lo", "up"},
		{"-n", n.A, "link", "set", ifA, "up"},
		{"-n", n.B, "link", "set", ifB, "up"},
	} {
		n.ip(t, args...)
	}
	return n
}

// ip runs ip(8) with args and fails the test if it fails.
func (n *testNet) ip(t testing.TB, args ...string) string {
	t.Helper()
	out, err := exec.Command("ip", args...).CombinedOutput()
	if err != nil {
		t.Fatalf("ip %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
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

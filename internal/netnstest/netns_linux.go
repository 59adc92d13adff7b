// Package netnstest is test help for tests that make network namespaces (root only):
// NewVeth makes two joined by a veth pair (with ip(8)) and deletes them after the test,
// and In runs code inside one. netio/afxdp's tests, internal/engine's veth tests, netio's
// same-host test across namespaces and goverbs devinfo's AF_XDP test use it.
package netnstest

import (
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"

	"golang.org/x/sys/unix"
)

// In runs f on an OS thread of its own that has entered the named namespace ns
// (/run/netns/ns, as `ip netns add` makes it), so that every socket, link and netlink
// socket f makes belongs to ns; the thread leaves ns after f (or dies with its goroutine
// if it cannot). What f makes keeps its namespace when used from other goroutines later.
func In(t testing.TB, ns string, f func()) {
	t.Helper()
	var ferr error
	done := make(chan struct{})
	go func() {
		defer close(done)
		runtime.LockOSThread()
		orig, err := unix.Open("/proc/thread-self/ns/net", unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			ferr = err
			return
		}
		defer unix.Close(orig)
		target, err := unix.Open("/run/netns/"+ns, unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			ferr = err
			return
		}
		defer unix.Close(target)
		if err := unix.Setns(target, unix.CLONE_NEWNET); err != nil {
			ferr = fmt.Errorf("setns %s: %w", ns, err)
			return
		}
		f()
		if unix.Setns(orig, unix.CLONE_NEWNET) == nil {
			runtime.UnlockOSThread() // else the thread ends with this goroutine
		}
	}()
	<-done
	if ferr != nil {
		t.Fatal(ferr)
	}
}

// Veth is two network namespaces joined by a veth pair, made for one test by NewVeth and
// deleted after it (the pair goes with them): namespace A holds IfA with AddrA (and V6A),
// B holds IfB with AddrB (and V6B). The addresses are from the documentation ranges
// (RFC 5737's TEST-NET-1, RFC 3849) and exist only inside the namespaces, so no test
// traffic leaves them.
type Veth struct {
	A, B         string // the namespaces' names
	IfA, IfB     string // the veth ends: va in A, vb in B
	AddrA, AddrB netip.Addr
	V6A, V6B     netip.Addr // invalid without VethOptions.IPv6
}

// VethOptions shape a Veth.
type VethOptions struct {
	// Prefix starts the namespaces' names (the process id and a sequence number follow),
	// so that a leftover says which tests made it.
	Prefix string
	// MTU of both ends; 0 leaves the kernel's (1500).
	MTU int
	// Queues is the number of transmit and receive queues of each end; 0 leaves the
	// kernel's choice (as many as the machine has cores, over which veth spreads flows).
	Queues int
	// IPv6 adds 2001:db8::1/64 and ::2/64, with duplicate address detection off on the
	// ends, so that the addresses are usable at once.
	IPv6 bool
}

var vethSeq atomic.Int32

// NewVeth makes the namespaces and the veth pair, addresses them and brings them (and
// each namespace's lo) up. It skips the test without root or without ip(8) (iproute2),
// and fails it if ip fails.
func NewVeth(t testing.TB, o VethOptions) *Veth {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root: network namespaces")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		t.Skip("needs ip (iproute2)")
	}
	if o.Prefix == "" {
		o.Prefix = "gvtest"
	}
	seq := vethSeq.Add(1)
	v := &Veth{
		A: fmt.Sprintf("%s-a-%d-%d", o.Prefix, os.Getpid(), seq), B: fmt.Sprintf("%s-b-%d-%d", o.Prefix, os.Getpid(), seq),
		IfA: "va", IfB: "vb",
		AddrA: netip.MustParseAddr("192.0.2.1"), AddrB: netip.MustParseAddr("192.0.2.2"),
	}
	t.Cleanup(func() {
		exec.Command("ip", "netns", "del", v.A).Run()
		exec.Command("ip", "netns", "del", v.B).Run()
	})
	IP(t, "netns", "add", v.A)
	IP(t, "netns", "add", v.B)
	var end []string
	if o.MTU > 0 {
		end = append(end, "mtu", fmt.Sprint(o.MTU))
	}
	if o.Queues > 0 {
		q := fmt.Sprint(o.Queues)
		end = append(end, "numtxqueues", q, "numrxqueues", q)
	}
	add := append([]string{"-n", v.A, "link", "add", v.IfA}, end...)
	add = append(add, "type", "veth", "peer", "name", v.IfB)
	add = append(add, end...)
	IP(t, append(add, "netns", v.B)...)
	if o.IPv6 {
		v.V6A, v.V6B = netip.MustParseAddr("2001:db8::1"), netip.MustParseAddr("2001:db8::2")
		// No duplicate address detection on the link-local addresses either: the kernel
		// sends no neighbour solicitation before it has a usable link-local source.
		IP(t, "netns", "exec", v.A, "sh", "-c", "echo 0 > /proc/sys/net/ipv6/conf/"+v.IfA+"/accept_dad")
		IP(t, "netns", "exec", v.B, "sh", "-c", "echo 0 > /proc/sys/net/ipv6/conf/"+v.IfB+"/accept_dad")
	}
	IP(t, "-n", v.A, "addr", "add", v.AddrA.String()+"/24", "dev", v.IfA)
	IP(t, "-n", v.B, "addr", "add", v.AddrB.String()+"/24", "dev", v.IfB)
	if o.IPv6 {
		IP(t, "-n", v.A, "addr", "add", v.V6A.String()+"/64", "dev", v.IfA, "nodad")
		IP(t, "-n", v.B, "addr", "add", v.V6B.String()+"/64", "dev", v.IfB, "nodad")
	}
	for _, ns := range [][2]string{{v.A, v.IfA}, {v.B, v.IfB}} {
		IP(t, "-n", ns[0], "link", "set", "lo", "up")
		IP(t, "-n", ns[0], "link", "set", ns[1], "up")
	}
	return v
}

// IP runs ip(8) with args and returns its output; it fails the test if ip fails.
func IP(t testing.TB, args ...string) string {
	t.Helper()
	out, err := exec.Command("ip", args...).CombinedOutput()
	if err != nil {
		t.Fatalf("ip %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

//go:build linux

package afxdp_test

import (
	"bufio"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/goverbs/goverbs/netio/afxdp"
)

// killChildEnv names the namespace a child process of TestNothingAttachedAfterKill
// attaches in.
const killChildEnv = "GOVERBS_AFXDP_KILL_CHILD_NS"

// TestNothingAttachedAfterKill runs a child process that opens a Conn (attaching the
// program through a BPF link) and then kills it with SIGKILL: no Close runs, and the
// kernel must still leave nothing attached to the interface. It also checks that Close
// detaches in this process.
func TestNothingAttachedAfterKill(t *testing.T) {
	if ns := os.Getenv(killChildEnv); ns != "" {
		killChild(t, ns)
		return
	}
	n := newTestNet(t, 1500)
	attached := func() bool { return strings.Contains(n.ip(t, "-n", n.A, "-d", "link", "show", ifA), "prog/xdp") }

	x := openXDP(t, n, n.AddrA, afxdp.Options{})
	if !attached() {
		t.Fatal("Open attached no program")
	}
	x.Close()
	if attached() {
		t.Fatal("a program is still attached after Close")
	}

	cmd := exec.Command(os.Args[0], "-test.run=^TestNothingAttachedAfterKill$", "-test.count=1")
	cmd.Env = append(os.Environ(), killChildEnv+"="+n.A)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil || !strings.HasPrefix(line, "attached") {
		t.Fatalf("child: %q, %v", line, err)
	}
	if !attached() {
		t.Fatal("the child attached no program")
	}
	cmd.Process.Signal(os.Kill)
	cmd.Wait()
	// The link is released with the last descriptor, when the kernel tears the process
	// down; that may finish a moment after wait(2) returns.
	deadline := time.Now().Add(3 * time.Second)
	for attached() {
		if time.Now().After(deadline) {
			t.Fatalf("a program is still attached after the process was killed:\n%s", n.ip(t, "-n", n.A, "-d", "link", "show", ifA))
		}
		time.Sleep(10 * time.Millisecond)
	}
	// And the queue is free again for a new socket.
	openXDP(t, n, n.AddrA, afxdp.Options{}).Close()
}

// killChild is the child's side: attach, say so, and wait to be killed.
func killChild(t *testing.T, ns string) {
	var err error
	in(t, ns, func() {
		_, err = afxdp.Open(afxdp.Options{Addr: netip.AddrPortFrom(netip.MustParseAddr("192.0.2.1"), 4791), Interface: ifA})
	})
	if err != nil {
		fmt.Println("error:", err)
		os.Exit(1)
	}
	fmt.Println("attached")
	time.Sleep(time.Minute)
	os.Exit(1)
}

//go:build linux

package main

import (
	"context"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/goverbs/goverbs/internal/netnstest"
	"golang.org/x/sys/unix"
)

// goverbs devinfo names the mode of a device configured on AF_XDP: over a veth pair
// (copy mode; veth has native XDP), read by binding the socket for a moment when no tool
// runs the device, and from the running tool's counters while one does.
func TestDevinfoNamesXDPMode(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: network namespaces, XDP")
	}
	fd, err := unix.Socket(unix.AF_XDP, unix.SOCK_RAW|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Skipf("no AF_XDP sockets here: %v", err)
	}
	unix.Close(fd)
	v := netnstest.NewVeth(t, netnstest.VethOptions{Prefix: "gvdev", MTU: 1500, Queues: 1})
	env := append(os.Environ(), "GOVERBS_DEVICES=xdp0="+v.AddrA.String()+"@xdp:"+v.IfA+"/0")
	devinfo := func() string {
		t.Helper()
		cmd := exec.Command("ip", "netns", "exec", v.A, binary, "devinfo", "-d", "xdp0")
		cmd.Env = env
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("devinfo: %v\n%s", err, out)
		}
		return string(out)
	}
	const want = "backend:\t\t\tAF_XDP va queue 0: copy mode, native XDP"
	if out := devinfo(); !strings.Contains(out, want+"\n") {
		t.Fatalf("devinfo without a tool running:\n%s\nwant a line %q", out, want)
	}
	// A server waiting for its client holds the device.
	ctx, cancel := context.WithCancel(context.Background())
	srv := exec.CommandContext(ctx, "ip", "netns", "exec", v.A, binary, "rc_pingpong", "-d", "xdp0", "-g", "0")
	srv.Env = env
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cancel(); srv.Wait() }) // before the namespaces go
	deadline := time.Now().Add(10 * time.Second)
	for {
		out := devinfo()
		if strings.Contains(out, want+" (the running tool's)\n") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("devinfo beside a running tool:\n%s", out)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

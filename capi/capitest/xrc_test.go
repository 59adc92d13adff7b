package capitest

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/goverbs/goverbs/internal/softtest"
)

// TestXSRQPingpong runs Debian's unmodified ibv_xsrq_pingpong (rdma-core's XRC example)
// on the library: a server with -c 2 and two client processes, so that XRC_SEND QPs of
// two processes deliver into the server's one XRC SRQ, and the same with -e (completion
// events). Each process has its own software device on its own loopback address.
func TestXSRQPingpong(t *testing.T) {
	lib := library(t)
	xsrqPingpong(t, func(dev string) []string { return onGoverbs(lib, dev, newAddr()) })
}

// xsrqPingpong runs ibv_xsrq_pingpong's server with -c 2 and two clients, without and
// with -e; env gives the environment of the process using device dev (s0 the server's,
// c0 and c1 the clients').
func xsrqPingpong(t *testing.T, env func(dev string) []string) {
	bin := program(t, "ibv_xsrq_pingpong")
	for _, extra := range [][]string{nil, {"-e"}} {
		t.Run(strings.Join(append([]string{"ibv_xsrq_pingpong"}, extra...), " "), func(t *testing.T) {
			port := freePort(t)
			args := append([]string{bin, "-g", "0", "-p", strconv.Itoa(port), "-n", "50"}, extra...)
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			start := func(p proc) (*exec.Cmd, *strings.Builder) {
				c := exec.CommandContext(ctx, p.argv[0], p.argv[1:]...)
				c.Env = append(os.Environ(), p.env...)
				var out strings.Builder
				c.Stdout, c.Stderr = &out, &out
				if err := c.Start(); err != nil {
					t.Fatal(err)
				}
				return c, &out
			}
			srv, srvOut := start(proc{slices.Concat(args, []string{"-d", "s0", "-c", "2"}), env("s0")})
			for !listening(port) {
				if ctx.Err() != nil {
					t.Fatalf("server never listened:\n%s", srvOut)
				}
				time.Sleep(20 * time.Millisecond)
			}
			var wg sync.WaitGroup
			outs := make([]*strings.Builder, 2)
			errs := make([]error, 2)
			for i := range 2 {
				dev := "c" + strconv.Itoa(i)
				c, out := start(proc{slices.Concat(args, []string{"-d", dev, "127.0.0.1"}), env(dev)})
				outs[i] = out
				wg.Add(1)
				go func() { defer wg.Done(); errs[i] = c.Wait() }()
			}
			wg.Wait()
			srvErr := srv.Wait()
			if srvErr != nil || errs[0] != nil || errs[1] != nil {
				t.Fatalf("server %v:\n%s\nclient 0 %v:\n%s\nclient 1 %v:\n%s", srvErr, srvOut, errs[0], outs[0], errs[1], outs[1])
			}
			for who, out := range map[string]string{"server": srvOut.String(), "client 0": outs[0].String(), "client 1": outs[1].String()} {
				if !strings.Contains(out, "success") || !strings.Contains(out, "SRQN") {
					t.Errorf("%s did not finish:\n%s", who, out)
				}
			}
			if n := strings.Count(srvOut.String(), "remote:"); n != 2 {
				t.Errorf("server saw %d clients, want 2:\n%s", n, srvOut)
			}
		})
	}
}

// TestXSRQAgainstGoTools runs Debian's ibv_xsrq_pingpong on the library against goverbs'
// pure-Go xsrq_pingpong, each as server and as client, with multi-packet messages; the
// Go side records its packets, and the capture must be XRC a strict receiver accepts:
// every ICRC verifies, tshark dissects every packet as InfiniBand with an XRC opcode and
// nothing malformed, and the 4 bytes after the BTH of each request are the XRCETH naming
// the peer's SRQ. Both programs are kept on the kernel's UDP path (GOVERBS_SHM=0), as an
// interop run between two hosts would be: the capture is of what crossed the socket.
func TestXSRQAgainstGoTools(t *testing.T) {
	t.Setenv("GOVERBS_SHM", "0")
	lib := library(t)
	cbin := program(t, "ibv_xsrq_pingpong")
	gobin := goverbsTool(t)
	for _, goServer := range []bool{true, false} {
		name := map[bool]string{true: "Go server, C client", false: "C server, Go client"}[goServer]
		t.Run(name, func(t *testing.T) {
			port, sa, ca := freePort(t), newAddr(), newAddr()
			p := strconv.Itoa(port)
			capture := filepath.Join(t.TempDir(), "xsrq.pcap")
			common := []string{"-g", "0", "-p", p, "-n", "20", "-s", "3000"}
			var srv, cli proc
			if goServer {
				srv = proc{argv: slices.Concat([]string{gobin, "xsrq_pingpong", "--bind", sa, "--pcap", capture}, common)}
				cli = proc{slices.Concat([]string{cbin, "-d", "c0"}, common, []string{sa}), onGoverbs(lib, "c0", ca)}
			} else {
				srv = proc{slices.Concat([]string{cbin, "-d", "s0"}, common), onGoverbs(lib, "s0", sa)}
				cli = proc{argv: slices.Concat([]string{gobin, "xsrq_pingpong", "--bind", ca, "--pcap", capture}, common, []string{sa})}
			}
			srvOut, cliOut := runPair(t, port, srv, cli)
			for who, out := range map[string]string{"server": srvOut, "client": cliOut} {
				if !strings.Contains(out, "success") || strings.Count(out, "SRQN") != 2 {
					t.Errorf("%s:\n%s", who, out)
				}
			}
			if c := softtest.CheckXRCCapture(t, capture); len(c.SRQNs) < 20 {
				t.Errorf("only %d requests captured", len(c.SRQNs))
			}
		})
	}
}

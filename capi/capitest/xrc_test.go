package capitest

import (
	"context"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestXSRQPingpong runs Debian's unmodified ibv_xsrq_pingpong (rdma-core's XRC example)
// on the library: a server with -c 2 and two client processes, so that XRC_SEND QPs of
// two processes deliver into the server's one XRC SRQ, and the same with -e (completion
// events). Each process has its own software device on its own loopback address.
func TestXSRQPingpong(t *testing.T) {
	lib := library(t)
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
			srv, srvOut := start(proc{slices.Concat(args, []string{"-d", "s0", "-c", "2"}), onGoverbs(lib, "s0", newAddr())})
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
				c, out := start(proc{slices.Concat(args, []string{"-d", "c" + strconv.Itoa(i), "127.0.0.1"}),
					onGoverbs(lib, "c"+strconv.Itoa(i), newAddr())})
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

package examples_test

import (
	"bufio"
	"context"
	"net/netip"
	"os/exec"
	"strings"
	"testing"
)

// exampleServer is an example's server process, started on its own device's address.
type exampleServer struct {
	cmd  *exec.Cmd
	addr string           // what it says it listens on: host:port, the port its own
	log  *strings.Builder // its stderr
}

// startServer runs the server binary with -addr a:0 and waits for the line every
// example's server prints first, "listening on rdma host:port". The process is killed
// when the test ends, unless it has been waited for.
func startServer(t *testing.T, ctx context.Context, bin string, a netip.Addr) *exampleServer {
	t.Helper()
	s := &exampleServer{cmd: exec.CommandContext(ctx, bin, "-addr", a.String()+":0"), log: new(strings.Builder)}
	stdout, err := s.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	s.cmd.Stderr = s.log
	if err := s.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.cmd.Process.Kill() })
	sc := bufio.NewScanner(stdout)
	if !sc.Scan() || !strings.HasPrefix(sc.Text(), "listening on rdma "+a.String()+":") {
		s.cmd.Process.Kill()
		s.cmd.Wait()
		t.Fatalf("server says %q\n%s", sc.Text(), s.log.String())
	}
	s.addr = strings.TrimPrefix(sc.Text(), "listening on rdma ")
	return s
}

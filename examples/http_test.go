package examples_test

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/goverbs/goverbs/internal/testaddr"
)

// TestHTTP builds examples/http's server and client and runs them as two processes on
// their own devices: net/http's unchanged server and client over rdmanet, a greeting
// and then a 64 MiB body whose SHA-256 the client checks against the server's, and a
// graceful shutdown on SIGTERM.
func TestHTTP(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	bin := t.TempDir()
	build := exec.CommandContext(ctx, "go", "build", "-o", bin+string(filepath.Separator), "./http/server", "./http/client")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building examples/http: %v\n%s", err, out)
	}

	a, b := testaddr.Free(t, testaddr.Examples), testaddr.Free(t, testaddr.Examples)
	srv := startServer(t, ctx, filepath.Join(bin, "server"), a)
	addr := srv.addr

	const size = 64 << 20
	out, err := exec.CommandContext(ctx, filepath.Join(bin, "client"),
		"-addr", addr, "-local", b.String(), "-size", fmt.Sprint(size)).CombinedOutput()
	if err != nil {
		t.Fatalf("client: %v\n%s\nserver:\n%s", err, out, srv.log.String())
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	if len(lines) != 2 || !strings.HasPrefix(lines[0], "hello over RDMA, "+b.String()+":") ||
		!strings.HasPrefix(lines[1], fmt.Sprintf("%d bytes, SHA-256 matches, ", size)) {
		t.Errorf("client printed:\n%s", out)
	}

	if err := srv.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := srv.cmd.Wait(); err != nil {
		t.Fatalf("server after SIGTERM: %v\n%s", err, srv.log.String())
	}
	if got := srv.log.String(); !strings.Contains(got, fmt.Sprintf("server: sent %d bytes to %s:", size, b)) ||
		!strings.HasSuffix(got, "server: stopped\n") {
		t.Errorf("server's log:\n%s", got)
	}
}

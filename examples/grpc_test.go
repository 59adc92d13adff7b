// Package examples_test runs the examples that live in modules of their own, which
// the main module's `go test ./...` does not reach: it builds each with the go
// command in its directory, as a user would.
package examples_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/goverbs/goverbs/internal/testaddr"
)

// TestGRPC builds examples/grpc (its own module, so that this one does not depend on
// gRPC) and runs its server and client as two processes on their own devices: the
// unchanged gRPC stack greets over rdmanet, several calls on one connection, and the
// server stops gracefully on SIGTERM.
func TestGRPC(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	goCmd := func(args ...string) *exec.Cmd {
		cmd := exec.CommandContext(ctx, "go", args...)
		cmd.Dir = "grpc"
		// The example module's own go.sum decides its dependencies; a GOFLAGS meant for
		// this module (-mod=vendor, say) is not for it.
		cmd.Env = append(os.Environ(), "GOFLAGS=-buildvcs=false")
		return cmd
	}
	// Fetching gRPC needs the module proxy (or a filled module cache): without it
	// there is nothing to test here, which is not the example's failure.
	if out, err := goCmd("mod", "download").CombinedOutput(); err != nil {
		t.Skipf("the gRPC example's modules could not be downloaded: %v\n%s", err, out)
	}
	bin := t.TempDir()
	if out, err := goCmd("build", "-o", bin+string(filepath.Separator), "./server", "./client").CombinedOutput(); err != nil {
		t.Fatalf("building examples/grpc: %v\n%s", err, out)
	}

	a, b := testaddr.Free(t, testaddr.Examples), testaddr.Free(t, testaddr.Examples)
	srv := startServer(t, ctx, filepath.Join(bin, "server"), a)
	addr := srv.addr

	out, err := exec.CommandContext(ctx, filepath.Join(bin, "client"),
		"-addr", addr, "-local", b.String(), "-name", "goverbs", "-n", "3").CombinedOutput()
	if err != nil {
		t.Fatalf("client: %v\n%s", err, out)
	}
	if got, want := string(out), strings.Repeat("greeting: Hello, goverbs\n", 3); got != want {
		t.Errorf("client printed %q, want %q", got, want)
	}

	start := time.Now()
	if err := srv.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := srv.cmd.Wait(); err != nil {
		t.Fatalf("server after SIGTERM: %v\n%s", err, srv.log.String())
	}
	// GracefulStop ends at once when every client has gone; a client whose close never
	// arrived is given 5 s (gRPC's ping timeout before its second GOAWAY).
	if took := time.Since(start); took > 3*time.Second {
		t.Errorf("server took %v to stop after SIGTERM: the client's close did not reach it", took)
	}
	if got := srv.log.String(); strings.Count(got, `server: greeting "goverbs"`) != 3 || !strings.HasSuffix(got, "server: stopped\n") {
		t.Errorf("server's log:\n%s", got)
	}
}

package main

import (
	"bufio"
	"context"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/goverbs/goverbs/internal/testaddr"
)

// TestEcho builds the pair and runs them as two processes on their own addresses: the
// client's message comes back upper-cased, and each side saw what the other put in the
// CM's private data.
func TestEcho(t *testing.T) {
	dir := t.TempDir()
	for _, p := range []string{"server", "client"} {
		if out, err := exec.Command("go", "build", "-o", filepath.Join(dir, p), "../"+p).CombinedOutput(); err != nil {
			t.Fatalf("go build %s: %v\n%s", p, err, out)
		}
	}
	a, b := testaddr.Free(t, testaddr.Examples).String(), testaddr.Free(t, testaddr.Examples).String()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	srv := exec.CommandContext(ctx, filepath.Join(dir, "server"), "-a", a)
	stdout, _ := srv.StdoutPipe()
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(stdout)
	if !sc.Scan() || !strings.HasPrefix(sc.Text(), "listening on "+a+":7471") {
		t.Fatalf("server says %q", sc.Text())
	}
	out, err := exec.CommandContext(ctx, filepath.Join(dir, "client"), "-a", a, "-I", b).CombinedOutput()
	if err != nil {
		t.Fatalf("client: %v\n%s", err, out)
	}
	var srvOut strings.Builder
	for sc.Scan() {
		srvOut.WriteString(sc.Text() + "\n")
	}
	if err := srv.Wait(); err != nil {
		t.Fatalf("server: %v\n%s", err, srvOut.String())
	}
	for _, want := range []string{`which says "welcome"`, `server wrote back "HELLO THROUGH THE CONNECTION MANAGER"`} {
		if !strings.Contains(string(out), want) {
			t.Errorf("client output lacks %q:\n%s", want, out)
		}
	}
	for _, want := range []string{"request from " + b + ":", `received "hello through the connection manager"`, "client disconnected"} {
		if !strings.Contains(srvOut.String(), want) {
			t.Errorf("server output lacks %q:\n%s", want, srvOut.String())
		}
	}
}

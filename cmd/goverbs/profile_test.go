package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestCPUProfile: GOVERBS_CPUPROFILE leaves a pprof CPU profile (gzip-compressed) of the
// command behind, which bench/pgo.sh merges into default.pgo; a path that cannot be
// written costs one line on stderr, not the command.
func TestCPUProfile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "cpu.prof")
	cmd := exec.Command(binary, "write_bw", "--loopback", "--bind", loopbackBind(t), "-n", "2000")
	cmd.Env = append(os.Environ(), "GOVERBS_CPUPROFILE="+path)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("write_bw: %v\n%s", err, out)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(b) < 64 || !bytes.HasPrefix(b, []byte{0x1f, 0x8b}) {
		t.Fatalf("profile of %d bytes, not gzip: % x", len(b), b[:min(len(b), 16)])
	}
	if out, err := exec.Command("go", "tool", "pprof", "-top", binary, path).CombinedOutput(); err != nil || !strings.Contains(string(out), "Type: cpu") {
		t.Fatalf("go tool pprof: %v\n%s", err, out)
	}

	cmd = exec.Command(binary, "version")
	cmd.Env = append(os.Environ(), "GOVERBS_CPUPROFILE="+filepath.Join(dir, "missing", "cpu.prof"))
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("version with an unwritable profile path: %v (%s)", err, stderr.String())
	}
	if !strings.Contains(stderr.String(), "GOVERBS_CPUPROFILE") {
		t.Fatalf("no word of the profile that could not start: %q", stderr.String())
	}
}

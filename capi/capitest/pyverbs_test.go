package capitest

import (
	"compress/gzip"
	"context"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// pyverbsTests is where Debian's python3-pyverbs installs rdma-core's tests.
const pyverbsTests = "/usr/share/doc/rdma-core/tests"

// pyverbsModules are rdma-core's generic test modules (those for a vendor's device,
// mlx5 and efa, are left out of the copy).
var pyverbsModules = []string{"test_device", "test_pd", "test_mr", "test_cq", "test_cq_events",
	"test_cqex", "test_qp", "test_qpex", "test_addr", "test_atomic", "test_odp"}

// TestPyverbs runs rdma-core's pyverbs tests (python3-pyverbs) on the library: every
// test must pass or skip; the counts are logged (go test -v) for docs/guide/capi.md.
func TestPyverbs(t *testing.T) {
	lib := library(t)
	checkPyverbsXRC(t, runPyverbs(t, onGoverbs(lib, "sw0", newAddr())))
}

// checkPyverbsXRC: the device claims XRC (IBV_DEVICE_XRC), so pyverbs' XRC tests run, all
// but the one that needs ODP's XRC capabilities, which it does not claim, and pass.
func checkPyverbsXRC(t *testing.T, out string) {
	t.Helper()
	xrc := regexp.MustCompile(`(?m)^(test_\w*xrc\w*) .* \.\.\. (.*)$`).FindAllStringSubmatch(out, -1)
	if len(xrc) < 6 {
		t.Errorf("pyverbs ran %d XRC tests, want at least 6:\n%s", len(xrc), out)
	}
	for _, m := range xrc {
		t.Logf("pyverbs %s: %s", m[1], m[2])
		if m[2] != "ok" && !(strings.Contains(m[1], "odp") && strings.HasPrefix(m[2], "skipped")) {
			t.Errorf("pyverbs %s: %s", m[1], m[2])
		}
	}
}

// TestAttachPyverbs runs the same pyverbs tests on the C flavour, attached to a daemon:
// every test passes or skips, and the XRC tests run and pass as on the Go flavour.
func TestAttachPyverbs(t *testing.T) {
	lib := attachLibrary(t)
	a := newAddr()
	d := serve(t, lib, "sw0="+a)
	checkPyverbsXRC(t, runPyverbs(t, d.attached(lib, "sw0", a)))
}

// runPyverbs runs pyverbs' generic modules with env added (device sw0) and returns
// their verbose output; it fails the test unless every test passed or skipped.
func runPyverbs(t *testing.T, env []string) string {
	t.Helper()
	if _, err := os.Stat(filepath.Join(pyverbsTests, "run_tests.py")); err != nil {
		t.Skip("python3-pyverbs not installed")
	}
	dir := filepath.Join(t.TempDir(), "tests")
	copyPyverbsTests(t, dir)
	args := []string{"run_tests.py", "-v", "--dev", "sw0", "--gid", "0"}
	for _, m := range pyverbsModules {
		args = append(args, "tests."+m)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	c := exec.CommandContext(ctx, "/usr/bin/python3", args...)
	c.Dir = dir
	c.Env = append(os.Environ(), env...)
	b, err := c.CombinedOutput()
	out := string(b)
	ran := regexp.MustCompile(`(?m)^Ran (\d+) tests`).FindStringSubmatch(out)
	skipped := regexp.MustCompile(`(?m)^OK \(skipped=(\d+)\)$`).FindStringSubmatch(out)
	if err != nil || ran == nil || skipped == nil {
		t.Fatalf("pyverbs: %v\n%s", err, out)
	}
	t.Logf("pyverbs: %s tests, %s skipped, none failed", ran[1], skipped[1])
	return out
}

// copyPyverbsTests copies the installed tests into dir, gunzipping the compressed
// ones and leaving out the vendor-specific modules (test_mlx5_*, test_efa*, CUDA).
func copyPyverbsTests(t *testing.T, dir string) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	ents, err := os.ReadDir(pyverbsTests)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		name := e.Name()
		base := strings.TrimSuffix(name, ".gz")
		if e.IsDir() || strings.HasPrefix(base, "test_mlx5") || strings.HasPrefix(base, "test_efa") ||
			strings.HasPrefix(base, "test_cuda") {
			continue
		}
		in, err := os.Open(filepath.Join(pyverbsTests, name))
		if err != nil {
			t.Fatal(err)
		}
		var r io.Reader = in
		if base != name {
			if r, err = gzip.NewReader(in); err != nil {
				t.Fatal(err)
			}
		}
		b, err := io.ReadAll(r)
		in.Close()
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, base), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

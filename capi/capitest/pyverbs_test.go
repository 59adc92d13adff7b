package capitest

import (
	"compress/gzip"
	"context"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
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
		// unittest prints its failures' tracebacks after the run, below "=====" lines;
		// they go first, since a CI log keeps only the head of a long message.
		failures := ""
		if i := strings.Index(out, "\n======"); i >= 0 {
			failures = out[i+1:]
		}
		t.Fatalf("pyverbs: %v\nfailures:\n%s\nthe whole output:\n%s", err, failures, out)
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

// TestAttachPyverbsRdmacm runs pyverbs' rdmacm tests (tests.test_rdmacm) on the C
// flavour and its librdmacm. Those tests take the address to connect to from the
// device's network interface: the first name in /sys/class/infiniband/DEV/device/net/,
// then that interface's first address (`ip -j addr show IFACE`); without the directory
// every one of them skips ("doesn't have net interface"). A software device has no
// sysfs entry, and a kernel one cannot be made without root, so the test gives them one
// in namespaces of their own (pyverbsNS): user, network and mount (unshare -Urnm, which
// an unprivileged user may create, and root too, as CI runs), where a tmpfs over sysfs's
// /sys/class/infiniband (or over /sys/class, its entries bound back, where the kernel has
// no infiniband class) names the loopback interface as sw0's, and sw0 is a device of a
// daemon on 127.0.0.1, lo's first address, in the namespace's own network: nothing
// else holds port 4791 there. Every test must pass.
func TestAttachPyverbsRdmacm(t *testing.T) {
	lib := attachLibrary(t)
	if _, err := os.Stat(filepath.Join(pyverbsTests, "test_rdmacm.py")); err != nil {
		t.Skip("python3-pyverbs (with its rdmacm tests) not installed")
	}
	if _, err := os.Stat(filepath.Join(lib, "librdmacm.so.1")); err != nil {
		t.Skip("librdmacm.so.1 was not built (no <rdma/rdma_cma.h>: apt-get install librdmacm-dev)")
	}
	if out, err := exec.Command("unshare", "-Urnm", "--pid", "--fork", "ip", "link", "set", "lo", "up").CombinedOutput(); err != nil {
		t.Skipf("no user, network and mount namespaces here (unshare -Urnm: %v %s)", err, out)
	}
	top := t.TempDir()
	dir := filepath.Join(top, "tests")
	copyPyverbsTests(t, dir)
	script := filepath.Join(top, "ns.sh")
	if err := os.WriteFile(script, []byte(pyverbsNS), 0o755); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	// A PID namespace too, whose processes end with its first (--kill-child: when the
	// test kills unshare): no daemon outlives a timeout.
	c := exec.CommandContext(ctx, "unshare", "-Urnm", "--pid", "--fork", "--kill-child", "sh", script)
	c.Env = append(os.Environ(), "GV_LIB="+lib, "GV_TESTS="+dir, "GV_MODULES=tests.test_rdmacm")
	b, err := c.CombinedOutput()
	out := string(b)
	ran := regexp.MustCompile(`(?m)^Ran (\d+) tests`).FindStringSubmatch(out)
	if err != nil || ran == nil || !regexp.MustCompile(`(?m)^OK$`).MatchString(out) {
		t.Fatalf("pyverbs rdmacm: %v\n%s", err, out)
	}
	if n, _ := strconv.Atoi(ran[1]); n < 10 {
		t.Fatalf("pyverbs ran %s rdmacm tests, want at least 10:\n%s", ran[1], out)
	}
	t.Logf("pyverbs rdmacm: %s tests, all passed", ran[1])
}

// pyverbsNS runs in the namespaces (TestAttachPyverbsRdmacm): lo up, sw0's sysfs entry
// naming it, a daemon serving sw0 on 127.0.0.1, then pyverbs' modules GV_MODULES from
// GV_TESTS on the libraries in GV_LIB.
const pyverbsNS = `set -e
ip link set lo up
if [ -d /sys/class/infiniband ]; then
	mount -t tmpfs goverbs /sys/class/infiniband
else
	keep=$(mktemp -d)
	mount --rbind /sys/class "$keep"
	mount -t tmpfs goverbs /sys/class
	for e in "$keep"/*; do
		n=$(basename "$e")
		mkdir "/sys/class/$n"
		mount --rbind "$e" "/sys/class/$n"
	done
	mkdir /sys/class/infiniband
fi
mkdir -p /sys/class/infiniband/sw0/device/net/lo
export XDG_RUNTIME_DIR=$(mktemp -d)
"$GV_LIB/goverbs" serve sw0=127.0.0.1 >"$XDG_RUNTIME_DIR/serve.log" 2>&1 &
daemon=$!
trap 'kill $daemon' EXIT
i=0
until grep -q '^serving ' "$XDG_RUNTIME_DIR/serve.log"; do
	i=$((i + 1))
	if [ $i -gt 200 ]; then
		cat "$XDG_RUNTIME_DIR/serve.log"
		exit 1
	fi
	sleep 0.05
done
cd "$GV_TESTS"
LD_LIBRARY_PATH="$GV_LIB" GOVERBS_DEVICES=sw0=127.0.0.1 GOVERBS_NO_AUTOSTART=1 \
	/usr/bin/python3 run_tests.py -v --dev sw0 --gid 0 $GV_MODULES
`

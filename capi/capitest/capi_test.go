// Package capitest runs unmodified C programs on goverbs' libibverbs.so.1 (package capi):
// Debian's rdma-core examples and perftest, a C program of ours, and the C library
// against goverbs' pure-Go tools. It builds the library with capi/build.sh and skips when
// a C compiler, rdma-core's headers (libibverbs-dev) or the programs are missing.
package capitest

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

var (
	buildOnce sync.Once
	libDir    string // holds libibverbs.so.1 once built
	buildErr  error
	skipWhy   string
	tmpRoot   string
)

func TestMain(m *testing.M) {
	code := m.Run()
	if tmpRoot != "" {
		os.RemoveAll(tmpRoot)
	}
	os.Exit(code)
}

// library builds libibverbs.so.1 once per test binary and returns its directory.
func library(t testing.TB) string {
	t.Helper()
	buildOnce.Do(func() {
		if runtime.GOOS != "linux" {
			skipWhy = "the C library is built for Linux"
			return
		}
		if skipWhy = cMissing(); skipWhy != "" {
			return
		}
		if buildErr = makeTmpRoot(); buildErr != nil {
			return
		}
		libDir = filepath.Join(tmpRoot, "lib")
		out, err := exec.Command("bash", "../build.sh", libDir).CombinedOutput()
		if err != nil {
			buildErr = fmt.Errorf("capi/build.sh: %v\n%s", err, out)
		}
	})
	if skipWhy != "" {
		t.Skip(skipWhy)
	}
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return libDir
}

// cMissing says why C programs cannot be built here ("" when they can): a C compiler
// and rdma-core's headers are needed.
func cMissing() string {
	cc := os.Getenv("CC")
	if cc == "" {
		cc = "cc"
	}
	pre := exec.Command(cc, "-E", "-x", "c", "-")
	pre.Stdin = strings.NewReader("#include <infiniband/verbs.h>\n")
	if err := pre.Run(); err != nil {
		return "no C compiler with rdma-core's headers (apt-get install gcc libibverbs-dev)"
	}
	return ""
}

var tmpRootOnce sync.Once

// makeTmpRoot makes the directory the built libraries go in (removed by TestMain).
func makeTmpRoot() error {
	var err error
	tmpRootOnce.Do(func() { tmpRoot, err = os.MkdirTemp("", "goverbs-capi") })
	return err
}

// program returns the path of an installed program, or skips.
func program(t testing.TB, name string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		t.Skipf("%s not installed (Debian: apt-get install ibverbs-utils perftest)", name)
	}
	return p
}

// addrSeq hands out loopback addresses for software devices, in a /24 of 127/8 chosen
// by the process ID, so that tests running at once on one machine do not collide on
// port 4791.
var addrSeq atomic.Uint32

func newAddr() string {
	pid := os.Getpid()
	return fmt.Sprintf("127.%d.%d.%d", 100+pid%100, pid/100%250, 1+addrSeq.Add(1)%250)
}

// freePort returns a TCP port nobody listens on now.
func freePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// listening reports whether some socket listens on TCP port, from /proc/net/tcp{,6}:
// a probing connection would be taken as the client by the one-shot servers.
func listening(port int) bool { return inProcNet(port, "0A", "/proc/net/tcp", "/proc/net/tcp6") }

// udpBound reports whether some UDP socket is bound to port (state 07, unconnected), from
// /proc/net/udp{,6}: a datagram rsocket's server, which says nothing until a client comes.
func udpBound(port int) bool { return inProcNet(port, "07", "/proc/net/udp", "/proc/net/udp6") }

// inProcNet reports whether one of files lists a socket on local port in state.
func inProcNet(port int, state string, files ...string) bool {
	want := fmt.Sprintf(":%04X", port)
	for _, f := range files {
		fh, err := os.Open(f)
		if err != nil {
			continue
		}
		sc := bufio.NewScanner(fh)
		for sc.Scan() {
			fields := strings.Fields(sc.Text())
			if len(fields) > 3 && strings.HasSuffix(fields[1], want) && fields[3] == state {
				fh.Close()
				return true
			}
		}
		fh.Close()
	}
	return false
}

// proc is one side of a two-process run.
type proc struct {
	argv []string
	env  []string // added to the environment
}

// runPair starts server, waits until it listens on port, runs client, and returns both
// outputs; it fails the test unless both exit 0.
func runPair(t *testing.T, port int, server, client proc) (string, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := func(p proc) (*exec.Cmd, *strings.Builder) {
		c := exec.CommandContext(ctx, p.argv[0], p.argv[1:]...)
		c.Env = append(os.Environ(), p.env...)
		var out strings.Builder
		c.Stdout, c.Stderr = &out, &out
		return c, &out
	}
	srv, srvOut := cmd(server)
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- srv.Wait() }()
	for !listening(port) {
		select {
		case err := <-done:
			t.Fatalf("server %v exited before listening (%v):\n%s", server.argv, err, srvOut)
		case <-ctx.Done():
			t.Fatalf("server %v never listened on %d", server.argv, port)
		case <-time.After(20 * time.Millisecond):
		}
	}
	cli, cliOut := cmd(client)
	cliErr := cli.Run()
	srvErr := <-done
	if cliErr != nil || srvErr != nil {
		t.Fatalf("client %v: %v\n%s\nserver %v: %v\n%s", client.argv, cliErr, cliOut, server.argv, srvErr, srvOut)
	}
	return srvOut.String(), cliOut.String()
}

// onGoverbs is the environment of a C program on the built library with one device.
func onGoverbs(lib, dev, addr string) []string {
	return []string{"LD_LIBRARY_PATH=" + lib, "GOVERBS_DEVICES=" + dev + "=" + addr}
}

func TestDevicesAndDevinfo(t *testing.T) {
	lib := library(t)
	a, b := newAddr(), newAddr()
	env := []string{"LD_LIBRARY_PATH=" + lib, "GOVERBS_DEVICES=gva=" + a + ",gvb=" + b}
	run := func(argv ...string) string {
		c := exec.Command(argv[0], argv[1:]...)
		c.Env = append(os.Environ(), env...)
		out, err := c.CombinedOutput()
		if err != nil {
			t.Fatalf("%v: %v\n%s", argv, err, out)
		}
		return string(out)
	}
	out := run(program(t, "ibv_devices"))
	for _, re := range []string{`(?m)^\s+gva\s+[0-9a-f]{16}$`, `(?m)^\s+gvb\s+[0-9a-f]{16}$`} {
		if !regexp.MustCompile(re).MatchString(out) {
			t.Errorf("ibv_devices output lacks %s:\n%s", re, out)
		}
	}
	out = run(program(t, "ibv_devinfo"), "-v")
	for _, want := range []string{
		"hca_id:\tgva", "hca_id:\tgvb", "vendor_id:\t\t\t0xffffff", "board_id:\t\t\tgoverbs software RoCEv2\n",
		"PORT_ACTIVE (4)",
		"link_layer:\t\tEthernet", "active_mtu:\t\t4096 (5)",
		"GID[  0]:\t\t::ffff:" + a + ", RoCE v2", "GID[  0]:\t\t::ffff:" + b + ", RoCE v2",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("ibv_devinfo -v output lacks %q:\n%s", want, out)
		}
	}
}

var itersLine = regexp.MustCompile(`(?m)^(\d+) iters in [\d.]+ seconds = [\d.]+ usec/iter$`)

func checkIters(t *testing.T, who, out string, iters int) {
	t.Helper()
	m := itersLine.FindStringSubmatch(out)
	if m == nil || m[1] != strconv.Itoa(iters) || !strings.Contains(out, " bytes in ") {
		t.Errorf("%s: no transfer lines for %d iterations:\n%s", who, iters, out)
	}
}

// TestPingpongs runs Debian's unmodified rdma-core examples, server and client as two
// processes, each with its own software device on its own loopback address: polling and
// with -e (completion events), and rc_pingpong with -N (the ibv_wr_* send API).
func TestPingpongs(t *testing.T) {
	lib := library(t)
	const iters = 100
	var runs [][]string
	for _, name := range []string{"ibv_rc_pingpong", "ibv_uc_pingpong", "ibv_ud_pingpong", "ibv_srq_pingpong"} {
		runs = append(runs, []string{name}, []string{name, "-e"})
	}
	runs = append(runs, []string{"ibv_rc_pingpong", "-N"})
	for _, run := range runs {
		name := run[0]
		t.Run(strings.Join(run, " "), func(t *testing.T) {
			bin := program(t, name)
			port := freePort(t)
			args := append([]string{bin, "-g", "0", "-p", strconv.Itoa(port), "-n", strconv.Itoa(iters)}, run[1:]...)
			if name == "ibv_ud_pingpong" {
				args = append(args, "-s", "1024") // a UD message fits the path MTU
			}
			sa, ca := newAddr(), newAddr()
			srv, cli := runPair(t, port,
				proc{slices.Concat(args, []string{"-d", "s0"}), onGoverbs(lib, "s0", sa)},
				proc{slices.Concat(args, []string{"-d", "c0", "127.0.0.1"}), onGoverbs(lib, "c0", ca)})
			checkIters(t, "server", srv, iters)
			checkIters(t, "client", cli, iters)
			if !strings.Contains(cli, "GID ::ffff:"+sa) || !strings.Contains(srv, "GID ::ffff:"+ca) {
				t.Errorf("the sides did not exchange their GIDs:\n%s\n%s", srv, cli)
			}
		})
	}
}

// perftestRow is a result row: the message size and iterations, then figures.
var perftestRow = regexp.MustCompile(`(?m)^\s*(\d+)\s+(\d+)\s+[\d.]+\s+[\d.]+`)

// TestPerftest runs Debian's perftest tools, server and client as two processes.
func TestPerftest(t *testing.T) {
	lib := library(t)
	const iters = 200
	for _, name := range []string{"ib_write_bw", "ib_read_bw", "ib_send_bw", "ib_atomic_bw",
		"ib_write_lat", "ib_read_lat", "ib_send_lat", "ib_atomic_lat"} {
		t.Run(name, func(t *testing.T) {
			bin := program(t, name)
			port := freePort(t)
			args := []string{bin, "-x", "0", "-p", strconv.Itoa(port), "-n", strconv.Itoa(iters)}
			_, cli := runPair(t, port,
				proc{slices.Concat(args, []string{"-d", "s0"}), onGoverbs(lib, "s0", newAddr())},
				proc{slices.Concat(args, []string{"-d", "c0", "127.0.0.1"}), onGoverbs(lib, "c0", newAddr())})
			m := perftestRow.FindStringSubmatch(cli[strings.Index(cli, "#bytes")+1:])
			if !strings.Contains(cli, "#bytes") || m == nil || m[2] != strconv.Itoa(iters) {
				t.Errorf("no result row of %d iterations:\n%s", iters, cli)
			}
		})
	}
}

// cProgram compiles one of testdata's C programs against the built library.
func cProgram(t testing.TB, lib, name string, cflags ...string) string {
	t.Helper()
	cc := os.Getenv("CC")
	if cc == "" {
		cc = "cc"
	}
	bin := filepath.Join(t.TempDir(), name)
	args := append([]string{"-O2", "-Wall", "-Werror"}, cflags...)
	args = append(args, "-o", bin, filepath.Join("testdata", name+".c"), filepath.Join(lib, "libibverbs.so.1"))
	out, err := exec.Command(cc, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("compile %s: %v\n%s", name, err, out)
	}
	return bin
}

// TestABIChecks runs testdata/abi_check.c: errno on bad arguments, traffic in the
// program's own memory, pollable channel and async fds, and fork.
func TestABIChecks(t *testing.T) {
	lib := library(t)
	bin := cProgram(t, lib, "abi_check")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c := exec.CommandContext(ctx, bin)
	c.Env = append(os.Environ(), onGoverbs(lib, "t0", newAddr())...)
	var stderr strings.Builder
	c.Stderr = &stderr
	out, err := c.Output()
	if err != nil || string(out) != "ok\n" {
		t.Fatalf("abi_check: %v\n%s%s", err, out, &stderr)
	}
	// The forked child says why it refused.
	if !strings.Contains(stderr.String(), "not available in a child process after fork()") {
		t.Errorf("the child after fork did not say why verbs failed:\n%s", &stderr)
	}
}

// goverbsTool builds goverbs' own command.
func goverbsTool(t testing.TB) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "goverbs")
	out, err := exec.Command("go", "build", "-o", bin, "../../cmd/goverbs").CombinedOutput()
	if err != nil {
		t.Fatalf("build cmd/goverbs: %v\n%s", err, out)
	}
	return bin
}

// TestAgainstGoTools runs Debian's C ping-pongs on the library against goverbs' pure-Go
// ones, each as server and as client, with each side's default sizes: a default that
// differs (ud_pingpong's is 1024, whatever its help says) shows as a local length error.
// Both sides are kept on the kernel's UDP path (GOVERBS_SHM=0), as between two hosts:
// the packets of the two builds are what meet (TestSameHostByDefault runs the pair
// through the rings).
func TestAgainstGoTools(t *testing.T) {
	t.Setenv("GOVERBS_SHM", "0")
	lib := library(t)
	gobin := goverbsTool(t)
	const iters = 100
	n := strconv.Itoa(iters)
	for _, kind := range []string{"rc", "ud"} {
		cbin := program(t, "ibv_"+kind+"_pingpong")
		tool := kind + "_pingpong"
		t.Run(kind+"/Go server, C client", func(t *testing.T) {
			port, sa, ca := freePort(t), newAddr(), newAddr()
			p := strconv.Itoa(port)
			srv, cli := runPair(t, port,
				proc{argv: []string{gobin, tool, "--bind", sa, "-g", "0", "-p", p, "-n", n}},
				proc{[]string{cbin, "-d", "c0", "-g", "0", "-p", p, "-n", n, sa}, onGoverbs(lib, "c0", ca)})
			checkIters(t, "Go server", srv, iters)
			checkIters(t, "C client", cli, iters)
		})
		t.Run(kind+"/C server, Go client", func(t *testing.T) {
			port, sa, ca := freePort(t), newAddr(), newAddr()
			p := strconv.Itoa(port)
			srv, cli := runPair(t, port,
				proc{[]string{cbin, "-d", "s0", "-g", "0", "-p", p, "-n", n}, onGoverbs(lib, "s0", sa)},
				proc{argv: []string{gobin, tool, "--bind", ca, "-g", "0", "-p", p, "-n", n, sa}})
			checkIters(t, "C server", srv, iters)
			checkIters(t, "Go client", cli, iters)
		})
	}
}

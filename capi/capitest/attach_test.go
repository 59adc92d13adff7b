package capitest

// The C flavour of the library (capi/build.sh -attach): the same C ABI with every
// device attached to a goverbs serve daemon, and no Go runtime in the program. These
// tests start a daemon on loopback addresses (or let the library start one) and run
// Debian's programs, a C program of ours and goverbs' Go tools against it.

import (
	"bufio"
	"context"
	"debug/elf"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

var (
	attachOnce sync.Once
	attachDir  string // holds the C flavour's libibverbs.so.1 and goverbs
	attachErr  error
	attachSkip string
)

// attachLibrary builds the C flavour once per test binary and returns its directory.
func attachLibrary(t testing.TB) string {
	t.Helper()
	attachOnce.Do(func() {
		if attachSkip = cMissing(); attachSkip != "" {
			return
		}
		if attachErr = makeTmpRoot(); attachErr != nil {
			return
		}
		attachDir = filepath.Join(tmpRoot, "attach")
		out, err := exec.Command("bash", "../build.sh", "-attach", attachDir).CombinedOutput()
		if err != nil {
			attachErr = fmt.Errorf("capi/build.sh -attach: %v\n%s", err, out)
		}
	})
	if attachSkip != "" {
		t.Skip(attachSkip)
	}
	if attachErr != nil {
		t.Fatal(attachErr)
	}
	return attachDir
}

// daemon is a goverbs serve the test started.
type daemon struct {
	cmd    *exec.Cmd
	exited chan struct{} // closed when the daemon has exited (and been waited for)
	rt     string        // its XDG_RUNTIME_DIR
}

// runtimeDir is a short private XDG_RUNTIME_DIR (unix socket paths are short).
func runtimeDir(t testing.TB) string {
	t.Helper()
	d, err := os.MkdirTemp("", "gva")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(d) })
	return d
}

// serve starts `goverbs serve devs` (NAME=ADDR,...) with its own runtime directory and
// waits until it serves every device.
func serve(t testing.TB, lib, devs string) *daemon {
	t.Helper()
	d := &daemon{rt: runtimeDir(t), exited: make(chan struct{})}
	d.cmd = exec.Command(filepath.Join(lib, "goverbs"), "serve", devs)
	d.cmd.Env = append(os.Environ(), "XDG_RUNTIME_DIR="+d.rt)
	d.cmd.Stderr = os.Stderr
	out, err := d.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := d.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	want := strings.Count(devs, "=")
	sc := bufio.NewScanner(out)
	for n := 0; n < want; n++ {
		if !sc.Scan() || !strings.HasPrefix(sc.Text(), "serving ") {
			d.cmd.Process.Kill()
			d.cmd.Wait()
			t.Fatalf("goverbs serve %s did not start: %q", devs, sc.Text())
		}
	}
	go func() {
		for sc.Scan() {
		}
		d.cmd.Wait()
		close(d.exited)
	}()
	t.Cleanup(d.stop)
	return d
}

func (d *daemon) stop() {
	select {
	case <-d.exited:
		return
	default:
	}
	d.cmd.Process.Signal(os.Interrupt)
	select {
	case <-d.exited:
	case <-time.After(5 * time.Second):
		d.cmd.Process.Kill()
		<-d.exited
	}
}

// attached is the environment of a C program on the C flavour with device dev on addr,
// served by d (never a daemon the library starts).
func (d *daemon) attached(lib, dev, addr string) []string {
	return []string{"LD_LIBRARY_PATH=" + lib, "XDG_RUNTIME_DIR=" + d.rt, "GOVERBS_DEVICES=" + dev + "=" + addr,
		"GOVERBS_NO_AUTOSTART=1"}
}

// TestAttachNoGoRuntime: the C flavour is plain C: no Go sections, no Go or cgo symbols,
// and it needs nothing but libc.
func TestAttachNoGoRuntime(t *testing.T) {
	lib := filepath.Join(attachLibrary(t), "libibverbs.so.1")
	f, err := elf.Open(lib)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, s := range f.Sections {
		if strings.HasPrefix(s.Name, ".go.") || s.Name == ".gopclntab" || s.Name == ".gosymtab" || s.Name == ".note.go.buildid" {
			t.Errorf("section %s: Go in the C flavour", s.Name)
		}
	}
	syms, err := f.DynamicSymbols()
	if err != nil {
		t.Fatal(err)
	}
	exported := 0
	for _, s := range syms {
		if strings.HasPrefix(s.Name, "runtime.") || strings.Contains(s.Name, "cgo") || strings.HasPrefix(s.Name, "go.") ||
			strings.HasPrefix(s.Name, "gv_") || strings.HasPrefix(s.Name, "gva_") {
			t.Errorf("dynamic symbol %s: Go or an internal name in the C flavour", s.Name)
		}
		if strings.HasPrefix(s.Name, "ibv_") && s.Section != elf.SHN_UNDEF {
			exported++
		}
	}
	if exported < 100 {
		t.Errorf("%d ibv_* symbols exported, want the whole API", exported)
	}
	libs, _ := f.ImportedLibraries()
	for _, l := range libs {
		if !strings.HasPrefix(l, "libc.so") && !strings.HasPrefix(l, "libpthread") && !strings.HasPrefix(l, "libdl") {
			t.Errorf("the C flavour needs %s", l)
		}
	}
}

// TestAttachDevinfo: ibv_devices and ibv_devinfo list and describe attached devices, as
// the Go flavour describes the same devices in its process, XRC included.
func TestAttachDevinfo(t *testing.T) {
	lib := attachLibrary(t)
	a, b := newAddr(), newAddr()
	devinfo := func(env ...string) string {
		c := exec.Command(program(t, "ibv_devinfo"), "-v")
		c.Env = append(os.Environ(), env...)
		out, err := c.CombinedOutput()
		if err != nil {
			t.Fatalf("ibv_devinfo -v (%v): %v\n%s", env, err, out)
		}
		return string(out)
	}
	// First the Go flavour, whose devices bind the addresses themselves.
	goOut := devinfo("LD_LIBRARY_PATH="+library(t), "GOVERBS_DEVICES=gva="+a+",gvb="+b)
	d := serve(t, lib, "gva="+a+",gvb="+b)
	out := devinfo("LD_LIBRARY_PATH="+lib, "XDG_RUNTIME_DIR="+d.rt, "GOVERBS_NO_AUTOSTART=1",
		"GOVERBS_DEVICES=gva="+a+",gvb="+b+"@serve")
	for _, want := range []string{"hca_id:\tgva", "hca_id:\tgvb", "PORT_ACTIVE (4)", "link_layer:\t\tEthernet",
		"GID[  0]:\t\t::ffff:" + a + ", RoCE v2", "GID[  0]:\t\t::ffff:" + b + ", RoCE v2"} {
		if !strings.Contains(out, want) {
			t.Errorf("ibv_devinfo -v output lacks %q:\n%s", want, out)
		}
	}
	if !strings.Contains(out, "\t\t\t\t\tXRC\n") {
		t.Errorf("an attached device does not advertise XRC, which the C flavour serves:\n%s", out)
	}
	if stats := devinfo("LD_LIBRARY_PATH="+lib, "XDG_RUNTIME_DIR="+d.rt, "GOVERBS_NO_AUTOSTART=1",
		"GOVERBS_DEVICES=gva="+a, "GOVERBS_STATS=1"); !regexp.MustCompile(`(?m)^link gva/1 sent_pkts \d+ `).MatchString(stats) {
		t.Errorf("GOVERBS_STATS=1: no counters line:\n%s", stats)
	}
	if out != goOut {
		t.Errorf("ibv_devinfo -v differs between the flavours:\nC flavour:\n%s\nGo flavour:\n%s", out, goOut)
	}
}

// TestAttachPingpongs runs Debian's ping-pongs as two processes on two devices of one
// daemon: polling and with completion events (-e).
func TestAttachPingpongs(t *testing.T) {
	lib := attachLibrary(t)
	sa, ca := newAddr(), newAddr()
	d := serve(t, lib, "s0="+sa+",c0="+ca)
	const iters = 100
	runs := [][]string{{"ibv_rc_pingpong"}, {"ibv_rc_pingpong", "-e"}, {"ibv_rc_pingpong", "-N"}, {"ibv_uc_pingpong"},
		// ud_pingpong registers size + 40 bytes (the GRH): pages shared with other data,
		// which a program of one thread may register
		{"ibv_ud_pingpong", "-s", "1024"}, {"ibv_srq_pingpong", "-e"}}
	for _, run := range runs {
		t.Run(strings.Join(run, " "), func(t *testing.T) {
			bin := program(t, run[0])
			port := freePort(t)
			args := append([]string{bin, "-g", "0", "-p", strconv.Itoa(port), "-n", strconv.Itoa(iters)}, run[1:]...)
			srv, cli := runPair(t, port,
				proc{slices.Concat(args, []string{"-d", "s0"}), d.attached(lib, "s0", sa)},
				proc{slices.Concat(args, []string{"-d", "c0", "127.0.0.1"}), d.attached(lib, "c0", ca)})
			checkIters(t, "server", srv, iters)
			checkIters(t, "client", cli, iters)
			if !strings.Contains(cli, "GID ::ffff:"+sa) || !strings.Contains(srv, "GID ::ffff:"+ca) {
				t.Errorf("the sides did not exchange their GIDs:\n%s\n%s", srv, cli)
			}
		})
	}
}

// TestAttachPerftest runs perftest's tools attached, both processes on one device:
// WRITE, READ and SEND with inline data (send_lat's default).
func TestAttachPerftest(t *testing.T) {
	lib := attachLibrary(t)
	a := newAddr()
	d := serve(t, lib, "sw0="+a)
	const iters = 200
	for _, name := range []string{"ib_write_bw", "ib_read_lat", "ib_send_lat"} {
		t.Run(name, func(t *testing.T) {
			bin := program(t, name)
			port := freePort(t)
			args := []string{bin, "-x", "0", "-p", strconv.Itoa(port), "-n", strconv.Itoa(iters), "-d", "sw0"}
			_, cli := runPair(t, port, proc{args, d.attached(lib, "sw0", a)},
				proc{append(args, "127.0.0.1"), d.attached(lib, "sw0", a)})
			m := perftestRow.FindStringSubmatch(cli[strings.Index(cli, "#bytes")+1:])
			if !strings.Contains(cli, "#bytes") || m == nil || m[2] != strconv.Itoa(iters) {
				t.Errorf("no result row of %d iterations:\n%s", iters, cli)
			}
		})
	}
}

// TestAttachAgainstGoTools runs C programs on the C flavour against goverbs' Go tools
// attached to the same daemon (GOVERBS_ATTACH=1).
func TestAttachAgainstGoTools(t *testing.T) {
	lib := attachLibrary(t)
	gobin := filepath.Join(lib, "goverbs")
	sa, ca := newAddr(), newAddr()
	d := serve(t, lib, "s0="+sa+",c0="+ca)
	goEnv := []string{"XDG_RUNTIME_DIR=" + d.rt, "GOVERBS_ATTACH=1"}
	const iters = 100
	n := strconv.Itoa(iters)
	t.Run("rc_pingpong/Go server, C client", func(t *testing.T) {
		port := freePort(t)
		p := strconv.Itoa(port)
		srv, cli := runPair(t, port,
			proc{[]string{gobin, "rc_pingpong", "--bind", sa, "-g", "0", "-p", p, "-n", n}, goEnv},
			proc{[]string{program(t, "ibv_rc_pingpong"), "-d", "c0", "-g", "0", "-p", p, "-n", n, sa}, d.attached(lib, "c0", ca)})
		checkIters(t, "Go server", srv, iters)
		checkIters(t, "C client", cli, iters)
	})
	t.Run("write_bw/C server, Go client", func(t *testing.T) {
		port := freePort(t)
		p := strconv.Itoa(port)
		_, cli := runPair(t, port,
			proc{[]string{program(t, "ib_write_bw"), "-d", "s0", "-x", "0", "-p", p, "-n", "200"}, d.attached(lib, "s0", sa)},
			proc{[]string{gobin, "write_bw", "--bind", ca, "-x", "0", "-p", p, "-n", "200", "127.0.0.1"}, goEnv})
		if !strings.Contains(cli, "#bytes") || !strings.Contains(cli, " 200 ") {
			t.Errorf("no result row:\n%s", cli)
		}
	})
	t.Run("xsrq_pingpong/Go server, C client", func(t *testing.T) {
		port := freePort(t)
		p := strconv.Itoa(port)
		srv, cli := runPair(t, port,
			proc{[]string{gobin, "xsrq_pingpong", "--bind", sa, "-g", "0", "-p", p, "-n", "20", "-s", "3000"}, goEnv},
			proc{[]string{program(t, "ibv_xsrq_pingpong"), "-d", "c0", "-g", "0", "-p", p, "-n", "20", "-s", "3000", sa},
				d.attached(lib, "c0", ca)})
		for who, out := range map[string]string{"Go server": srv, "C client": cli} {
			if !strings.Contains(out, "success") || strings.Count(out, "SRQN") != 2 {
				t.Errorf("%s:\n%s", who, out)
			}
		}
	})
}

// TestAttachABIChecks runs testdata/abi_check.c on the C flavour: errno on bad
// arguments, every RC operation in the program's own (moved) memory, inline sends,
// channels and async events, windows, multicast, and fork(): the parent keeps working
// and the child opens the device anew.
func TestAttachABIChecks(t *testing.T) {
	lib := attachLibrary(t)
	bin := cProgram(t, lib, "abi_check")
	a := newAddr()
	d := serve(t, lib, "t0="+a)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c := exec.CommandContext(ctx, bin, "attached")
	c.Env = append(os.Environ(), d.attached(lib, "t0", a)...)
	var stderr strings.Builder
	c.Stderr = &stderr
	out, err := c.Output()
	if err != nil || string(out) != "ok\n" {
		t.Fatalf("abi_check attached: %v\n%s%s", err, out, &stderr)
	}
}

// TestAttachStackRegistration registers buffers on the stack of the registering call
// (testdata/stack_mr.c, built with -fstack-protector-all), three runs of 300: the pages
// moved onto a memfd hold the call's own frames, whose writes between the copy and the
// mapping were lost before the move ran on a stack of its own.
func TestAttachStackRegistration(t *testing.T) {
	lib := attachLibrary(t)
	bin := cProgram(t, lib, "stack_mr", "-fstack-protector-all")
	a := newAddr()
	d := serve(t, lib, "t0="+a)
	for run := range 3 {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		c := exec.CommandContext(ctx, bin)
		c.Env = append(os.Environ(), d.attached(lib, "t0", a)...)
		out, err := c.CombinedOutput()
		cancel()
		if err != nil || string(out) != "ok\n" {
			t.Fatalf("run %d: %v\n%s", run, err, out)
		}
	}
}

// TestAttachXSRQPingpong runs Debian's ibv_xsrq_pingpong (server -c 2, two clients;
// without and with -e) on the C flavour: every process on one device of a daemon, as
// processes on one node share an HCA, where all three open /tmp/xrc_domain and so share
// one XRC domain (the server sends to a client through any of its send QPs, naming that
// client's SRQ); and the server on a device of its own.
func TestAttachXSRQPingpong(t *testing.T) {
	lib := attachLibrary(t)
	t.Run("one device", func(t *testing.T) {
		a := newAddr()
		d := serve(t, lib, "sw0="+a)
		xsrqPingpong(t, func(dev string) []string { return d.attached(lib, dev, a) })
	})
	t.Run("two devices", func(t *testing.T) {
		sa, ca := newAddr(), newAddr()
		d := serve(t, lib, "s0="+sa+",c0="+ca)
		xsrqPingpong(t, func(dev string) []string {
			if dev == "s0" {
				return d.attached(lib, dev, sa)
			}
			return d.attached(lib, dev, ca)
		})
	})
}

// TestAttachDaemonDeath: a program whose daemon dies gets IBV_EVENT_DEVICE_FATAL, then
// EIO, and does not hang.
func TestAttachDaemonDeath(t *testing.T) {
	lib := attachLibrary(t)
	bin := cProgram(t, lib, "abi_check")
	a := newAddr()
	d := serve(t, lib, "t0="+a)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c := exec.CommandContext(ctx, bin, "fatal")
	c.Env = append(os.Environ(), d.attached(lib, "t0", a)...)
	var stderr strings.Builder
	c.Stderr = &stderr
	out, err := c.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(out)
	if !sc.Scan() || sc.Text() != "ready" {
		c.Wait()
		t.Fatalf("abi_check fatal did not get ready: %q\n%s", sc.Text(), &stderr)
	}
	d.cmd.Process.Kill() // no goodbye: the sockets just close
	var rest strings.Builder
	for sc.Scan() {
		rest.WriteString(sc.Text() + "\n")
	}
	if err := c.Wait(); err != nil || rest.String() != "fatal ok\n" {
		t.Fatalf("abi_check fatal: %v\n%s%s", err, &rest, &stderr)
	}
}

// TestAttachAutostart: with no daemon serving the device, the library starts the
// goverbs beside it, which leaves once its last client is gone.
func TestAttachAutostart(t *testing.T) {
	lib := attachLibrary(t)
	rt := runtimeDir(t)
	a := newAddr()
	env := []string{"LD_LIBRARY_PATH=" + lib, "XDG_RUNTIME_DIR=" + rt, "GOVERBS_DEVICES=sw0=" + a,
		"GOVERBS_SERVE_IDLE=300ms"}
	bin := program(t, "ibv_rc_pingpong")
	port := freePort(t)
	args := []string{bin, "-g", "0", "-p", strconv.Itoa(port), "-n", "50"}
	srv, cli := runPair(t, port, proc{args, env}, proc{append(args, "127.0.0.1"), env})
	checkIters(t, "server", srv, 50)
	checkIters(t, "client", cli, 50)
	sock := filepath.Join(rt, "goverbs", "attach-"+a+".sock")
	deadline := time.Now().Add(10 * time.Second)
	for {
		if _, err := os.Stat(sock); os.IsNotExist(err) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the daemon the library started still serves %s after its clients left", sock)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if _, err := os.Stat(filepath.Join(rt, "goverbs", "serve-"+a+".log")); err != nil {
		t.Errorf("no log of the started daemon: %v", err)
	}

	// With no goverbs to start, opening the device fails and says why.
	c := exec.Command(program(t, "ibv_devinfo"))
	c.Env = append(os.Environ(), "LD_LIBRARY_PATH="+lib, "XDG_RUNTIME_DIR="+rt, "GOVERBS_DEVICES=sw0="+newAddr(),
		"GOVERBS_SERVE="+filepath.Join(rt, "no-such-goverbs"))
	out, err := c.CombinedOutput()
	if err == nil || !strings.Contains(string(out), "no goverbs program to start one") {
		t.Errorf("ibv_devinfo with no daemon and no goverbs: %v, want a failure that says why:\n%s", err, out)
	}
}

//go:build linux

package attach_test

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/goverbs/goverbs/internal/attach/attachtest"
	"github.com/goverbs/goverbs/internal/attach/server"
	"github.com/goverbs/goverbs/verbs"
	"github.com/goverbs/goverbs/verbs/attach"
	"github.com/goverbs/goverbs/verbs/soft"
	"github.com/goverbs/goverbs/verbs/verbstest"
)

// The tests start a daemon in the test process (server.New) on a free address, with a
// runtime directory of their own, and attach to it from the test process or from
// children: the test binary run again with GOVERBS_ATTACH_CHILD set (child below).

func TestMain(m *testing.M) {
	if mode := os.Getenv("GOVERBS_ATTACH_CHILD"); mode != "" {
		os.Exit(child(mode))
	}
	os.Exit(m.Run())
}

// daemon serves one device on a free address of the package's block.
func daemon(t *testing.T) (*server.Server, netip.Addr) { return attachtest.Daemon(t) }

func attachTo(t testing.TB, addr netip.Addr) *verbs.Device {
	t.Helper()
	dev, err := verbs.OpenSoft(verbs.SoftConfig{Name: "sw0", Addr: addr, Attach: true})
	if err != nil {
		t.Fatal(err)
	}
	return dev
}

func TestLifecycleAttached(t *testing.T) {
	_, addr := daemon(t)
	env := verbstest.Env{Open: func(t testing.TB) *verbs.Device { return attachTo(t, addr) }}
	t.Run("Lifecycle", func(t *testing.T) { verbstest.TestLifecycle(t, env) })
	t.Run("CloseBusy", func(t *testing.T) { verbstest.TestCloseBusy(t, env) })
}

// TestLifecycleOwnEngine: the lifecycle suite on a client running its own engine.
func TestLifecycleOwnEngine(t *testing.T) {
	t.Setenv(attach.EnvOwnEngine, "1")
	TestLifecycleAttached(t)
}

func TestDeviceListedAndOpened(t *testing.T) {
	_, addr := daemon(t)
	t.Setenv(soft.EnvDevices, "sw9="+addr.String()+"@serve")
	list, err := verbs.Devices()
	if err != nil {
		t.Fatal(err)
	}
	var found bool
	for _, d := range list {
		if d.Name == "sw9" {
			found = true
			if d.Provider != "attach" {
				t.Errorf("sw9 listed by %q, want attach", d.Provider)
			}
		}
	}
	if !found {
		t.Fatalf("sw9 not listed: %+v", list)
	}
	dev, err := verbs.Open("sw9")
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Close()
	gid, err := dev.QueryGID(1, 0)
	if err != nil || gid.Addr() != addr {
		t.Fatalf("GID %v (%v), want %v", gid, err, addr)
	}
}

// TestDaemonGoneIsDeviceFatal: a client sees its daemon's end as the device's fatal
// event, and its calls fail rather than hang.
func TestDaemonGoneIsDeviceFatal(t *testing.T) {
	srv, addr := daemon(t)
	dev := attachTo(t, addr)
	defer dev.Close()
	pd, err := dev.AllocPD()
	if err != nil {
		t.Fatal(err)
	}
	srv.Close()
	for fatal := false; !fatal; {
		select {
		case ev := <-dev.Events():
			fatal = ev.Type == verbs.EventDeviceFatal // a port event may come first
		case <-time.After(5 * time.Second):
			t.Fatal("no DEVICE_FATAL after the daemon closed")
		}
	}
	// Through the daemon's engine the call finds the daemon gone; a client running its
	// own engine stopped it at the fatal event, since its socket's place in the
	// daemon's group is no longer steered.
	if _, err := pd.RegMR(make([]byte, 4096), verbs.AccessLocalWrite); !errors.Is(err, verbs.ErrUnavailable) && !errors.Is(err, verbs.ErrClosed) {
		t.Fatalf("RegMR after the daemon's end: %v, want ErrUnavailable (or ErrClosed, own engine)", err)
	}
}

// kid is a child process attached to the daemon.
type kid struct {
	cmd  *exec.Cmd
	in   io.WriteCloser
	out  *bufio.Reader
	line string // its first line: "qpn N rkey R addr A"
}

func startKid(t *testing.T, addr netip.Addr, mode string, iters int) *kid {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "GOVERBS_ATTACH_CHILD="+mode, "ATTACH_ADDR="+addr.String(), "ATTACH_ITERS="+strconv.Itoa(iters))
	cmd.Stderr = os.Stderr
	in, _ := cmd.StdinPipe()
	outp, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	k := &kid{cmd: cmd, in: in, out: bufio.NewReader(outp)}
	t.Cleanup(func() { k.cmd.Process.Kill(); k.cmd.Wait() })
	return k
}

func (k *kid) readLine(t *testing.T, within time.Duration) string {
	t.Helper()
	ch := make(chan string, 1)
	go func() {
		l, err := k.out.ReadString('\n')
		if err != nil {
			l = "EOF " + err.Error()
		}
		ch <- strings.TrimSpace(l)
	}()
	select {
	case l := <-ch:
		return l
	case <-time.After(within):
		t.Fatalf("child %d said nothing in %v", k.cmd.Process.Pid, within)
		return ""
	}
}

// pairKids starts two children per pair and tells each its peer's QP.
func pairKids(t *testing.T, addr netip.Addr, pairs int, modeA, modeB string, iters int) [][2]*kid {
	t.Helper()
	out := make([][2]*kid, pairs)
	for i := range out {
		out[i] = [2]*kid{startKid(t, addr, modeA, iters), startKid(t, addr, modeB, iters)}
	}
	for _, p := range out {
		for _, k := range p {
			k.qpnLine(t)
		}
		introduce(p)
	}
	return out
}

// qpnLine reads the child's first line, its QP ("qpn ..."), into k.line.
func (k *kid) qpnLine(t *testing.T) {
	t.Helper()
	if k.line = k.readLine(t, 20*time.Second); !strings.HasPrefix(k.line, "qpn ") {
		t.Fatalf("child: %q", k.line)
	}
}

// introduce tells each child of a pair its peer's QP.
func introduce(p [2]*kid) {
	fmt.Fprintln(p[0].in, p[1].line)
	fmt.Fprintln(p[1].in, p[0].line)
}

// waitOK waits for every child's "ok", then lets them all go (a ping-pong child stays
// until its stdin closes, so that no peer is left retransmitting into a closed QP).
func waitOK(t *testing.T, ps [][2]*kid) {
	t.Helper()
	for _, p := range ps {
		for _, k := range p {
			if l := k.readLine(t, 30*time.Second); l != "ok" {
				t.Fatalf("child %d: %q", k.cmd.Process.Pid, l)
			}
		}
	}
	for _, p := range ps {
		for _, k := range p {
			k.in.Close()
		}
	}
}

func testPingPongs(t *testing.T, pairs int) {
	_, addr := daemon(t)
	waitOK(t, pairKids(t, addr, pairs, "ping", "pong", 300))
}

// Two, then eight, processes on one device address, each pair ping-ponging over RC
// with its own peer at once.
func TestTwoProcesses(t *testing.T)   { testPingPongs(t, 1) }
func TestEightProcesses(t *testing.T) { testPingPongs(t, 4) }

// TestKilledProcess: one process is killed while its peer streams WRITEs to it; the
// daemon tears its QP down, the peer's retries run out, and the other pair's
// ping-pong goes on unaffected.
func TestKilledProcess(t *testing.T) {
	_, addr := daemon(t)
	stream := pairKids(t, addr, 1, "writer", "sink", 0)[0]
	pp := pairKids(t, addr, 1, "ping", "pong", 2000)[0]
	time.Sleep(100 * time.Millisecond)
	stream[1].cmd.Process.Kill()
	if l := stream[0].readLine(t, 20*time.Second); !strings.HasPrefix(l, "peer gone") {
		t.Fatalf("writer: %q, want its QP to fail with retries exhausted", l)
	}
	waitOK(t, [][2]*kid{pp})
}

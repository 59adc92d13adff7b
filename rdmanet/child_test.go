package rdmanet

import (
	"bufio"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// The tests that need a peer in another process (one that exits, or is killed) run
// this test binary again as that peer: TestMain sees childEnv and runs the role it
// names instead of the tests. A role reads its parameters from the environment,
// reports on stdout, and its exit status says whether it went as planned.
const childEnv = "RDMANET_TEST_CHILD"

var childRoles = map[string]func() error{
	"write-close-exit": childWriteCloseExit,
	"soak":             childSoak,
}

func TestMain(m *testing.M) {
	if name := os.Getenv(childEnv); name != "" {
		role := childRoles[name]
		if role == nil {
			fmt.Fprintf(os.Stderr, "no child role %q\n", name)
			os.Exit(2)
		}
		if err := role(); err != nil {
			fmt.Fprintf(os.Stderr, "child %s: %v\n", name, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// child is a peer process running a role; its stdout is read line by line, its
// stderr kept for the test's messages.
type child struct {
	cmd    *exec.Cmd
	lines  *bufio.Scanner
	stderr strings.Builder
	exited chan struct{} // closed when the process has exited and err is set
	err    error
}

// startChild runs role in a new process with env (KEY=value) added. The test's
// cleanup kills it if it is still running.
func startChild(t *testing.T, role string, env ...string) *child {
	t.Helper()
	ch := &child{cmd: exec.Command(os.Args[0], "-test.run=^$"), exited: make(chan struct{})}
	ch.cmd.Env = append(append(os.Environ(), childEnv+"="+role), env...)
	ch.cmd.Stderr = &ch.stderr
	out, err := ch.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	ch.lines = bufio.NewScanner(out)
	if err := ch.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ch.kill() })
	return ch
}

// wait waits for the child to exit by itself. Its stdout must have been read to the
// end first (Wait closes the pipe).
func (ch *child) wait() error {
	ch.err = ch.cmd.Wait()
	close(ch.exited)
	return ch.err
}

// kill ends the child with SIGKILL, as if it crashed, and waits for it.
func (ch *child) kill() {
	select {
	case <-ch.exited:
		return
	default:
	}
	ch.cmd.Process.Kill()
	for ch.lines.Scan() { // drain, so that Wait need not cut a pipe someone reads
	}
	ch.wait()
}

// fatal fails the test with the child's stderr, killing it first if it still runs.
func (ch *child) fatal(t *testing.T, format string, args ...any) {
	t.Helper()
	ch.kill()
	t.Fatalf("%s\nchild's stderr:\n%s", fmt.Sprintf(format, args...), ch.stderr.String())
}

// expect reads the child's next line, failing the test unless it is want.
func (ch *child) expect(t *testing.T, want string) {
	t.Helper()
	if !ch.lines.Scan() {
		ch.fatal(t, "child's output ended before %q: %v", want, ch.lines.Err())
	}
	if got := ch.lines.Text(); got != want {
		ch.fatal(t, "child said %q, want %q", got, want)
	}
}

// acceptFrom accepts the child's connection, failing the test if none comes in 20 s.
func acceptFrom(t *testing.T, l net.Listener, ch *child) net.Conn {
	t.Helper()
	type accepted struct {
		c   net.Conn
		err error
	}
	acc := make(chan accepted, 1)
	go func() {
		c, err := l.Accept()
		acc <- accepted{c, err}
	}()
	select {
	case a := <-acc:
		if a.err != nil {
			ch.fatal(t, "accepting the child's connection: %v", a.err)
		}
		return a.c
	case <-time.After(20 * time.Second):
		ch.fatal(t, "no connection from the child in 20 s")
	}
	panic("unreachable")
}

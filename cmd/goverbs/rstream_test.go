package main

import (
	"regexp"
	"strings"
	"testing"
	"time"
)

// rstreamHeader is rstream's table header; the server prints it once it listens.
const rstreamHeader = "name      bytes   xfers   iters   total       time     Gb/sec    usec/xfer\n"

// TestRstream runs rstream's server and client as two processes on loopback, over
// rdmanet and over Go TCP: a custom test of 100 verified 4 KiB transfers each way, and
// both sides print rstream's header and row (bytes count both directions).
func TestRstream(t *testing.T) {
	row := regexp.MustCompile(`(?m)^custom    4k      100     3       2.3m    +\d+\.\d\ds +\d+\.\d\d +\d+\.\d\d$`)
	for _, net := range [][]string{nil, {"--tcp"}, {"-T", "s"}} {
		t.Run(strings.Join(append([]string{"rdma"}, net...), " "), func(t *testing.T) {
			a, b := addrPair(t)
			port := freePort(t, a)
			args := append([]string{"-p", port, "-S", "4096", "-C", "100", "-I", "3", "-T", "v"}, net...)
			srv, cli := runCMPair(t, "name      bytes",
				append([]string{"rstream", "-b", a}, args...),
				append([]string{"rstream", "-b", b, "-s", a}, args...))
			for who, r := range map[string]result{"server": srv, "client": cli} {
				if !strings.HasPrefix(r.stdout, rstreamHeader) || !row.MatchString(r.stdout) {
					t.Errorf("%s printed:\n%s", who, r.stdout)
				}
			}
		})
	}
}

// TestRstreamLoop runs both ends in one process (--loop), over rdmanet and over Go TCP,
// verified: only the client's row is printed.
func TestRstreamLoop(t *testing.T) {
	row := regexp.MustCompile(`(?m)^custom    4k      100     3       2.3m    +\d+\.\d\ds +\d+\.\d\d +\d+\.\d\d$`)
	for _, net := range [][]string{nil, {"--tcp"}} {
		t.Run(strings.Join(append([]string{"rdma"}, net...), " "), func(t *testing.T) {
			a, _ := addrPair(t)
			args := append([]string{"rstream", "--loop", "-b", a, "-p", freePort(t, a), "-S", "4096", "-C", "100", "-I", "3", "-T", "v"}, net...)
			r := runBin(t, 30*time.Second, args...)
			if r.code != 0 || !strings.HasPrefix(r.stdout, rstreamHeader) || len(row.FindAllString(r.stdout, -1)) != 1 {
				t.Errorf("rstream --loop: exit %d, stdout:\n%s\nstderr: %s", r.code, r.stdout, r.stderr)
			}
		})
	}
}

// TestRstreamRefuses: flags rstream has but Go cannot honour, and bad values, fail
// with one line before anything connects.
func TestRstreamRefuses(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"-T", "a"}, "only blocking is offered"},
		{[]string{"-T", "x"}, "unknown test option"},
		{[]string{"-f", "gid"}, "InfiniBand's"},
		{[]string{"-B", "65536"}, "-B: rdmanet's ring has a fixed size"},
		{[]string{"-S", "0"}, "a size in bytes or 'all'"},
		{[]string{"-C", "0"}, "transfers must be at least 1"},
		{[]string{"-I", "-1"}, "iterations must be at least 1"},
		{[]string{"-p", "70000"}, "a port number"},
		{[]string{"-f", "ip", "-s", "localhost"}, "not a numeric address"},
		{[]string{"127.0.0.1"}, "goes after -s"},
		{[]string{"--loop"}, "--loop needs -b"},
	} {
		r := runBin(t, 10*time.Second, append([]string{"rstream"}, c.args...)...)
		if r.code == 0 || !strings.Contains(r.stderr, c.want) || strings.Count(r.stderr, "\n") != 1 {
			t.Errorf("rstream %v: exit %d, stderr %q, want %q", c.args, r.code, r.stderr, c.want)
		}
	}
}

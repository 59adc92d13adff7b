package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// udpongHeader is udpong's table header, which the client prints first.
const udpongHeader = "name      bytes   xfers   total       time     Gb/sec    usec/xfer\n"

// TestUdpong runs udpong's server and client as two processes on loopback, over
// rdmanet's datagram sockets and over Go UDP: an echo test (every datagram answered:
// 100 each way) and a bandwidth test (the row counts what the server received). The
// server, as udpong's, serves until stopped, and logs each client in.
func TestUdpong(t *testing.T) {
	echo := regexp.MustCompile(`(?m)^custom    1000    200     195k    +\d+\.\d\ds +\d+\.\d\d +\d+\.\d\d$`)
	bw := regexp.MustCompile(`(?m)^custom    64      [1-9]\d*  +\S+ +\d+\.\d\ds +\d+\.\d\d +\d+\.\d\d$`)
	for _, net := range [][]string{nil, {"-T", "s"}} {
		t.Run(strings.Join(append([]string{"rdma"}, net...), " "), func(t *testing.T) {
			a, b := addrPair(t)
			port := freePort(t, a)
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			out := filepath.Join(t.TempDir(), "server.out")
			f, err := os.Create(out)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			srv := exec.CommandContext(ctx, binary, append([]string{"udpong", "-b", a, "-p", port}, net...)...)
			srv.Stdout, srv.Stderr = f, f
			if err := srv.Start(); err != nil {
				t.Fatal(err)
			}
			done := make(chan error, 1)
			go func() { done <- srv.Wait() }()
			// the client sends its login again every second until the server answers
			for _, c := range []struct {
				args []string
				row  *regexp.Regexp
			}{
				{[]string{"-S", "1000", "-C", "100", "-T", "e"}, echo},
				{[]string{"-S", "64", "-C", "200"}, bw},
			} {
				r := runBin(t, 30*time.Second, append(append([]string{"udpong", "-s", a, "-b", b, "-p", port}, c.args...), net...)...)
				mustSucceed(t, "client", r)
				if !strings.HasPrefix(r.stdout, udpongHeader) || !c.row.MatchString(r.stdout) {
					t.Errorf("client %v printed:\n%s", c.args, r.stdout)
				}
			}
			select {
			case err := <-done:
				t.Fatalf("the server exited while serving: %v", err)
			default:
			}
			srv.Process.Signal(os.Interrupt)
			<-done
			got, _ := os.ReadFile(out)
			if n := strings.Count(string(got), "client login from "+b+"\n"); n != 2 {
				t.Errorf("the server logged %d logins from %s, want 2:\n%s", n, b, got)
			}
		})
	}
}

// TestUdpongRefuses: bad values fail with one line before anything is sent.
func TestUdpongRefuses(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"-T", "x"}, "unknown test option"},
		{[]string{"-S", "8"}, "size must be at least 16 bytes"},
		{[]string{"-S", "4096"}, "at most 2020 bytes"},
		{[]string{"-C", "0"}, "transfers must be at least 1"},
		{[]string{"-p", "70000"}, "a port number"},
		{[]string{"127.0.0.1"}, "goes after -s"},
	} {
		r := runBin(t, 10*time.Second, append([]string{"udpong"}, c.args...)...)
		if r.code == 0 || !strings.Contains(r.stderr, c.want) || strings.Count(r.stderr, "\n") != 1 {
			t.Errorf("udpong %v: exit %d, stderr %q, want %q", c.args, r.code, r.stderr, c.want)
		}
	}
}

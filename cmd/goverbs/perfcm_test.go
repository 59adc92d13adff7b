package main

import (
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// cmSent is the "cm ... mads_sent N" of a --stats run's stderr: how many MADs the
// side's connection manager sent, -1 without the line.
func cmSent(stderr string) int {
	m := regexp.MustCompile(`(?m)^cm \S+ mads_sent (\d+) `).FindStringSubmatch(stderr)
	if m == nil {
		return -1
	}
	n, _ := strconv.Atoi(m[1])
	return n
}

// TestPerfRDMACM runs every perf tool with -R between two processes. As perftest's -R,
// the whole exchange goes over an rdma_cm connection of its own (no TCP), in perftest's
// message sequence, create_rdma_cm_connection's handshakes included; the data QPs are
// connected by the CM alone: each side's CM must have sent its share of the handshakes
// (client: a REQ and an RTU per QP and the exchange's, the DREPs; server: a REP per QP
// and the exchange's, the DREQs), and the run must move data.
func TestPerfRDMACM(t *testing.T) {
	{
		for _, c := range []struct {
			tool string
			args []string
			qps  int
		}{
			{"write_bw", []string{"-n", "100", "-s", "4096", "-q", "2"}, 2},
			{"read_bw", []string{"-n", "100", "-s", "4096", "-q", "2"}, 2},
			{"send_bw", []string{"-n", "100", "-s", "4096", "-q", "2"}, 2},
			{"atomic_bw", []string{"-n", "100"}, 1},
			{"write_lat", []string{"-n", "100"}, 1},
			{"read_lat", []string{"-n", "100"}, 1},
			{"send_lat", []string{"-n", "100"}, 1},
			{"atomic_lat", []string{"-n", "100", "-A", "CMP_AND_SWAP"}, 1},
		} {
			t.Run(c.tool, func(t *testing.T) {
				args := append([]string{"-R", "--stats"}, c.args...)
				srv, cli := perfPair(t, c.tool, args...)
				mustSucceed(t, c.tool+" server", srv)
				mustSucceed(t, c.tool+" client", cli)
				for _, r := range []result{srv, cli} {
					mustContain(t, c.tool, r.stdout, " rdma_cm QPs\t : ON\n", " Data ex. method : rdma_cm\n")
				}
				if lastRow(cli.stdout) == "" {
					t.Errorf("client printed no result:\n%s", cli.stdout)
				}
				if n := cmSent(cli.stderr); n < 2*(c.qps+1)+1 {
					t.Errorf("the client's CM sent %d MADs, want at least %d (REQ and RTU per QP and the exchange's, a DREP):\n%s", n, 2*(c.qps+1)+1, cli.stderr)
				}
				if n := cmSent(srv.stderr); n < 2*c.qps+1 {
					t.Errorf("the server's CM sent %d MADs, want at least %d (REP and DREQ per QP, the exchange's REP):\n%s", n, 2*c.qps+1, srv.stderr)
				}
			})
		}
	}
}

// TestPerfRDMACMLoopback: --loopback -R connects its two in-process sides through two CMs.
func TestPerfRDMACMLoopback(t *testing.T) {
	r := runBin(t, 60*time.Second, "send_bw", "--loopback", "--bind", loopbackBind(t), "-R", "-n", "100", "-s", "1000")
	mustSucceed(t, "send_bw --loopback -R", r)
	mustContain(t, "send_bw --loopback -R", r.stdout, " rdma_cm QPs\t : ON\n", " 1000       100 ")
}

// TestPerfRDMACMRefused: what perftest refuses with -R is refused with a clear error, and
// a goverbs server and client that disagree on -R say so rather than wait.
func TestPerfRDMACMRefused(t *testing.T) {
	for _, c := range []struct{ args []string }{
		{[]string{"write_bw", "-R", "-c", "UC", "127.0.0.1"}},
		{[]string{"send_bw", "-R", "-c", "UD", "127.0.0.1"}},
	} {
		r := runBin(t, 10*time.Second, c.args...)
		if r.code == 0 || !strings.Contains(r.stderr, "-R") {
			t.Errorf("goverbs %s: exit %d, stderr %q; want a refusal naming -R", strings.Join(c.args, " "), r.code, r.stderr)
		}
	}
	a, b := addrPair(t)
	port := freePort(t, a)
	// A -R server listens on no TCP port (perftest's neither): a plain client is refused.
	srv := startServer(t, "Waiting for client", "write_bw", "--bind", a, "-p", port, "-R", "-n", "10")
	cli := runBin(t, 30*time.Second, "write_bw", "--bind", b, "-p", port, "-n", "10", a)
	if cli.code == 0 || !strings.Contains(cli.stderr, "connection refused") {
		t.Errorf("a plain client against a -R server: exit %d, stderr %q; want connection refused", cli.code, cli.stderr)
	}
	_ = srv
}

// TestPerfRDMACMInterrupt: Ctrl-C on a -R server waiting for its client closes the
// exchange's connection, as it closes the TCP one without -R, so the server returns at
// once through its own cleanup (its --stats lines printed, DREQs sent) instead of
// being ended by the interrupter's 2-second os.Exit; the client then ends too.
func TestPerfRDMACMInterrupt(t *testing.T) {
	a, b := addrPair(t)
	port := freePort(t, a)
	srv := startServer(t, "Waiting for client", "write_bw", "--bind", a, "-p", port, "-R", "--stats", "-D", "30", "-s", "4096")
	cli := startServer(t, "#bytes", "write_bw", "--bind", b, "-p", port, "-R", "-D", "30", "-s", "4096", a)
	time.Sleep(300 * time.Millisecond)
	if err := srv.cmd.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	sr, cr := srv.wait(t), cli.wait(t)
	if sr.code != 130 || cmSent(sr.stderr) < 0 {
		t.Errorf("interrupted -R server: exit %d, want 130 with its --stats lines; stderr:\n%s", sr.code, sr.stderr)
	}
	if cr.code == 0 {
		t.Errorf("the client of an interrupted server exited 0:\n%s%s", cr.stdout, cr.stderr)
	}
}

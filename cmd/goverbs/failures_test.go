package main

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"
)

// The failures a new user hit (issue 17), each run as that user ran it: the built
// binary, server and client in two processes.

// TestManyQPs: write_bw -q 64 (the help allows 1..256) failed with "couldn't create CQ of
// depth 32769". The CQs are sized as perftest sizes them, and fit the device's limit.
func TestManyQPs(t *testing.T) {
	for _, tool := range []string{"write_bw", "send_bw"} {
		srv, cli := perfPair(t, tool, "-q", "64", "-n", "20", "-s", "256")
		mustSucceed(t, tool+" -q 64 server", srv)
		mustSucceed(t, tool+" -q 64 client", cli)
		mustContain(t, tool+" -q 64 client", cli.stdout, " Number of qps   : 64", " 256        1280 ") // 20 on each of 64 QPs, reported as perftest does
	}
	srv, cli := perfPair(t, "send_bw", "-q", "256", "-n", "10", "-s", "64")
	mustSucceed(t, "send_bw -q 256 server", srv)
	mustSucceed(t, "send_bw -q 256 client", cli)
	mustContain(t, "send_bw -q 256 client", cli.stderr, "rx depth lowered to 127 so that 256 QPs fit one CQ of 32767 entries")
}

// TestDevinfoWhileRunning: devinfo failed with "UDP port 4791 is in use" while a tool ran
// on the device's address. It describes a device without binding its socket, and
// --bind picks the address to describe.
func TestDevinfoWhileRunning(t *testing.T) {
	a, _ := addrPair(t)
	srv := startServer(t, "local address:", "rc_pingpong", "--bind", a, "-p", freePort(t, a))
	defer srv.cancel()
	r := runBin(t, 10*time.Second, "devinfo", "--bind", a, "-v")
	mustSucceed(t, "devinfo --bind "+a, r)
	mustContain(t, "devinfo --bind", r.stdout, "hca_id:\tsw0\n", "GID[  0]:\t\t::ffff:"+a+", RoCE v2", "\t\t\tactive_mtu:\t\t4096 (5)\n")
	cmd := exec.Command(binary, "devinfo", "-d", "busy")
	cmd.Env = append(os.Environ(), "GOVERBS_DEVICES=busy="+a)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("devinfo -d busy (a device on %s, in use): %v\n%s", a, err, out)
	}
	mustContain(t, "devinfo -d busy", string(out), "hca_id:\tbusy\n")
	r = runBin(t, 10*time.Second, "devices")
	mustSucceed(t, "devices", r)
}

// TestStatsFlag: README and stat.go promised --stats; the tools refused it.
func TestStatsFlag(t *testing.T) {
	srv, cli := pingpongPair(t, "rc", "-n", "10", "--stats")
	for who, r := range map[string]result{"server": srv, "client": cli} {
		mustSucceed(t, "rc_pingpong --stats "+who, r)
		mustContain(t, "rc_pingpong --stats "+who, r.stderr, "\nlink sw0/1 sent_pkts ", " rcvd_icrc_err 0 ")
		mustMatch(t, "rc_pingpong --stats "+who, r.stderr, `(?m)^qp 0x[0-9a-f]+ tx_pkts `)
	}
	psrv, pcli := perfPair(t, "write_bw", "-n", "10", "--stats")
	mustSucceed(t, "write_bw --stats server", psrv)
	mustSucceed(t, "write_bw --stats client", pcli)
	mustContain(t, "write_bw --stats client", pcli.stderr, "link sw0/1 sent_pkts ")
	mustMatch(t, "write_bw --stats client", pcli.stderr, `(?m)^qp 0x[0-9a-f]+ tx_pkts 160 `) // 10 messages of 64 KiB, 16 packets each at MTU 4096
}

// TestLoopbackPicksFreeAddresses: --loopback always bound 127.0.0.2 and .3, so two runs
// at once (parallel CI jobs) collided. Three runs overlap here (-D 1), beside a tool
// holding 127.0.0.2, the old fixed address.
func TestLoopbackPicksFreeAddresses(t *testing.T) {
	holder := startServer(t, "local address:", "rc_pingpong", "--bind", "127.0.0.2", "-p", freePort(t, "127.0.0.2"))
	defer holder.cancel()
	var wg sync.WaitGroup
	res := make([]result, 3)
	for i := range res {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res[i] = runBin(t, 30*time.Second, "write_bw", "--loopback", "-D", "1", "-s", "4096")
		}()
	}
	wg.Wait()
	for i, r := range res {
		mustSucceed(t, fmt.Sprintf("write_bw --loopback run %d", i), r)
		mustContain(t, "write_bw --loopback", r.stdout, " 4096       ")
	}
}

// TestBidirectional: -b was listed in every tool's help and refused to run. Both sides
// send; each prints the sum of both directions.
func TestBidirectional(t *testing.T) {
	for _, c := range []struct{ tool, size string }{{"write_bw", "4096"}, {"send_bw", "4096"}, {"read_bw", "4096"}, {"atomic_bw", "8"}} {
		t.Run(c.tool, func(t *testing.T) {
			srv, cli := perfPair(t, c.tool, "-b", "-n", "100", "-s", c.size)
			mustSucceed(t, c.tool+" -b server", srv)
			mustSucceed(t, c.tool+" -b client", cli)
			row := fmt.Sprintf(" %-7s    %-10d ", c.size, 100)
			mustContain(t, c.tool+" -b client", cli.stdout, row)
			mustContain(t, c.tool+" -b server", srv.stdout, row)
			// The sum of both directions: each side prints the same figures.
			if a, b := lastRow(cli.stdout), lastRow(srv.stdout); a == "" || a != b {
				t.Errorf("client row %q, server row %q: want the same sum on both sides", a, b)
			}
		})
	}
	srv, cli := perfPair(t, "send_bw", "-b", "-c", "UD", "-n", "100", "-s", "1024")
	mustSucceed(t, "send_bw -b UD server", srv)
	mustSucceed(t, "send_bw -b UD client", cli)
}

// lastRow returns the last result row of a bandwidth table.
func lastRow(out string) string {
	row := ""
	for _, l := range strings.Split(out, "\n") {
		if f := strings.Fields(l); len(f) >= 5 && f[0] != "#bytes" && strings.Trim(f[0], "0123456789") == "" {
			row = l
		}
	}
	return row
}

// TestInterruptDuration: Ctrl-C during a -D run printed nothing. It ends the run as
// its duration would: both sides print the results so far and exit 0.
func TestInterruptDuration(t *testing.T) {
	a, b := addrPair(t)
	port := freePort(t, a)
	srv := startServer(t, "Waiting for client", "write_bw", "--bind", a, "-p", port, "-D", "30", "-s", "4096")
	cli := startServer(t, "#bytes", "write_bw", "--bind", b, "-p", port, "-D", "30", "-s", "4096", a)
	time.Sleep(300 * time.Millisecond)
	if err := cli.cmd.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	cr, sr := cli.wait(t), srv.wait(t)
	if el := time.Since(start); el > 10*time.Second {
		t.Errorf("the run took %v after Ctrl-C", el)
	}
	mustSucceed(t, "interrupted client", cr)
	mustSucceed(t, "server of an interrupted client", sr)
	if lastRow(cr.stdout) == "" || !strings.HasPrefix(strings.TrimSpace(lastRow(cr.stdout)), "4096 ") {
		t.Errorf("interrupted client printed no result row:\n%s", cr.stdout)
	}
	mustContain(t, "server", sr.stdout, " 4096       ")

	// A server waiting for its client ends at once, with 130 and one line.
	w := startServer(t, "Waiting for client", "write_bw", "--bind", a, "-p", freePort(t, a))
	w.cmd.Process.Signal(os.Interrupt)
	wr := w.wait(t)
	if wr.code != 130 || strings.TrimSpace(wr.stderr) != "goverbs write_bw: interrupted" {
		t.Errorf("waiting server after Ctrl-C: exit %d, stderr %q", wr.code, wr.stderr)
	}
}

// TestInterruptSoak: soak answered Ctrl-C with a raw struct dump and "1 of 1 runs
// failed". It reports what it verified and exits 130.
func TestInterruptSoak(t *testing.T) {
	s := startServer(t, "== soak", "soak", "-n", "100000000")
	time.Sleep(500 * time.Millisecond)
	s.cmd.Process.Signal(os.Interrupt)
	r := s.wait(t)
	if r.code != 130 {
		t.Errorf("soak after Ctrl-C: exit %d, want 130\n%s%s", r.code, r.stdout, r.stderr)
	}
	mustContain(t, "soak stdout", r.stdout, "interrupted: ", " work requests completed, each verified\n", "link soakA/1 ")
	for _, bad := range []string{"FAILED", "{TxPackets:", "runs failed"} {
		if strings.Contains(r.stdout+r.stderr, bad) {
			t.Errorf("soak after Ctrl-C says %q:\n%s%s", bad, r.stdout, r.stderr)
		}
	}
}

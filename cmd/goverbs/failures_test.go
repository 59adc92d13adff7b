package main

import (
	"fmt"
	"os"
	"os/exec"
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
		mustContain(t, tool+" -q 64 client", cli.stdout, " Number of qps   : 64", " 256        20 ")
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
	srv, cli := pingpong(t, "rc", "-n", "10", "--stats")
	for who, r := range map[string]result{"server": srv, "client": cli} {
		mustSucceed(t, "rc_pingpong --stats "+who, r)
		mustContain(t, "rc_pingpong --stats "+who, r.stderr, "\nlink sw0/1 sent_pkts ", " rcvd_icrc_err 0 ", "qp 0x11 tx_pkts ")
	}
	psrv, pcli := perfPair(t, "write_bw", "-n", "10", "--stats")
	mustSucceed(t, "write_bw --stats server", psrv)
	mustSucceed(t, "write_bw --stats client", pcli)
	mustContain(t, "write_bw --stats client", pcli.stderr, "link sw0/1 sent_pkts ", "qp 0x11 tx_pkts 160 ") // 10 messages of 64 KiB, 16 packets each at MTU 4096
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

package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/goverbs/goverbs/internal/testaddr"
	"github.com/goverbs/goverbs/wire"
)

// The tests build the command once and run its subcommands as separate processes, a
// server and a client, on loopback addresses no other process holds (each software
// device binds UDP ADDR:4791; see testaddr) with distinct TCP ports.

var binary string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "goverbs-test")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binary = filepath.Join(dir, "goverbs")
	out, err := exec.Command("go", "build", "-o", binary, ".").CombinedOutput()
	if err != nil {
		fmt.Fprintf(os.Stderr, "go build: %v\n%s", err, out)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// addrPair returns two loopback addresses, free a moment ago, for a server and a client
// device.
func addrPair(t *testing.T) (string, string) {
	t.Helper()
	return testaddr.Free(t, testaddr.Goverbs).String(), testaddr.Free(t, testaddr.Goverbs).String()
}

// loopbackBind returns an address for --loopback --bind: the server's device binds it and
// the client's the next one, both free a moment ago.
func loopbackBind(t *testing.T) string {
	t.Helper()
	return testaddr.Open(t, testaddr.Goverbs, func(a netip.Addr) (string, error) {
		for _, x := range []netip.Addr{a, a.Next()} {
			c, err := net.ListenUDP("udp4", net.UDPAddrFromAddrPort(netip.AddrPortFrom(x, wire.UDPPort)))
			if err != nil {
				return "", err
			}
			defer c.Close()
		}
		return a.String(), nil
	})
}

// freePort returns a TCP port that was free a moment ago on addr.
func freePort(t *testing.T, addr string) string {
	t.Helper()
	l, err := net.Listen("tcp", addr+":0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return strconv.Itoa(l.Addr().(*net.TCPAddr).Port)
}

type result struct {
	stdout, stderr string
	code           int
}

// runBin runs the binary to completion within timeout.
func runBin(t *testing.T, timeout time.Duration, args ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, binary, args...)
	var so, se bytes.Buffer
	cmd.Stdout, cmd.Stderr = &so, &se
	err := cmd.Run()
	if ctx.Err() != nil {
		t.Fatalf("goverbs %s: timed out after %v\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), timeout, so.String(), se.String())
	}
	r := result{stdout: so.String(), stderr: se.String()}
	if ee, ok := err.(*exec.ExitError); ok {
		r.code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return r
}

// server is a background process whose stdout is watched for a ready marker.
type server struct {
	cmd    *exec.Cmd
	cancel context.CancelFunc
	mu     sync.Mutex
	out    bytes.Buffer
	stderr bytes.Buffer
	done   chan struct{}
	code   int
}

func startServer(t *testing.T, marker string, args ...string) *server {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	s := &server{cancel: cancel, done: make(chan struct{})}
	s.cmd = exec.CommandContext(ctx, binary, args...)
	s.cmd.Stderr = &s.stderr
	pipe, err := s.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := s.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	ready := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(pipe)
		seen := false
		for sc.Scan() {
			s.mu.Lock()
			s.out.WriteString(sc.Text() + "\n")
			s.mu.Unlock()
			if !seen && strings.Contains(sc.Text(), marker) {
				seen = true
				close(ready)
			}
		}
		err := s.cmd.Wait()
		if ee, ok := err.(*exec.ExitError); ok {
			s.code = ee.ExitCode()
		}
		if !seen {
			close(ready)
		}
		close(s.done)
	}()
	t.Cleanup(func() {
		cancel()
		<-s.done
	})
	select {
	case <-ready:
	case <-time.After(20 * time.Second):
		t.Fatalf("server %s: no %q within 20s", strings.Join(args, " "), marker)
	}
	return s
}

// wait waits for the server to exit and returns its output.
func (s *server) wait(t *testing.T) result {
	t.Helper()
	select {
	case <-s.done:
	case <-time.After(30 * time.Second):
		s.cancel()
		<-s.done
		t.Fatalf("server did not exit\nstdout:\n%s\nstderr:\n%s", s.out.String(), s.stderr.String())
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return result{stdout: s.out.String(), stderr: s.stderr.String(), code: s.code}
}

func mustSucceed(t *testing.T, who string, r result) {
	t.Helper()
	if r.code != 0 {
		t.Fatalf("%s exited %d\nstdout:\n%s\nstderr:\n%s", who, r.code, r.stdout, r.stderr)
	}
}

func mustContain(t *testing.T, who, text string, wants ...string) {
	t.Helper()
	for _, w := range wants {
		if !strings.Contains(text, w) {
			t.Errorf("%s output lacks %q:\n%s", who, w, text)
		}
	}
}

// mustMatch fails t for each pattern text does not match, where a value varies from run
// to run (a QPN: each device starts numbering its QPs at a random one).
func mustMatch(t *testing.T, who, text string, patterns ...string) {
	t.Helper()
	for _, p := range patterns {
		if !regexp.MustCompile(p).MatchString(text) {
			t.Errorf("%s output does not match %q:\n%s", who, p, text)
		}
	}
}

func TestDevices(t *testing.T) {
	r := runBin(t, 10*time.Second, "devices")
	mustSucceed(t, "devices", r)
	mustContain(t, "devices", r.stdout, "    device          \t   node GUID\n", "    sw0")
}

func TestDevinfo(t *testing.T) {
	// The default device, sw0, binds 127.0.0.1:4791: the one address every goverbs run
	// without --bind or GOVERBS_DEVICES shares, this test in another process included.
	// Someone holding it for a moment is no failure: wait for it, for a while.
	r := runBin(t, 10*time.Second, "devinfo", "-v")
	for deadline := time.Now().Add(20 * time.Second); r.code != 0 && strings.Contains(r.stderr, "UDP port 4791 is in use") && time.Now().Before(deadline); {
		time.Sleep(100 * time.Millisecond)
		r = runBin(t, 10*time.Second, "devinfo", "-v")
	}
	mustSucceed(t, "devinfo", r)
	mustContain(t, "devinfo", r.stdout, "hca_id:\tsw0\n", "\t\tport:\t1\n", "\t\t\tstate:\t\t\tPORT_ACTIVE (4)\n",
		"\t\t\tlink_layer:\t\tEthernet\n", "GID[  0]:\t\t::ffff:127.0.0.1, RoCE v2", "\tmax_qp:\t\t\t\t")
	r = runBin(t, 10*time.Second, "devinfo", "--list")
	mustSucceed(t, "devinfo -l", r)
	if r.stdout != "1 HCA found:\n\tsw0\n" {
		t.Errorf("devinfo -l printed %q", r.stdout)
	}
	// A configured device list.
	cmd := exec.Command(binary, "devinfo", "-d", "swB")
	cmd.Env = append(os.Environ(), "GOVERBS_DEVICES=swA="+testaddr.Free(t, testaddr.Goverbs).String()+",swB="+testaddr.Free(t, testaddr.Goverbs).String())
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("devinfo -d swB: %v", err)
	}
	mustContain(t, "devinfo -d swB", string(out), "hca_id:\tswB\n")
}

func pingpongPair(t *testing.T, kind string, extra ...string) (result, result) {
	t.Helper()
	a, b := addrPair(t)
	port := freePort(t, a)
	common := append([]string{"-p", port, "-g", "0", "-n", "100"}, extra...)
	srv := startServer(t, "local address:", append([]string{kind + "_pingpong", "--bind", a}, common...)...)
	cli := runBin(t, 30*time.Second, append(append([]string{kind + "_pingpong", "--bind", b}, common...), a)...)
	return srv.wait(t), cli
}

func TestPingpongs(t *testing.T) {
	for _, kind := range []string{"rc", "uc", "ud", "srq"} {
		t.Run(kind, func(t *testing.T) {
			extra := []string{"-c"}
			if kind == "srq" {
				extra = append(extra, "-q", "4")
			}
			srv, cli := pingpongPair(t, kind, extra...)
			for who, r := range map[string]result{"server": srv, "client": cli} {
				mustSucceed(t, kind+" "+who, r)
				mustContain(t, kind+" "+who, r.stdout, "  local address:  LID 0x0000, QPN 0x", "  remote address: LID 0x0000, QPN 0x",
					", GID ::ffff:127.", " bytes in ", " Mbit/sec\n", "100 iters in ", " usec/iter\n")
				if strings.Contains(r.stdout, "invalid data") {
					t.Errorf("%s %s: -c found invalid data:\n%s", kind, who, r.stdout)
				}
				if kind == "ud" { // rdma-core's ud_pingpong prints "PSN 0x...: GID" on its local line
					mustContain(t, kind+" "+who, r.stdout, ": GID ::ffff:127.")
				}
				if kind == "srq" && strings.Count(r.stdout, "local address:") != 4 {
					t.Errorf("srq %s: want 4 local address lines:\n%s", who, r.stdout)
				}
			}
			size := map[string]int{"rc": 4096, "uc": 4096, "ud": 1024, "srq": 4096}[kind]
			mustContain(t, kind, cli.stdout, fmt.Sprintf("%d bytes in ", size*100*2))
		})
	}
}

func TestRCPingpongOptions(t *testing.T) {
	srv, cli := pingpongPair(t, "rc", "-s", "10000", "-m", "2048", "-r", "20", "-e", "-c")
	mustSucceed(t, "server", srv)
	mustSucceed(t, "client", cli)
	mustContain(t, "client", cli.stdout, "2000000 bytes in ")
	if strings.Contains(srv.stdout, "invalid data") {
		t.Errorf("server found invalid data:\n%s", srv.stdout)
	}
}

// TestPingpongChkPattern: -c follows rdma-core (0 in the first byte of every page, written by
// the client), so a server with -c and a client without it reports every page.
func TestPingpongChkPattern(t *testing.T) {
	a, b := addrPair(t)
	port := freePort(t, a)
	common := []string{"-p", port, "-g", "0", "-n", "10", "-s", "10000"}
	srv := startServer(t, "local address:", append([]string{"rc_pingpong", "--bind", a, "-c"}, common...)...)
	cli := runBin(t, 30*time.Second, append(append([]string{"rc_pingpong", "--bind", b}, common...), a)...)
	sr := srv.wait(t)
	mustSucceed(t, "server", sr)
	mustSucceed(t, "client", cli)
	mustContain(t, "server", sr.stdout, "invalid data in page 0\n", "invalid data in page 1\n", "invalid data in page 2\n")
}

// overUDP pins the tools a test runs to the kernel's UDP path (GOVERBS_SHM=0): the
// same-host shortcut, on by default, would carry two tools' datagrams through shared
// memory, and a capture test is about what crosses the socket, as between two hosts.
func overUDP(t *testing.T) {
	t.Helper()
	t.Setenv("GOVERBS_SHM", "0")
}

func TestPcap(t *testing.T) {
	overUDP(t)
	file := filepath.Join(t.TempDir(), "rc.pcap")
	srv, cli := pingpongPair(t, "rc", "-s", "100", "--pcap", file)
	mustSucceed(t, "server", srv)
	mustSucceed(t, "client", cli)
	st, err := os.Stat(file)
	if err != nil {
		t.Fatal(err)
	}
	// 100 exchanges each way: at least 200 records of 16 bytes plus IP/UDP/BTH.
	if st.Size() < 24+200*(16+20+8+12) {
		t.Fatalf("capture holds only %d bytes", st.Size())
	}
}

// perfPair runs a perf tool as server and client processes.
func perfPair(t *testing.T, tool string, args ...string) (result, result) {
	t.Helper()
	a, b := addrPair(t)
	port := freePort(t, a)
	common := append([]string{"-p", port}, args...)
	srv := startServer(t, "Waiting for client", append([]string{tool, "--bind", a}, common...)...)
	cli := runBin(t, 60*time.Second, append(append([]string{tool, "--bind", b}, common...), a)...)
	return srv.wait(t), cli
}

func TestPerfRC(t *testing.T) {
	bwHead := " #bytes     #iterations    BW peak[MiB/sec]    BW average[MiB/sec]   MsgRate[Mpps]\n"
	latHead := " #bytes #iterations    t_min[usec]    t_max[usec]  t_typical[usec]    t_avg[usec]    t_stdev[usec]   99% percentile[usec]   99.9% percentile[usec] \n"
	for _, c := range []struct {
		tool, title, row string
		serverRow        bool
	}{
		{"write_bw", "RDMA_Write BW Test", " 65536      200 ", false},
		{"send_bw", "Send BW Test", " 65536      200 ", true},
		{"read_bw", "RDMA_Read BW Test", " 65536      200 ", false},
		{"atomic_bw", "Atomic FETCH_AND_ADD BW Test", " 8          200 ", false},
		{"write_lat", "RDMA_Write Latency Test", " 2       200 ", true},
		{"send_lat", "Send Latency Test", " 2       200 ", true},
		{"read_lat", "RDMA_Read Latency Test", " 2       200 ", false},
		{"atomic_lat", "Atomic FETCH_AND_ADD Latency Test", " 8       200 ", false},
	} {
		t.Run(c.tool, func(t *testing.T) {
			srv, cli := perfPair(t, c.tool, "-n", "200")
			mustSucceed(t, "server", srv)
			mustSucceed(t, "client", cli)
			head := bwHead
			if strings.HasSuffix(c.tool, "_lat") {
				head = latHead
			}
			mustContain(t, "client", cli.stdout, c.title, " Connection type : RC", " local address: LID 0000 QPN 0x",
				" remote address: LID 0000 QPN 0x", " GID: 00:00:00:00:00:00:00:00:00:00:255:255:127:", head, c.row)
			mustContain(t, "server", srv.stdout, "* Waiting for client to connect... *", c.title, head)
			if c.serverRow {
				mustContain(t, "server", srv.stdout, c.row)
			}
		})
	}
}

func TestPerfGbitsAndQPs(t *testing.T) {
	srv, cli := perfPair(t, "write_bw", "-n", "100", "-q", "3", "-s", "4096", "--report_gbits")
	mustSucceed(t, "server", srv)
	mustSucceed(t, "client", cli)
	mustContain(t, "client", cli.stdout, "BW peak[Gb/sec]", " Number of qps   : 3", " 4096       300 ") // iterations of every QP, as perftest
	if n := strings.Count(cli.stdout, "remote address:"); n != 3 {
		t.Errorf("want 3 remote address lines, got %d", n)
	}
}

func TestPerfDuration(t *testing.T) {
	srv, cli := perfPair(t, "send_bw", "-D", "1", "-s", "1024")
	mustSucceed(t, "server", srv)
	mustSucceed(t, "client", cli)
	mustContain(t, "client", cli.stdout, " 1024       ")
}

func TestPerfUCUD(t *testing.T) {
	for _, c := range []struct{ tool, conn, size string }{
		{"send_bw", "UC", "4096"}, {"write_bw", "UC", "4096"}, {"send_bw", "UD", "1024"}, {"send_lat", "UD", "64"}, {"write_lat", "UC", "64"},
	} {
		t.Run(c.tool+"_"+c.conn, func(t *testing.T) {
			srv, cli := perfPair(t, c.tool, "-c", c.conn, "-n", "100", "-s", c.size)
			mustSucceed(t, "server", srv)
			mustSucceed(t, "client", cli)
			mustContain(t, "client", cli.stdout, " Connection type : "+c.conn)
		})
	}
}

func TestLoopback(t *testing.T) {
	r := runBin(t, 60*time.Second, "write_bw", "--loopback", "--bind", loopbackBind(t), "-n", "1000")
	mustSucceed(t, "write_bw --loopback", r)
	mustContain(t, "write_bw --loopback", r.stdout, "RDMA_Write BW Test", " 65536      1000 ")
	r = runBin(t, 60*time.Second, "send_lat", "--loopback", "--bind", loopbackBind(t), "-n", "200")
	mustSucceed(t, "send_lat --loopback", r)
	mustContain(t, "send_lat --loopback", r.stdout, "Send Latency Test", " 2       200 ")
}

func TestLoopbackSweep(t *testing.T) {
	r := runBin(t, 90*time.Second, "write_bw", "--loopback", "--bind", loopbackBind(t), "-a", "-n", "4")
	mustSucceed(t, "write_bw -a", r)
	lines := 0
	for _, l := range strings.Split(r.stdout, "\n") {
		if f := strings.Fields(l); len(f) == 5 && f[1] == "4" {
			lines++
		}
	}
	if lines != 23 {
		t.Errorf("want 23 rows (2..2^23 bytes), got %d:\n%s", lines, r.stdout)
	}
	mustContain(t, "write_bw -a stdout", r.stdout, " 8388608    4 ")
	mustContain(t, "write_bw -a stderr", r.stderr, "[1/23] 2 bytes", "[23/23] 8388608 bytes")
}

func TestJSON(t *testing.T) {
	check := func(args []string, keys []string, rows int) {
		r := runBin(t, 60*time.Second, args...)
		mustSucceed(t, args[0], r)
		lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
		if len(lines) != rows {
			t.Fatalf("%s: want %d JSON rows, got:\n%s", args[0], rows, r.stdout)
		}
		for _, l := range lines {
			var m map[string]float64
			if err := json.Unmarshal([]byte(l), &m); err != nil {
				t.Fatalf("%s: %q is not a JSON object of numbers: %v", args[0], l, err)
			}
			for _, k := range keys {
				if _, ok := m[k]; !ok {
					t.Errorf("%s: row lacks %q: %s", args[0], k, l)
				}
			}
			if len(m) != len(keys) {
				t.Errorf("%s: row has keys beyond %v: %s", args[0], keys, l)
			}
			if m["iterations"] <= 0 || m["bytes"] <= 0 {
				t.Errorf("%s: empty row %s", args[0], l)
			}
		}
	}
	check([]string{"write_bw", "--loopback", "--bind", loopbackBind(t), "--json", "-n", "300", "-s", "4096"},
		[]string{"bytes", "iterations", "bw_peak_mib_s", "bw_avg_mib_s", "msg_rate_mpps"}, 1)
	check([]string{"send_lat", "--loopback", "--bind", loopbackBind(t), "--json", "-n", "100"},
		[]string{"bytes", "iterations", "t_min_us", "t_max_us", "t_typical_us", "t_avg_us", "t_stdev_us", "p99_us", "p999_us"}, 1)
}

// badInput runs a command that must fail with one clear line on stderr.
func badInput(t *testing.T, want string, args ...string) {
	t.Helper()
	r := runBin(t, 30*time.Second, args...)
	if r.code == 0 {
		t.Fatalf("goverbs %s succeeded, want failure\nstdout:\n%s", strings.Join(args, " "), r.stdout)
	}
	checkOneLine(t, args, r.stderr, want)
}

func checkOneLine(t *testing.T, args []string, stderr, want string) {
	t.Helper()
	msg := strings.TrimSuffix(stderr, "\n")
	if strings.Contains(msg, "\n") || strings.Contains(msg, "goroutine ") || strings.Contains(msg, "panic") {
		t.Errorf("goverbs %s: want one line on stderr, got:\n%s", strings.Join(args, " "), stderr)
	}
	if !strings.Contains(msg, want) {
		t.Errorf("goverbs %s: stderr %q lacks %q", strings.Join(args, " "), msg, want)
	}
}

func TestBadInput(t *testing.T) {
	a, b := addrPair(t)
	port := freePort(t, a)
	badInput(t, "unknown command", "nosuchcmd")
	badInput(t, "unknown shorthand flag", "rc_pingpong", "-Z")
	badInput(t, "unknown flag: --nosuch", "write_bw", "--nosuch")
	badInput(t, "IB device nosuch not found", "devinfo", "-d", "nosuch")
	badInput(t, "IB device nosuch not found", "rc_pingpong", "-d", "nosuch", "-p", port)
	badInput(t, "invalid size 0", "rc_pingpong", "--bind", a, "-s", "0", "-p", port)
	badInput(t, "invalid size", "write_bw", "--bind", a, "-s", "9000000", "-p", port)
	badInput(t, "invalid MTU 1000", "rc_pingpong", "--bind", a, "-m", "1000", "-p", port)
	badInput(t, "invalid MTU 300", "send_bw", "--bind", a, "-m", "300", "-p", port)
	badInput(t, "invalid GID index 3", "rc_pingpong", "--bind", a, "-g", "3", "-p", port)
	badInput(t, "invalid GID index 2", "write_lat", "--bind", a, "-x", "2", "-p", port)
	badInput(t, "invalid connection type", "write_bw", "--bind", a, "-c", "XRC", "-p", port)
	badInput(t, "UD supports only send", "write_bw", "--bind", a, "-c", "UD", "-p", port)
	badInput(t, "not an IP address", "rc_pingpong", "--bind", "nonsense", "-p", port)
	badInput(t, "connection refused", "rc_pingpong", "--bind", b, "-p", port, a)
	badInput(t, "connection refused", "write_bw", "--bind", b, "-p", port, a)
}

func TestPortInUse(t *testing.T) {
	a, b := addrPair(t)
	port := freePort(t, a)
	// The device's UDP port: a server holds a:4791.
	srv := startServer(t, "local address:", "rc_pingpong", "--bind", a, "-p", port)
	badInput(t, "UDP port 4791 is in use", "rc_pingpong", "--bind", a, "-p", freePort(t, a))
	// The exchange's TCP port on another device address.
	l, err := net.Listen("tcp", b+":0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	tcp := strconv.Itoa(l.Addr().(*net.TCPAddr).Port)
	badInput(t, "TCP port "+tcp+" on "+b+" is in use", "write_bw", "--bind", b, "-p", tcp)
	srv.cancel()
}

func TestForeignPeer(t *testing.T) {
	// A perf client meeting a ping-pong server, and the other way round.
	a, b := addrPair(t)
	port := freePort(t, a)
	srv := startServer(t, "local address:", "rc_pingpong", "--bind", a, "-p", port)
	r := runBin(t, 40*time.Second, "write_bw", "--bind", b, "-p", port, a)
	if r.code == 0 {
		t.Fatal("write_bw against rc_pingpong succeeded")
	}
	checkOneLine(t, []string{"write_bw"}, r.stderr, "")
	sr := srv.wait(t)
	if sr.code == 0 {
		t.Fatal("rc_pingpong server accepted a write_bw client")
	}
	checkOneLine(t, []string{"rc_pingpong server"}, sr.stderr, "does not speak the rdma-core ping-pong exchange format")

	a, b = addrPair(t)
	port = freePort(t, a)
	psrv := startServer(t, "Waiting for client", "write_bw", "--bind", a, "-p", port)
	r = runBin(t, 40*time.Second, "rc_pingpong", "--bind", b, "-p", port, a)
	if r.code == 0 {
		t.Fatal("rc_pingpong against write_bw succeeded")
	}
	checkOneLine(t, []string{"rc_pingpong client"}, r.stderr, "")
	sr = psrv.wait(t)
	checkOneLine(t, []string{"write_bw server"}, sr.stderr, "does not speak perftest's exchange")

	// A different test on each side.
	a, b = addrPair(t)
	port = freePort(t, a)
	psrv = startServer(t, "Waiting for client", "write_bw", "--bind", a, "-p", port)
	r = runBin(t, 40*time.Second, "read_bw", "--bind", b, "-p", port, a)
	if r.code == 0 {
		t.Fatal("read_bw against write_bw succeeded")
	}
	sr = psrv.wait(t)
	checkOneLine(t, []string{"write_bw server"}, sr.stderr, "the client runs read_bw but this server runs write_bw")
}

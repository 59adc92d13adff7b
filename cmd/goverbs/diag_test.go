package main

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/goverbs/goverbs/internal/testaddr"
	"github.com/goverbs/goverbs/netio/simnet"
	"github.com/goverbs/goverbs/verbs"
	"github.com/goverbs/goverbs/wire"
)

// attrsOf opens, in this process and on an in-memory network, the software device
// GOVERBS_DEVICES would describe, for the attributes the tools must print.
func attrsOf(t *testing.T, name string, a netip.Addr) (verbs.DeviceAttr, verbs.PortAttr) {
	t.Helper()
	c, err := simnet.New(0, simnet.Faults{}).Listen(netip.AddrPortFrom(a, wire.UDPPort))
	if err != nil {
		t.Fatal(err)
	}
	d, err := verbs.OpenSoft(verbs.SoftConfig{Name: name, Addr: a, Conn: c})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	p, err := d.QueryPort(1)
	if err != nil {
		t.Fatal(err)
	}
	return d.Query(), p
}

// ibstat, ibstatus, ibaddr and iblinkinfo print what the devices GOVERBS_DEVICES lists
// report, in infiniband-diags' formats; none binds the devices' addresses.
func TestDiagPortViews(t *testing.T) {
	a0, a1 := testaddr.Addr(testaddr.Goverbs), testaddr.Addr(testaddr.Goverbs)
	for a1 == a0 {
		a1 = testaddr.Addr(testaddr.Goverbs)
	}
	// The tools inherit the variable.
	t.Setenv("GOVERBS_DEVICES", fmt.Sprintf("diag0=%v,diag1=%v", a0, a1))
	dev0, port0 := attrsOf(t, "diag0", a0)
	_, port1 := attrsOf(t, "diag1", a1)
	guid := func(a netip.Addr) string {
		b := a.As4()
		return fmt.Sprintf("0x0000ffff%02x%02x%02x%02x", b[0], b[1], b[2], b[3])
	}

	r := runBin(t, 20*time.Second, "ibstat")
	mustSucceed(t, "ibstat", r)
	mustContain(t, "ibstat", r.stdout,
		"CA 'diag0'\n\tCA type: soft\n\tNumber of ports: 1\n",
		fmt.Sprintf("\tFirmware version: %s\n\tHardware version: 0x%x\n\tNode GUID: 0x%016x\n\tSystem image GUID: 0x%016x\n",
			dev0.FWVer, dev0.HWVer, dev0.NodeGUID, dev0.SysImageGUID),
		"\tPort 1:\n\t\tState: Active\n\t\tPhysical state: LinkUp\n\t\tRate: 0\n\t\tBase lid: 0\n\t\tLMC: 0\n\t\tSM lid: 0\n",
		fmt.Sprintf("\t\tCapability mask: 0x%08x\n\t\tPort GUID: %s\n\t\tLink layer: %s\n", port0.PortCapFlags, guid(a0), port0.LinkLayer),
		"CA 'diag1'\n", "\t\tPort GUID: "+guid(a1)+"\n")

	r = runBin(t, 20*time.Second, "ibstat", "-v", "diag1", "1")
	mustSucceed(t, "ibstat diag1 1", r)
	if !strings.HasPrefix(r.stdout, "CA: 'diag1'\nPort 1:\nState: Active\n") ||
		!strings.Contains(r.stdout, fmt.Sprintf("GID[0]: ::ffff:%v, RoCE v2\n", a1)) {
		t.Errorf("ibstat -v diag1 1:\n%s", r.stdout)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"ibstat", "-l"}, "diag0\ndiag1\n"},
		{[]string{"ibstat", "-p"}, guid(a0) + "\n" + guid(a1) + "\n"},
		{[]string{"ibaddr", "-C", "diag1"}, fmt.Sprintf("GID ::ffff:%v LID start 0x0 end 0x0\n", a1)},
		{[]string{"ibaddr", "-g"}, fmt.Sprintf("GID ::ffff:%v \n", a0)},
		{[]string{"ibaddr", "-l"}, "LID start 0x0 end 0x0\n"},
		{[]string{"ibaddr", "-L"}, "LID start 0 end 0\n"},
	} {
		r := runBin(t, 20*time.Second, c.args...)
		mustSucceed(t, strings.Join(c.args, " "), r)
		if r.stdout != c.want {
			t.Errorf("%s printed %q, want %q", strings.Join(c.args, " "), r.stdout, c.want)
		}
	}
	r = runBin(t, 20*time.Second, "ibstat", "-s", "diag0")
	mustSucceed(t, "ibstat -s", r)
	if strings.Contains(r.stdout, "Port 1:") || !strings.Contains(r.stdout, "CA 'diag0'\n") {
		t.Errorf("ibstat -s diag0:\n%s", r.stdout)
	}
	if r := runBin(t, 20*time.Second, "ibstat", "diag0", "2"); r.code == 0 || !strings.Contains(r.stderr, "has no port number 2") {
		t.Errorf("ibstat diag0 2: exit %d, %s", r.code, r.stderr)
	}
	if r := runBin(t, 20*time.Second, "ibaddr", "7"); r.code == 0 || !strings.Contains(r.stderr, "can't resolve destination port 7") {
		t.Errorf("ibaddr 7: exit %d, %s", r.code, r.stderr)
	}

	r = runBin(t, 20*time.Second, "ibstatus", "diag1:1")
	mustSucceed(t, "ibstatus", r)
	b := a1.As4()
	want := fmt.Sprintf("Infiniband device 'diag1' port 1 status:\n"+
		"\tdefault gid:\t 0000:0000:0000:0000:0000:ffff:%02x%02x:%02x%02x\n"+
		"\tbase lid:\t 0x0\n\tsm lid:\t\t 0x0\n\tstate:\t\t 4: ACTIVE\n\tphys state:\t 5: LinkUp\n"+
		"\trate:\t\t unknown\n\tlink_layer:\t %s\n\n", b[0], b[1], b[2], b[3], port1.LinkLayer)
	if r.stdout != want {
		t.Errorf("ibstatus diag1:1 printed\n%q\nwant\n%q", r.stdout, want)
	}

	r = runBin(t, 20*time.Second, "iblinkinfo")
	mustSucceed(t, "iblinkinfo", r)
	lo := loopbackMTU(t)
	host, _ := os.Hostname()
	for i, a := range []netip.Addr{a0, a1} {
		p := []verbs.PortAttr{port0, port1}[i]
		mustContain(t, "iblinkinfo", r.stdout, fmt.Sprintf("CA: %s diag%d:\n      %s      0    1[  ] ==( %2s %18s Active/  LinkUp)==>  ",
			host, i, guid(a), p.ActiveWidth, p.ActiveSpeed))
		mustContain(t, "iblinkinfo", r.stdout, fmt.Sprintf(" %v (MTU %d, active IB MTU %d)\n", a, lo, p.ActiveMTU.Bytes()))
	}
}

func loopbackMTU(t *testing.T) int {
	ifs, err := net.Interfaces()
	if err != nil {
		t.Fatal(err)
	}
	for _, ifi := range ifs {
		if ifi.Flags&net.FlagLoopback != 0 {
			return ifi.MTU
		}
	}
	t.Skip("no loopback interface")
	return 0
}

var statsRE = `(?m)^--- \S* \(Lid 0 Gid ::ffff:%s\) ibping statistics ---\n` +
	`%d packets transmitted, %d received, %d%% packet loss, time \d+ ms\n` +
	`rtt min/avg/max = \d+\.\d{3}/\d+\.\d{3}/\d+\.\d{3} ms\n`

// goverbs ibping -S and goverbs ibping in two processes: three pongs and the
// statistics line; the server, interrupted, says it answered them.
func TestIbping(t *testing.T) {
	srvAddr, cliAddr := addrPair(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	srv := exec.CommandContext(ctx, binary, "ibping", "-S", "--bind", srvAddr, "--stats")
	var srvErr bytes.Buffer
	srv.Stderr = &srvErr
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- srv.Wait() }()
	defer func() {
		cancel()
		<-done
	}()
	// Wait until the responder answers (a ping before it opens the class is answered
	// as an unsupported class): probe from the client's address until one comes back.
	deadline := time.Now().Add(20 * time.Second)
	for {
		r := runBin(t, 20*time.Second, "ibping", "--bind", cliAddr, "-c", "1", "-f", "-t", "200", srvAddr)
		if strings.Contains(r.stdout, "1 received") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the server never answered:\n%s%s\nserver: %s", r.stdout, r.stderr, srvErr.String())
		}
		time.Sleep(50 * time.Millisecond)
	}

	r := runBin(t, 30*time.Second, "ibping", "--bind", cliAddr, "-c", "3", srvAddr)
	mustSucceed(t, "ibping", r)
	pong := regexp.MustCompile(`(?m)^Pong from \S+ \(Lid 0 Gid ::ffff:` + regexp.QuoteMeta(srvAddr) + `\): time \d+\.\d{3} ms$`)
	if n := len(pong.FindAllString(r.stdout, -1)); n != 3 {
		t.Errorf("%d pong lines, want 3:\n%s", n, r.stdout)
	}
	mustMatch(t, "ibping", r.stdout, fmt.Sprintf(statsRE, regexp.QuoteMeta(srvAddr), 3, 3, 0))

	// -G with the port GUID ibstat prints, flood mode: no per-reply lines.
	b := netip.MustParseAddr(srvAddr).As4()
	r = runBin(t, 30*time.Second, "ibping", "--bind", cliAddr, "-f", "-c", "5", "-G",
		fmt.Sprintf("0x0000ffff%02x%02x%02x%02x", b[0], b[1], b[2], b[3]))
	mustSucceed(t, "ibping -f -G", r)
	if strings.Contains(r.stdout, "Pong from") {
		t.Errorf("flood printed replies:\n%s", r.stdout)
	}
	mustMatch(t, "ibping -f -G", r.stdout, fmt.Sprintf(statsRE, regexp.QuoteMeta(srvAddr), 5, 5, 0))

	// Without -c, Ctrl-C ends the run: the statistics of what was sent, exit 0.
	cli := startServer(t, "Pong from", "ibping", "--bind", cliAddr, srvAddr)
	cli.cmd.Process.Signal(os.Interrupt)
	r = cli.wait(t)
	mustSucceed(t, "ibping interrupted", r)
	mustMatch(t, "ibping interrupted", r.stdout, `(?m)^(\d+) packets transmitted, (\d+) received, 0% packet loss`)

	srv.Process.Signal(os.Interrupt)
	select {
	case <-done:
		done <- nil // for the deferred wait
	case <-time.After(10 * time.Second):
		t.Fatal("ibping -S did not stop on SIGINT")
	}
	if code := srv.ProcessState.ExitCode(); code != 130 {
		t.Errorf("ibping -S exited %d on SIGINT, want 130", code)
	}
	mustMatch(t, "ibping -S", srvErr.String(), `ibping server \S+ answered \d+ dropped 0\n`)
}

// An address with no device: every ping times out after its retries and counts as
// lost; ibping still prints the statistics and exits 0, as infiniband-diags' does.
func TestIbpingNoServer(t *testing.T) {
	cli, nobody := addrPair(t)
	r := runBin(t, 30*time.Second, "ibping", "--bind", cli, "-c", "2", "-f", "-t", "100", nobody)
	mustSucceed(t, "ibping to nobody", r)
	if strings.Contains(r.stdout, "Pong from") {
		t.Errorf("a pong from nobody:\n%s", r.stdout)
	}
	mustMatch(t, "ibping to nobody", r.stdout, fmt.Sprintf(statsRE, regexp.QuoteMeta(nobody), 2, 0, 100))
	if !strings.HasPrefix(r.stdout, "\n---  (Lid 0") {
		t.Errorf("no host before the statistics should leave it empty:\n%q", r.stdout)
	}
	if r := runBin(t, 10*time.Second, "ibping", "--bind", cli, "5"); r.code == 0 || !strings.Contains(r.stderr, "RoCE ports have no LIDs") {
		t.Errorf("ibping LID 5: exit %d, %s", r.code, r.stderr)
	}
}

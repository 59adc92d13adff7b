package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/goverbs/goverbs/cm/mad"
	"github.com/goverbs/goverbs/wire"
)

// TestRping runs rping's server and client as two processes on two loopback
// addresses, connected by the CM with no side channel: `rping -C 1000 -V`, 1000
// validated pings, the data printed as rping prints it, and a capture that is valid
// RoCEv2 with the CM's handshake and disconnection in it.
func TestRping(t *testing.T) {
	overUDP(t)
	a, b := addrPair(t)
	file := filepath.Join(t.TempDir(), "rping.pcap")
	sr, cli := runCMPair(t, "rdma_listen", []string{"rping", "-s", "-a", a, "-d", "-v"},
		[]string{"rping", "-c", "-a", a, "-I", b, "-C", "1000", "-vV", "--pcap", file})
	mustContain(t, "client", cli.stdout, "ping data: rdma-ping-0: ABCDEFGHIJKLMNOPQRSTUVWXYZ[\\]^_`abcdefghijklmnopqr\n",
		"ping data: rdma-ping-999: ")
	mustContain(t, "client", cli.stderr, "client DISCONNECT EVENT...")
	mustContain(t, "server", sr.stdout, "server ping data: rdma-ping-0: ABC", "server ping data: rdma-ping-999: ")
	mustContain(t, "server", sr.stderr, "server DISCONNECT EVENT...")
	if n := strings.Count(cli.stdout, "ping data: "); n != 1000 {
		t.Fatalf("%d pings printed", n)
	}

	// The capture: every packet parses and has a correct ICRC; the CM MADs are the
	// handshake and the disconnection; each ping is one READ and one WRITE.
	var mads []mad.AttrID
	ops := map[wire.Opcode]int{}
	eachRoCEPacket(t, file, func(p *wire.Packet) {
		ops[p.BTH.Opcode()]++
		if p.BTH.DestQP() == mad.QPNGSI {
			m, err := mad.ParseCM(p.Payload)
			if err != nil || p.DETH.QKey() != mad.QKeyGSI {
				t.Fatalf("MAD: %v, Q_Key %#x", err, p.DETH.QKey())
			}
			mads = append(mads, m.Header().AttrID())
		}
	})
	// One of each. Not checked in order: the Tee on main records a send once the kernel
	// has taken it, by which time the answer may be recorded already.
	want := []mad.AttrID{mad.AttrREQ, mad.AttrREP, mad.AttrRTU, mad.AttrDREQ, mad.AttrDREP}
	seen := map[mad.AttrID]int{}
	for _, m := range mads {
		seen[m]++
	}
	for _, w := range want {
		if seen[w] != 1 || len(mads) != len(want) {
			t.Fatalf("CM MADs %v, want one each of %v", mads, want)
		}
	}
	if ops[wire.RCReadRequest] != 1000 || ops[wire.RCWriteOnly] != 1000 || ops[wire.RCSendOnly] != 4000 {
		t.Fatalf("opcodes %v", ops)
	}
	tsharkShows(t, file, "ConnectRequest", "ConnectReply", "ReadyToUse", "DisconnectRequest", "DisconnectReply")
}

// tsharkShows checks that Wireshark's dissector names the capture's CM MADs as want
// says (skipped without tshark).
func tsharkShows(t *testing.T, file string, want ...string) {
	ts, err := exec.LookPath("tshark")
	if err != nil {
		t.Log("tshark not installed: the dissector check is skipped")
		return
	}
	out, err := exec.Command(ts, "-r", file, "-V").CombinedOutput()
	if err != nil {
		t.Fatalf("tshark: %v\n%s", err, out)
	}
	for _, w := range want {
		if !strings.Contains(string(out), w) {
			t.Errorf("tshark does not show %s", w)
		}
	}
}

// TestRpingErrors: a client to a port nobody listens on is rejected (reason 8,
// invalid service ID, as rping reports it); a second server on a device's address is
// told so; bad flags are refused before anything runs.
func TestRpingErrors(t *testing.T) {
	a, b := addrPair(t)
	srv := startServer(t, "rdma_listen", "rping", "-s", "-a", a, "-d", "-p", "7000")
	r := runBin(t, 30*time.Second, "rping", "-c", "-a", a, "-I", b, "-p", "7001", "-C", "1")
	if r.code != 1 || !strings.Contains(r.stderr, "RDMA_CM_EVENT_REJECTED, error 8") {
		t.Fatalf("exit %d, stderr %q", r.code, r.stderr)
	}
	// A second server on the address: the hint names no flag rping lacks (--bind).
	r = runBin(t, 30*time.Second, "rping", "-s", "-a", a, "-p", "7002")
	if r.code == 0 || !strings.Contains(r.stderr, "UDP port 4791 is in use") || strings.Contains(r.stderr, "--bind") {
		t.Errorf("a second server on %s: exit %d, stderr %q", a, r.code, r.stderr)
	}
	srv.cancel()
	for _, args := range [][]string{
		{"rping", "-c", "-a", a, "-S", "10"},
		{"rping", "-c", "-a", a, "-C", "-1"},
		{"rping", "-s", "-c"},
		{"rping", "-c"},
	} {
		if r := runBin(t, 10*time.Second, args...); r.code == 0 {
			t.Errorf("%v: exit 0", args)
		}
	}
}

// TestRpingPersistent: a -P server serves one client after another.
func TestRpingPersistent(t *testing.T) {
	a, b := addrPair(t)
	_ = startServer(t, "rdma_listen", "rping", "-s", "-P", "-a", a, "-d")
	for range 2 {
		r := runBin(t, 30*time.Second, "rping", "-c", "-a", a, "-I", b, "-C", "5", "-V")
		mustSucceed(t, "client", r)
	}
}

// TestRpingInterruptServer: Ctrl-C on a server whose client pings forever was ignored,
// since the serve loop never looked at it; with -P the server could not end at all. It
// disconnects the client, and both sides exit 0.
func TestRpingInterruptServer(t *testing.T) {
	for _, mode := range []string{"-s", "-sP"} {
		t.Run(mode, func(t *testing.T) {
			a, b := addrPair(t)
			srv := startServer(t, "rdma_listen", "rping", mode, "-a", a, "-d", "-v")
			cli := startServer(t, "rdma_connect successful", "rping", "-c", "-a", a, "-I", b, "-d") // -C 0: forever
			waitOutput(t, srv, "server ping data: rdma-ping-")
			if err := srv.cmd.Process.Signal(os.Interrupt); err != nil {
				t.Fatal(err)
			}
			start := time.Now()
			sr, cr := srv.wait(t), cli.wait(t)
			if el := time.Since(start); el > 5*time.Second {
				t.Errorf("the server took %v to end after Ctrl-C", el)
			}
			mustSucceed(t, "interrupted server", sr)
			mustSucceed(t, "client of an interrupted server", cr)
			mustContain(t, "client", cr.stderr, "client DISCONNECT EVENT...")
		})
	}
}

// waitOutput waits until the running process has printed want.
func waitOutput(t *testing.T, s *server, want string) {
	t.Helper()
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		s.mu.Lock()
		seen := strings.Contains(s.out.String(), want)
		s.mu.Unlock()
		if seen {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("no %q within 20s", want)
		}
	}
}

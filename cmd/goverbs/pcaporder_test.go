package main

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/goverbs/goverbs/pcap"
)

// TestPcapOrder: a capture holds each acknowledgement after the request it answers
// (ACKs came before their requests in about one srq_pingpong or atomic_bw capture in
// five, when the receive loop recorded a fast reply before the sender recorded its send).
// On both paths: over the kernel's UDP, and through the same-host rings (the default for
// two tools on one host), whose replies come faster still.
func TestPcapOrder(t *testing.T) {
	for _, shm := range []string{"0", "1"} {
		t.Run("GOVERBS_SHM="+shm, func(t *testing.T) {
			t.Setenv("GOVERBS_SHM", shm)
			testPcapOrder(t)
		})
	}
}

func testPcapOrder(t *testing.T) {
	dir := t.TempDir()
	for _, c := range []struct {
		tool   string
		marker string
		args   []string
	}{
		{"srq_pingpong", "local address:", []string{"-q", "4", "-n", "200", "-s", "64"}},
		{"atomic_bw", "Waiting for client", []string{"-n", "500"}},
	} {
		file := filepath.Join(dir, c.tool+".pcap")
		a, b := addrPair(t)
		common := append([]string{"-p", freePort(t, a)}, c.args...)
		srv := startServer(t, c.marker, append([]string{c.tool, "--bind", a}, common...)...)
		// Only the client records: it sees both directions.
		cli := runBin(t, 60*time.Second, append(append([]string{c.tool, "--bind", b, "--pcap", file}, common...), a)...)
		mustSucceed(t, c.tool+" server", srv.wait(t))
		mustSucceed(t, c.tool+" client", cli)
		if os.Getenv("GOVERBS_SHM") != "0" {
			mustContain(t, c.tool+" client", cli.stderr, "path: same-host shared memory for")
		}
		checkAckOrder(t, file)
	}
}

// checkAckOrder fails if an RC ACK or atomic ACK (BTH opcodes 0x11, 0x12) comes before
// every request of the same QP and PSN sent the other way.
func checkAckOrder(t *testing.T, file string) {
	t.Helper()
	r, f, err := pcap.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	type key struct {
		qp, psn uint32
	}
	seen := map[key]bool{} // requests recorded so far, by destination QP and PSN
	acks := 0
	for n := 0; ; n++ {
		_, ip, err := r.NextIP()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if len(ip) < 20 || ip[0]>>4 != 4 {
			continue
		}
		bth := ip[int(ip[0]&0xf)*4+8:]
		if len(bth) < 12 {
			continue
		}
		op := bth[0]
		destQP := uint32(bth[5])<<16 | uint32(bth[6])<<8 | uint32(bth[7])
		psn := uint32(bth[9])<<16 | uint32(bth[10])<<8 | uint32(bth[11])
		switch {
		case op <= 0x0c || op == 0x13 || op == 0x14: // RC requests
			seen[key{destQP, psn}] = true
		case op == 0x11 || op == 0x12:
			acks++
			// The ACK goes to the requester's QP; the request went to the responder's.
			// Match on PSN alone across the QPs of this capture's one connection pair.
			found := false
			for k := range seen {
				if k.psn == psn {
					found = true
					break
				}
			}
			if !found {
				t.Fatalf("%s: packet %d, an ACK (opcode %#x) of PSN %#06x to QP %#x, comes before its request",
					filepath.Base(file), n+1, op, psn, destQP)
			}
		}
	}
	if acks == 0 {
		t.Fatalf("%s: no ACKs in the capture", filepath.Base(file))
	}
}

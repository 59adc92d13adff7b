package softtest

import (
	"encoding/hex"
	"errors"
	"io"
	"os/exec"
	"strconv"
	"strings"
	"testing"

	"github.com/goverbs/goverbs/pcap"
	"github.com/goverbs/goverbs/wire"
)

// XRCCapture is what CheckXRCCapture read: how many packets of each opcode, and the SRQ
// number of every request's XRCETH.
type XRCCapture struct {
	Opcodes map[wire.Opcode]int
	SRQNs   []uint32
}

// CheckXRCCapture checks a capture of XRC traffic as a strict receiver and a second
// decoder would: every packet parses as XRC, every ICRC verifies against the IP header it
// was captured with, requests and only requests carry an XRCETH (IBTA Annex A14), and
// tshark, where installed, finds nothing malformed and reads the same opcodes and, in
// the 4 bytes after each request's BTH, the same XRCETH. (Wireshark 4.0 names the XRC
// opcodes and shows what follows the BTH as undissected data, its first 4 bytes apart.)
func CheckXRCCapture(t testing.TB, path string) XRCCapture {
	t.Helper()
	r, f, err := pcap.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	c := XRCCapture{Opcodes: map[wire.Opcode]int{}}
	var want []string // per packet: the opcode and, for a request, its XRCETH, as tshark prints them
	for {
		_, pkt, err := r.NextIP()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		ip, udp, err := wire.ParseIPUDP(pkt)
		if err != nil {
			t.Fatal(err)
		}
		n := len(want) + 1
		var p wire.Packet
		if err := p.Parse(udp, 4096); err != nil {
			t.Fatalf("packet %d: %v", n, err)
		}
		if p.Op.Transport != wire.TransportXRC || !wire.CheckICRC(&ip, udp) {
			t.Fatalf("packet %d (%v): not XRC, or its ICRC does not verify", n, p.Op.Name)
		}
		if p.Op.Flags.Has(wire.Request) != (p.XRCETH != nil) {
			t.Fatalf("packet %d (%v): XRCETH %x", n, p.Op.Name, []byte(p.XRCETH))
		}
		c.Opcodes[p.BTH.Opcode()]++
		w := strconv.Itoa(int(p.BTH.Opcode()))
		if p.XRCETH != nil {
			c.SRQNs = append(c.SRQNs, p.XRCETH.SRQN())
			w += " " + hex.EncodeToString(p.XRCETH)
		}
		want = append(want, w)
	}
	if _, err := exec.LookPath("tshark"); err != nil {
		t.Log("tshark not installed: dissector check skipped")
		return c
	}
	out, err := exec.Command("tshark", "-n", "--disable-protocol", "rpcordma", "-r", path, "-T", "fields",
		"-e", "frame.protocols", "-e", "infiniband.bth.opcode", "-e", "infiniband.vendor", "-e", "_ws.malformed").Output()
	if err != nil {
		t.Fatalf("tshark: %v", err)
	}
	lines := strings.Split(strings.TrimRight(string(out), "\n"), "\n") // keep the last line's empty field
	if len(lines) != len(want) {
		t.Fatalf("tshark printed %d lines for %d packets", len(lines), len(want))
	}
	for i, l := range lines {
		fs := strings.Split(l, "\t")
		if len(fs) != 4 || !strings.HasSuffix(fs[0], "udp:infiniband") || fs[3] != "" {
			t.Fatalf("packet %d: %q", i+1, l)
		}
		got := fs[1]
		if len(strings.Fields(want[i])) == 2 {
			got += " " + strings.SplitN(fs[2], ",", 2)[0]
		}
		if got != want[i] {
			t.Errorf("packet %d: tshark reads %q, goverbs %q", i+1, got, want[i])
		}
	}
	return c
}

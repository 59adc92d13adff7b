package engine_test

import (
	"encoding/hex"
	"errors"
	"io"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/goverbs/goverbs/pcap"
	"github.com/goverbs/goverbs/verbs"
	"github.com/goverbs/goverbs/wire"
)

// TestXRCSessionCapture records an XRC session with every operation, multi-packet ones
// among them, from the initiator's side, and checks it as a strict receiver and a second
// decoder would: every packet parses as XRC, every ICRC verifies, each request carries
// the XRCETH naming the target's SRQ and no response carries one, and tshark reads the
// same opcodes and, in the 4 bytes after each request's BTH, the same XRCETH.
func TestXRCSessionCapture(t *testing.T) {
	path := filepath.Join(t.TempDir(), "xrc.pcap")
	w, err := pcap.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	a := newHostCfg(t, verbs.SoftConfig{Recorder: w})
	tg := newHost(t)
	x := newXRCTarget(t, tg, openXRCD(t, tg))
	ini, _ := xrcLink(t, a, tg, x.xrcd)
	src, dst := a.MR(t, 8192, allAccess), tg.MR(t, 8192, allAccess)
	fill(src.Buf(), 1)
	for i := range 3 {
		if err := x.srq.PostRecv(verbs.RecvWR{ID: uint64(i), SGL: []verbs.SGE{dst.SGE(0, 8192)}}); err != nil {
			t.Fatal(err)
		}
	}
	r := x.num
	wrs := []verbs.SendWR{
		{Opcode: verbs.WRSend, SGL: []verbs.SGE{src.SGE(0, 3000)}, RemoteSRQN: r},
		{Opcode: verbs.WRSendWithImm, Imm: 5, SGL: []verbs.SGE{src.SGE(0, 100)}, RemoteSRQN: r},
		{Opcode: verbs.WRRDMAWrite, SGL: []verbs.SGE{src.SGE(0, 5000)}, RemoteAddr: dst.Addr(), RKey: dst.RKey(), RemoteSRQN: r},
		{Opcode: verbs.WRRDMAWriteWithImm, Imm: 6, SGL: []verbs.SGE{src.SGE(0, 1024)}, RemoteAddr: dst.Addr(), RKey: dst.RKey(), RemoteSRQN: r},
		{Opcode: verbs.WRRDMARead, SGL: []verbs.SGE{src.SGE(0, 4000)}, RemoteAddr: dst.Addr(), RKey: dst.RKey(), RemoteSRQN: r},
		{Opcode: verbs.WRAtomicFetchAdd, SGL: []verbs.SGE{src.SGE(0, 8)}, RemoteAddr: dst.Addr(), RKey: dst.RKey(), CompareAdd: 1, RemoteSRQN: r},
		{Opcode: verbs.WRAtomicCmpAndSwp, SGL: []verbs.SGE{src.SGE(8, 8)}, RemoteAddr: dst.Addr(), RKey: dst.RKey(), CompareAdd: 1, Swap: 2, RemoteSRQN: r},
	}
	for i := range wrs {
		wrs[i].ID = uint64(i)
		wrs[i].Flags = verbs.SendSignaled
	}
	if err := ini.PostSend(wrs...); err != nil {
		t.Fatal(err)
	}
	for _, wc := range waitWC(t, a.CQ, len(wrs), 5*time.Second) {
		if wc.Status != verbs.WCSuccess {
			t.Fatalf("completion %+v", wc)
		}
	}
	waitWC(t, x.cq, 3, 5*time.Second)
	time.Sleep(20 * time.Millisecond) // the last ACK
	a.Dev.Close()
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}

	rd, f, err := pcap.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	seen := map[wire.Opcode]int{}
	var want []string
	for {
		_, ipPkt, err := rd.NextIP()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		ip, udp, err := wire.ParseIPUDP(ipPkt)
		if err != nil {
			t.Fatal(err)
		}
		var p wire.Packet
		if err := p.Parse(udp, 4096); err != nil {
			t.Fatalf("packet %d: %v", len(want)+1, err)
		}
		if p.Op.Transport != wire.TransportXRC || !wire.CheckICRC(&ip, udp) {
			t.Fatalf("packet %d (%v): not XRC, or its ICRC does not verify", len(want)+1, p.Op.Name)
		}
		if req := p.Op.Flags.Has(wire.Request); req != (p.XRCETH != nil) || req && p.XRCETH.SRQN() != r {
			t.Fatalf("packet %d (%v): XRCETH %x", len(want)+1, p.Op.Name, []byte(p.XRCETH))
		}
		seen[p.BTH.Opcode()]++
		s := strconv.Itoa(int(p.BTH.Opcode()))
		if p.XRCETH != nil {
			s += " " + hex.EncodeToString(p.XRCETH)
		}
		want = append(want, s)
	}
	for _, op := range []wire.Opcode{wire.XRCSendFirst, wire.XRCSendLast, wire.XRCSendOnlyImm, wire.XRCWriteFirst,
		wire.XRCWriteMiddle, wire.XRCWriteLast, wire.XRCWriteOnlyImm, wire.XRCReadRequest, wire.XRCReadResponseFirst,
		wire.XRCReadResponseLast, wire.XRCFetchAdd, wire.XRCCompareSwap, wire.XRCAtomicAck, wire.XRCAck} {
		if seen[op] == 0 {
			t.Errorf("capture has no %v packet (saw %v)", op, seen)
		}
	}
	if _, err := exec.LookPath("tshark"); err != nil {
		t.Log("tshark not installed: dissector check skipped")
		return
	}
	out, err := exec.Command("tshark", "-n", "--disable-protocol", "rpcordma", "-r", path, "-T", "fields",
		"-e", "frame.protocols", "-e", "infiniband.bth.opcode", "-e", "infiniband.vendor", "-e", "_ws.malformed").Output()
	if err != nil {
		t.Fatalf("tshark: %v", err)
	}
	lines := strings.Split(strings.TrimRight(string(out), "\n"), "\n")
	if len(lines) != len(want) {
		t.Fatalf("tshark printed %d lines for %d packets", len(lines), len(want))
	}
	for i, l := range lines {
		fs := strings.Split(l, "\t")
		if len(fs) != 4 || !strings.HasSuffix(fs[0], "udp:infiniband") || fs[3] != "" {
			t.Fatalf("packet %d: %q", i+1, l)
		}
		// Wireshark 4.0 names the XRC opcodes and shows what follows the BTH as data,
		// its first 4 bytes on their own: for a request, the XRCETH.
		got := fs[1]
		if len(strings.Fields(want[i])) == 2 {
			got += " " + strings.SplitN(fs[2], ",", 2)[0]
		}
		if got != want[i] {
			t.Errorf("packet %d: tshark reads %q, goverbs %q", i+1, got, want[i])
		}
	}
}

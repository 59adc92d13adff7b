package wire_test

import (
	"bytes"
	"errors"
	"io"
	"path/filepath"
	"testing"

	"github.com/goverbs/goverbs/pcap"
	"github.com/goverbs/goverbs/wire"
)

// capPacket is one RoCEv2 datagram from a golden capture.
type capPacket struct {
	file string
	n    int // record number, from 1
	ip   wire.IPHeader
	udp  []byte // BTH..ICRC, own copy
}

// loadCaptures reads every RoCEv2 datagram of testdata/*.pcap: real
// traffic between two Linux rxe devices, Ethernet, IPv4.
func loadCaptures(tb testing.TB) []capPacket {
	tb.Helper()
	files, err := filepath.Glob("testdata/*.pcap")
	if err != nil || len(files) == 0 {
		tb.Fatalf("no captures: %v", err)
	}
	var out []capPacket
	for _, f := range files {
		r, fh, err := pcap.Open(f)
		if err != nil {
			tb.Fatal(err)
		}
		for n := 1; ; n++ {
			_, pkt, err := r.NextIP()
			if err == io.EOF {
				break
			}
			if err != nil {
				tb.Fatalf("%s: %v", f, err)
			}
			ip, udp, err := wire.ParseIPUDP(pkt)
			if err != nil || ip.DstPort != wire.UDPPort {
				continue // e.g. the rdma_cm's TCP or other traffic
			}
			out = append(out, capPacket{filepath.Base(f), n, ip, bytes.Clone(udp)})
		}
		fh.Close()
	}
	return out
}

// TestCaptures decodes every RoCEv2 packet of the golden captures, checks
// its ICRC against the captured IP header, re-encodes the header set byte
// for byte, and checks that every opcode seen has its table entry.
func TestCaptures(t *testing.T) {
	pkts := loadCaptures(t)
	if len(pkts) < 100 {
		t.Fatalf("only %d RoCEv2 packets in the captures", len(pkts))
	}
	seen := map[wire.Opcode]int{}
	for _, c := range pkts {
		var p wire.Packet
		if err := p.Parse(c.udp, 4096); err != nil {
			t.Errorf("%s #%d: %v", c.file, c.n, err)
			continue
		}
		seen[p.BTH.Opcode()]++
		if !c.ip.Is4() {
			t.Errorf("%s #%d: not IPv4", c.file, c.n)
		}
		if !wire.CheckICRC(&c.ip, c.udp) {
			t.Errorf("%s #%d %v: ICRC %08x does not match %08x", c.file, c.n, p.Op.Name,
				p.ICRC, wire.ICRC(&c.ip, c.udp[:len(c.udp)-4]))
		}
		id, df, ok := wire.RecoverIPv4ID(&c.ip, c.udp)
		if !ok || id != c.ip.ID || df != c.ip.DF {
			t.Errorf("%s #%d: RecoverIPv4ID = %#x,%v,%v want %#x,%v", c.file, c.n, id, df, ok, c.ip.ID, c.ip.DF)
		}
		h := p.Headers()
		hl := h.Len()
		if hl != p.Op.HeaderLen {
			t.Fatalf("Len %d != table %d", hl, p.Op.HeaderLen)
		}
		enc := make([]byte, hl)
		if n := h.Encode(enc); n != hl || !bytes.Equal(enc, c.udp[:hl]) {
			t.Errorf("%s #%d %v: re-encoded header differs\n got %x\nwant %x", c.file, c.n, p.Op.Name, enc, c.udp[:hl])
		}
		// Rebuild the whole packet from fields and payload as a sender would.
		full := make([]byte, len(c.udp))
		h.Encode(full)
		copy(full[hl:], p.Payload)
		end := wire.Finish(full, hl, len(p.Payload))
		wire.PutICRC(&c.ip, full, end)
		if end+wire.ICRCLen != len(c.udp) || !bytes.Equal(full, c.udp) {
			t.Errorf("%s #%d: rebuilt packet differs", c.file, c.n)
		}
	}
	t.Logf("%d packets, opcodes %v", len(pkts), seen)
}

func TestCaptureCorruptionDetected(t *testing.T) {
	pkts := loadCaptures(t)
	for i, c := range pkts {
		if i%7 != 0 {
			continue
		}
		b := bytes.Clone(c.udp)
		off := (i * 31) % len(b)
		if off == 4 {
			continue // resv8a (FECN/BECN) is masked out of the ICRC
		}
		b[off] ^= 1 << (i % 8)
		if wire.CheckICRC(&c.ip, b) {
			t.Errorf("%s #%d: single bit flip not detected", c.file, c.n)
		}
		var p wire.Packet
		if err := p.Parse(b, 0); err != nil && !errors.Is(err, wire.ErrLength) &&
			!errors.Is(err, wire.ErrUnknownOpcode) && !errors.Is(err, wire.ErrTVer) && !errors.Is(err, wire.ErrPadCnt) {
			t.Errorf("unexpected error kind %v", err)
		}
	}
}

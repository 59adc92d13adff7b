package wire_test

import (
	"bytes"
	"encoding/binary"
	"net/netip"
	"testing"

	"github.com/goverbs/goverbs/wire"
)

// canonical returns b with the bits Encode does not preserve cleared: the
// DETH and XRCETH reserved bytes and the 16 reserved bytes of a CNP, all sent
// as zero and ignored on receive.
func canonical(p *wire.Packet, b []byte) []byte {
	c := bytes.Clone(b)
	if o := p.Op.DETHOff; o != 0 {
		c[o+4] = 0
	}
	if o := p.Op.XRCETHOff; o != 0 {
		c[o] = 0
	}
	if p.Op.Transport == wire.TransportCNP {
		clear(c[wire.BTHLen:p.Op.HeaderLen])
	}
	return c
}

func FuzzParse(f *testing.F) {
	for _, c := range loadCaptures(f) {
		f.Add(c.udp)
	}
	for _, tc := range allOpcodeCases() {
		f.Add(tc.pkt)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var p wire.Packet
		if err := p.Parse(b, 0); err != nil {
			if p2 := (wire.Packet{}); p2.Parse(b, 4096) == nil {
				t.Fatalf("accepted with an MTU limit but not without: %v", err)
			}
			return
		}
		op := p.BTH.Opcode()
		if p.Op != op.Info() || !p.Op.Valid || p.BTH.TVer() != 0 {
			t.Fatalf("bad op info for %v", op)
		}
		hl := p.Op.HeaderLen
		if got := hl + len(p.Payload) + p.BTH.PadCnt() + wire.ICRCLen; got != len(b) {
			t.Fatalf("lengths do not add up: %d != %d", got, len(b))
		}
		h := p.Headers()
		enc := make([]byte, h.Len())
		if n := h.Encode(enc); n != hl {
			t.Fatalf("Encode returned %d, want %d", n, hl)
		}
		if want := canonical(&p, b[:hl]); !bytes.Equal(enc, want) {
			t.Fatalf("re-encode differs:\n got %x\nwant %x", enc, want)
		}
		var q wire.Packet
		if err := q.Parse(b, len(p.Payload)); err != nil {
			t.Fatalf("rejected with maxPayload = its own payload: %v", err)
		}
		if len(p.Payload) > 1 { // maxPayload 0 means no limit
			if err := q.Parse(b, len(p.Payload)-1); err == nil {
				t.Fatal("accepted a payload over maxPayload")
			}
		}
		ip := wire.IPHeader{Src: netip.MustParseAddr("10.0.0.1"), Dst: netip.MustParseAddr("10.0.0.2"),
			SrcPort: 0xc000, DstPort: wire.UDPPort, ID: 7, DF: true}
		full := bytes.Clone(b)
		wire.PutICRC(&ip, full, len(full)-wire.ICRCLen)
		if !wire.CheckICRC(&ip, full) {
			t.Fatal("PutICRC/CheckICRC disagree")
		}
		if id, df, ok := wire.RecoverIPv4ID(&ip, full); !ok || id != 7 || !df {
			t.Fatalf("RecoverIPv4ID = %v %v %v", id, df, ok)
		}
	})
}

func FuzzParseIPUDP(f *testing.F) {
	ip4 := wire.IPHeader{Src: netip.MustParseAddr("192.168.1.1"), Dst: netip.MustParseAddr("192.168.1.2"),
		SrcPort: 0xc123, DstPort: wire.UDPPort, ID: 0x1234, DF: true, TTL: 64}
	ip6 := wire.IPHeader{Src: netip.MustParseAddr("fe80::1"), Dst: netip.MustParseAddr("fe80::2"),
		SrcPort: 0xc123, DstPort: wire.UDPPort, TTL: 64, FlowLabel: 0x12345, TOS: 0x28}
	for _, c := range loadCaptures(f) {
		f.Add(wire.AppendIPUDPPacket(nil, &c.ip, c.udp))
		f.Add(wire.AppendIPUDPPacket(nil, &ip6, c.udp))
	}
	f.Add(wire.AppendIPUDPPacket(nil, &ip4, []byte("hello")))
	f.Fuzz(func(t *testing.T, b []byte) {
		ip, payload, err := wire.ParseIPUDP(b)
		if err != nil {
			return
		}
		// What parses re-encodes to the same header and payload.
		if ip.TTL == 0 {
			ip.TTL = 64 // AppendIPUDP's default
		}
		again := wire.AppendIPUDPPacket(nil, &ip, payload)
		ip2, payload2, err := wire.ParseIPUDP(again)
		if err != nil || ip2 != ip || !bytes.Equal(payload, payload2) {
			t.Fatalf("round trip: %v\n%+v\n%+v", err, ip, ip2)
		}
		if !ip.Is4() && binary.BigEndian.Uint16(again[46:]) == 0 {
			t.Fatal("IPv6 UDP checksum left zero")
		}
	})
}

func FuzzRecoverIPv4ID(f *testing.F) {
	for i, c := range loadCaptures(f) {
		if i%8 == 0 {
			f.Add(c.udp, c.ip.ID, c.ip.DF, uint32(0))
			f.Add(c.udp, c.ip.ID, c.ip.DF, uint32(1<<uint(i%32)))
		}
	}
	f.Fuzz(func(t *testing.T, b []byte, id uint16, df bool, flip uint32) {
		if len(b) < wire.ICRCLen {
			if _, _, ok := wire.RecoverIPv4ID(&wire.IPHeader{}, b); ok {
				t.Fatal("ok on a too-short packet")
			}
			return
		}
		ip := wire.IPHeader{Src: netip.MustParseAddr("10.1.2.3"), Dst: netip.MustParseAddr("10.3.2.1"),
			SrcPort: 0xc000 | id&0x3fff, DstPort: wire.UDPPort, ID: id, DF: df}
		full := bytes.Clone(b)
		n := len(full) - wire.ICRCLen
		wire.PutICRC(&ip, full, n)
		gid, gdf, ok := wire.RecoverIPv4ID(&ip, full)
		if !ok || gid != id || gdf != df {
			t.Fatalf("recovered %#x %v %v, want %#x %v", gid, gdf, ok, id, df)
		}
		// A corrupted ICRC either has no solution or one that checks.
		x := binary.LittleEndian.Uint32(full[n:]) ^ flip
		binary.LittleEndian.PutUint32(full[n:], x)
		gid, gdf, ok = wire.RecoverIPv4ID(&ip, full)
		if ok {
			ip.ID, ip.DF = gid, gdf
			if !wire.CheckICRC(&ip, full) {
				t.Fatalf("recovered %#x %v does not check", gid, gdf)
			}
		}
	})
}

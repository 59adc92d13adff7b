package wire_test

import (
	"bytes"
	"encoding/binary"
	"hash/crc32"
	"math/rand/v2"
	"net/netip"
	"strconv"
	"testing"

	"github.com/goverbs/goverbs/wire"
)

// naiveICRC builds the masked byte string of Annex A17.3.3 literally and
// runs the standard CRC-32 over it: an independent reference for ICRC.
func naiveICRC(ip *wire.IPHeader, pkt []byte) uint32 {
	full := append(bytes.Clone(pkt), 0, 0, 0, 0)
	hdr := wire.AppendIPUDP(nil, ip, len(full))
	if ip.Is4() {
		hdr[1] = 0xff                 // TOS
		hdr[8] = 0xff                 // TTL
		hdr[10], hdr[11] = 0xff, 0xff // header checksum
	} else {
		hdr[0] |= 0x0f // traffic class and flow label
		hdr[1], hdr[2], hdr[3] = 0xff, 0xff, 0xff
		hdr[7] = 0xff // hop limit
	}
	hdr[len(hdr)-2], hdr[len(hdr)-1] = 0xff, 0xff // UDP checksum
	m := append(bytes.Repeat([]byte{0xff}, 8), hdr...)
	m = append(m, pkt...)
	m[len(m)-len(pkt)+4] = 0xff // BTH resv8a
	return crc32.ChecksumIEEE(m)
}

func randIP(r *rand.Rand, v6 bool) wire.IPHeader {
	ip := wire.IPHeader{SrcPort: uint16(r.Uint32()), DstPort: wire.UDPPort, ID: uint16(r.Uint32()),
		DF: r.IntN(2) == 0, TTL: uint8(r.Uint32()), TOS: uint8(r.Uint32()), FlowLabel: r.Uint32() & 0xfffff}
	if v6 {
		var a, b [16]byte
		binary.LittleEndian.PutUint64(a[:], r.Uint64())
		binary.LittleEndian.PutUint64(b[8:], r.Uint64())
		a[0], b[0] = 0xfe, 0x20
		ip.Src, ip.Dst = netip.AddrFrom16(a), netip.AddrFrom16(b)
		ip.ID, ip.DF = 0, false
	} else {
		var a, b [4]byte
		binary.LittleEndian.PutUint32(a[:], r.Uint32())
		binary.LittleEndian.PutUint32(b[:], r.Uint32())
		ip.Src, ip.Dst = netip.AddrFrom4(a), netip.AddrFrom4(b)
	}
	return ip
}

func TestICRCReference(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for i := range 400 {
		ip := randIP(r, i%2 == 1)
		pkt := make([]byte, 12+r.IntN(300))
		for j := range pkt {
			pkt[j] = byte(r.Uint32())
		}
		want := naiveICRC(&ip, pkt)
		if got := wire.ICRC(&ip, pkt); got != want {
			t.Fatalf("case %d (v6=%v, len %d): %#x want %#x", i, i%2 == 1, len(pkt), got, want)
		}
		// The masked fields do not matter; the others do.
		ip2 := ip
		ip2.TTL++
		ip2.TOS++
		ip2.FlowLabel ^= 1
		pkt2 := bytes.Clone(pkt)
		pkt2[4] ^= 0xc0 // FECN/BECN
		if wire.ICRC(&ip2, pkt2) != want {
			t.Fatal("masked field changed the ICRC")
		}
		ip2.SrcPort++
		if wire.ICRC(&ip2, pkt) == want {
			t.Fatal("UDP source port not covered")
		}
		full := make([]byte, len(pkt)+4)
		copy(full, pkt)
		wire.PutICRC(&ip, full, len(pkt))
		if binary.LittleEndian.Uint32(full[len(pkt):]) != want || !wire.CheckICRC(&ip, full) {
			t.Fatal("PutICRC/CheckICRC")
		}
	}
	// An IPv4-mapped IPv6 source means IPv4.
	ip := randIP(r, false)
	mapped := ip
	mapped.Src = netip.AddrFrom16(ip.Src.As16())
	mapped.Dst = netip.AddrFrom16(ip.Dst.As16())
	pkt := make([]byte, 40)
	if !mapped.Is4() || wire.ICRC(&ip, pkt) != wire.ICRC(&mapped, pkt) {
		t.Error("IPv4-mapped addresses not treated as IPv4")
	}
	// Short inputs do not panic.
	for n := range 13 {
		wire.ICRC(&ip, make([]byte, n))
		wire.CheckICRC(&ip, make([]byte, n))
	}
}

// TestICRCFlow: the ICRC of a packet in pieces (headers, payload slices cut anywhere,
// zero pad), summed on a flow kept for its addresses, ports and DF, is the reference
// ICRC of the same bytes in one slice, for any Identification and length.
func TestICRCFlow(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	for i := range 400 {
		ip := randIP(r, i%2 == 1)
		hdr := make([]byte, 12+4*r.IntN(8))
		payload := make([]byte, r.IntN(600))
		for _, b := range [][]byte{hdr, payload} {
			for j := range b {
				b[j] = byte(r.Uint32())
			}
		}
		pad := r.IntN(4)
		var pieces [][]byte
		for rest := payload; len(rest) > 0; {
			k := min(len(rest), r.IntN(200))
			pieces = append(pieces, rest[:k]) // empty pieces too
			rest = rest[k:]
		}
		whole := append(append(bytes.Clone(hdr), payload...), make([]byte, pad)...)
		want := naiveICRC(&ip, whole)
		// The masked fields and the ID do not belong to the flow.
		flow := wire.NewICRCFlow(&wire.IPHeader{Src: ip.Src, Dst: ip.Dst, SrcPort: ip.SrcPort,
			DstPort: ip.DstPort, DF: ip.DF, ID: ip.ID + 7, TTL: 1, TOS: 2, FlowLabel: 3})
		if got := flow.Sum(ip.ID, hdr, pieces, pad); got != want {
			t.Fatalf("case %d (hdr %d, payload %d in %d pieces, pad %d): %#x want %#x",
				i, len(hdr), len(payload), len(pieces), pad, got, want)
		}
		ip.ID++
		if got := flow.Sum(ip.ID, hdr, pieces, pad); !ip.Is4() && got != want || ip.Is4() && got != naiveICRC(&ip, whole) {
			t.Fatalf("case %d: flow sum for the next ID %#x", i, got)
		}
	}
}

func TestRecoverIPv4ID(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	for i := range 500 {
		ip := randIP(r, false)
		full := make([]byte, 16+r.IntN(5000))
		for j := range full {
			full[j] = byte(r.Uint32())
		}
		wire.PutICRC(&ip, full, len(full)-4)
		probe := ip
		probe.ID, probe.DF = uint16(r.Uint32()), r.IntN(2) == 0 // ignored
		id, df, ok := wire.RecoverIPv4ID(&probe, full)
		if !ok || id != ip.ID || df != ip.DF {
			t.Fatalf("case %d: got %#x %v %v want %#x %v", i, id, df, ok, ip.ID, ip.DF)
		}
	}
	// Corruption: mostly no solution (15 check bits), never a wrong "ok".
	ip := randIP(r, false)
	full := make([]byte, 1024)
	wire.PutICRC(&ip, full, 1020)
	rejected := 0
	for i := range 2000 {
		c := bytes.Clone(full)
		c[12+i%1000] ^= byte(1 + i%255)
		id, df, ok := wire.RecoverIPv4ID(&ip, c)
		if !ok {
			rejected++
			continue
		}
		ip2 := ip
		ip2.ID, ip2.DF = id, df
		if !wire.CheckICRC(&ip2, c) {
			t.Fatal("ok but does not check")
		}
	}
	if rejected < 1990 {
		t.Errorf("only %d of 2000 corruptions rejected", rejected)
	}
	// IPv6: plain check.
	ip6 := randIP(r, true)
	wire.PutICRC(&ip6, full, 1020)
	if _, _, ok := wire.RecoverIPv4ID(&ip6, full); !ok {
		t.Error("IPv6 packet not ok")
	}
	full[100] ^= 1
	if _, _, ok := wire.RecoverIPv4ID(&ip6, full); ok {
		t.Error("corrupt IPv6 packet ok")
	}
}

func TestAllocs(t *testing.T) {
	ip := wire.IPHeader{Src: netip.MustParseAddr("10.0.0.1"), Dst: netip.MustParseAddr("10.0.0.2"), SrcPort: 1, DstPort: wire.UDPPort}
	b := benchPacket(&ip)
	var p wire.Packet
	pieces := [][]byte{b[12:40], b[40:]}
	flow := wire.NewICRCFlow(&ip)
	n := testing.AllocsPerRun(100, func() {
		if p.Parse(b, 4096) != nil || !wire.CheckICRC(&ip, b) {
			t.Fatal("bad")
		}
		flow.Sum(7, b[:12], pieces, 3)
		wire.RecoverIPv4ID(&ip, b)
		h := p.Headers()
		h.Encode(b)
		wire.PutICRC(&ip, b, len(b)-4)
	})
	if n != 0 {
		t.Errorf("%v allocs per packet", n)
	}
}

// benchPacket is an RDMA WRITE ONLY with 4096 bytes of payload.
func benchPacket(ip *wire.IPHeader) []byte {
	h := wire.Headers{BTH: wire.BTHFields{Opcode: wire.RCWriteOnly, PKey: 0xffff, DestQP: 17, AckReq: true, PSN: 1000},
		RETH: wire.RETHFields{VA: 0x7f0000001000, RKey: 0x1234, DMALen: 4096}}
	b := make([]byte, h.Len()+4096+wire.ICRCLen)
	hl := h.Encode(b)
	for i := range 4096 {
		b[hl+i] = byte(i)
	}
	n := wire.Finish(b, hl, 4096)
	wire.PutICRC(ip, b, n)
	return b
}

func BenchmarkEncode(b *testing.B) {
	ip := wire.IPHeader{Src: netip.MustParseAddr("10.0.0.1"), Dst: netip.MustParseAddr("10.0.0.2"), SrcPort: 0xc001, DstPort: wire.UDPPort, DF: true}
	buf := benchPacket(&ip)
	h := wire.Headers{BTH: wire.BTHFields{Opcode: wire.RCWriteOnly, PKey: 0xffff, DestQP: 17, AckReq: true},
		RETH: wire.RETHFields{VA: 0x7f0000001000, RKey: 0x1234, DMALen: 4096}}
	b.ReportAllocs()
	b.SetBytes(int64(len(buf)))
	for i := 0; b.Loop(); i++ {
		h.BTH.PSN = wire.PSN(i)
		hl := h.Encode(buf)
		n := wire.Finish(buf, hl, 4096)
		wire.PutICRC(&ip, buf, n)
	}
}

func BenchmarkDecodeCheck(b *testing.B) {
	ip := wire.IPHeader{Src: netip.MustParseAddr("10.0.0.1"), Dst: netip.MustParseAddr("10.0.0.2"), SrcPort: 0xc001, DstPort: wire.UDPPort, DF: true}
	buf := benchPacket(&ip)
	var p wire.Packet
	b.ReportAllocs()
	b.SetBytes(int64(len(buf)))
	for b.Loop() {
		if err := p.Parse(buf, 4096); err != nil || !wire.CheckICRC(&ip, buf) {
			b.Fatal("bad packet")
		}
	}
}

func BenchmarkICRC(b *testing.B) {
	// 4: an ACK (AETH); 8: an 8-byte SEND; then full packets.
	for _, n := range []int{4, 8, 64, 1024, 4096} {
		b.Run(strconv.Itoa(n), func(b *testing.B) {
			ip := wire.IPHeader{Src: netip.MustParseAddr("10.0.0.1"), Dst: netip.MustParseAddr("10.0.0.2")}
			pkt := make([]byte, wire.BTHLen+n)
			b.ReportAllocs()
			b.SetBytes(int64(len(pkt)))
			for b.Loop() {
				wire.ICRC(&ip, pkt)
			}
		})
	}
}

// BenchmarkICRCFlow is the ICRC as the engine computes it, with the flow's share kept.
func BenchmarkICRCFlow(b *testing.B) {
	for _, n := range []int{4, 8, 64, 1024, 4096} {
		b.Run(strconv.Itoa(n), func(b *testing.B) {
			ip := wire.IPHeader{Src: netip.MustParseAddr("10.0.0.1"), Dst: netip.MustParseAddr("10.0.0.2"), DF: true}
			f := wire.NewICRCFlow(&ip)
			pkt := make([]byte, wire.BTHLen+n)
			b.ReportAllocs()
			b.SetBytes(int64(len(pkt)))
			for b.Loop() {
				f.Sum(0, pkt, nil, 0)
			}
		})
	}
}

// BenchmarkICRCWhole is BenchmarkICRCFlow's packets summed as the engine sends and
// checks them laid out whole: SumInPlace (send) and Verify (receive).
func BenchmarkICRCWhole(b *testing.B) {
	for _, n := range []int{1024, 4096} {
		ip := wire.IPHeader{Src: netip.MustParseAddr("10.0.0.1"), Dst: netip.MustParseAddr("10.0.0.2"), DF: true}
		f := wire.NewICRCFlow(&ip)
		pkt := make([]byte, wire.BTHLen+n+wire.ICRCLen)
		b.Run("send/"+strconv.Itoa(n), func(b *testing.B) {
			b.SetBytes(int64(len(pkt)))
			for b.Loop() {
				f.SumInPlace(0, pkt, len(pkt)-wire.ICRCLen)
			}
		})
		b.Run("check/"+strconv.Itoa(n), func(b *testing.B) {
			b.SetBytes(int64(len(pkt)))
			for b.Loop() {
				f.Verify(0, pkt)
			}
		})
	}
}

func BenchmarkRecoverIPv4ID(b *testing.B) {
	ip := wire.IPHeader{Src: netip.MustParseAddr("10.0.0.1"), Dst: netip.MustParseAddr("10.0.0.2"), ID: 0x4242, DF: true}
	buf := benchPacket(&ip)
	b.ReportAllocs()
	b.SetBytes(int64(len(buf)))
	for b.Loop() {
		if _, _, ok := wire.RecoverIPv4ID(&ip, buf); !ok {
			b.Fatal("not recovered")
		}
	}
}

// TestICRCWhole: SumInPlace and Verify, the one-pass sums over a packet laid out whole,
// agree with the reference ICRC for every length around and across their threshold,
// IPv4 and IPv6, any Identification, a resv8a byte of 0 and not; Verify refuses a packet
// with any one bit flipped.
func TestICRCWhole(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	lengths := []int{wire.BTHLen, 20, 63, 64, 240, 252, 255, 256, 257, 260, 1036, 1040, 1044, 1052, 4108, 4124, 8192 + 256, 8192 + 300}
	for range 200 {
		lengths = append(lengths, wire.BTHLen+r.IntN(5000))
	}
	for i, n := range lengths {
		ip := randIP(r, i%2 == 1)
		pkt := make([]byte, n+wire.ICRCLen)
		for j := range pkt {
			pkt[j] = byte(r.Uint32())
		}
		if i%3 != 0 {
			pkt[4] = 0 // resv8a, as goverbs sends it
		}
		want := naiveICRC(&ip, pkt[:n])
		flow := wire.NewICRCFlow(&wire.IPHeader{Src: ip.Src, Dst: ip.Dst, SrcPort: ip.SrcPort, DstPort: ip.DstPort, DF: ip.DF})
		id := ip.ID
		if !ip.Is4() {
			id = 0
		}
		if got := flow.SumInPlace(id, pkt, n); got != want {
			t.Fatalf("case %d (%d bytes, resv8a %#x): SumInPlace %#x want %#x", i, n, pkt[4], got, want)
		}
		binary.LittleEndian.PutUint32(pkt[n:], want)
		if !flow.Verify(id, pkt) {
			t.Fatalf("case %d (%d bytes, resv8a %#x): Verify refuses a good packet", i, n, pkt[4])
		}
		bit := r.IntN(8 * len(pkt))
		pkt[bit/8] ^= 1 << (bit % 8)
		if flow.Verify(id, pkt) && bit/8 != 4 { // flipping resv8a's bits changes nothing
			t.Fatalf("case %d (%d bytes): Verify takes a packet with bit %d flipped", i, n, bit)
		}
	}
}

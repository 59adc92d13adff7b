package netio

import (
	"bytes"
	"encoding/binary"
	"net/netip"
	"testing"

	"github.com/goverbs/goverbs/wire"
)

// sealPacket is a RoCEv2 datagram of payload bytes (a WRITE ONLY's headers and its
// payload, padded) with room for its ICRC, which it leaves zero.
func sealPacket(payload int) []byte {
	h := wire.Headers{BTH: wire.BTHFields{Opcode: wire.RCWriteOnly, PKey: 0xffff, DestQP: 0x11, PSN: 7},
		RETH: wire.RETHFields{VA: 0x1000, RKey: 9, DMALen: uint32(payload)}}
	b := make([]byte, h.Len()+payload+3+wire.ICRCLen)
	hl := h.Encode(b)
	for i := range payload {
		b[hl+i] = byte(i)
	}
	n := wire.Finish(b, hl, payload)
	return b[:n+wire.ICRCLen]
}

// TestSealICRC: a message its sender left unsealed (Message.SameHost) gets, datagram by
// datagram, the ICRC the UDP backend's IP header needs: a lone datagram, a GSO run (each
// segment numbered as the kernel numbers it) and a message that gathers its payload from
// elsewhere, whose payload stays untouched.
func TestSealICRC(t *testing.T) {
	src := netip.MustParseAddrPort("127.0.0.2:40000")
	dst := netip.MustParseAddrPort("127.0.0.3:4791")
	want := func(t *testing.T, dgram []byte, seg int) {
		t.Helper()
		ip := wire.IPHeader{Src: src.Addr(), Dst: dst.Addr(), SrcPort: src.Port(), DstPort: dst.Port(), DF: true, ID: GSOSegmentID(0, seg)}
		if !wire.CheckICRC(&ip, dgram) {
			t.Errorf("datagram %d: ICRC %08x is not its own", seg, binary.LittleEndian.Uint32(dgram[len(dgram)-4:]))
		}
	}
	t.Run("lone", func(t *testing.T) {
		p := sealPacket(61)
		m := Message{Buf: p, N: len(p), Addr: dst, SameHost: true}
		sealICRC(&m, src)
		want(t, p, 0)
		if m.SameHost {
			t.Error("a sealed message is still marked unsealed")
		}
	})
	t.Run("run", func(t *testing.T) {
		var run []byte
		p := sealPacket(1024)
		for range 3 {
			run = append(run, p...)
		}
		run = append(run, sealPacket(100)...)
		m := Message{Buf: run, N: len(run), Addr: dst, SegSize: len(p), SameHost: true}
		sealICRC(&m, src)
		for i, off := 0, 0; off < len(run); i, off = i+1, off+len(p) {
			want(t, run[off:min(off+len(p), len(run))], i)
		}
	})
	t.Run("gather", func(t *testing.T) {
		whole := sealPacket(4096)
		hl := len(whole) - 4096 - wire.ICRCLen
		hdr, payload, tail := bytes.Clone(whole[:hl]), bytes.Clone(whole[hl:hl+4096]), make([]byte, wire.ICRCLen)
		orig := bytes.Clone(payload)
		two := append(bytes.Clone(whole[:len(whole)-4]), 0, 0, 0, 0) // a copied packet before it, as a run gathers
		m := Message{Iov: [][]byte{two, hdr, payload[:1000], payload[1000:], tail}, N: 2 * len(whole), Addr: dst,
			SegSize: len(whole), SameHost: true}
		sealICRC(&m, src)
		want(t, two, 0)
		want(t, append(append(bytes.Clone(hdr), payload...), tail...), 1)
		if !bytes.Equal(payload, orig) {
			t.Error("sealing wrote into the gathered payload")
		}
	})
}

package afxdp

import (
	"bytes"
	"encoding/binary"
	"net/netip"
	"testing"
	"unsafe"

	"github.com/goverbs/goverbs/netio"
	"github.com/goverbs/goverbs/wire"
)

var (
	local4 = netip.MustParseAddrPort("192.0.2.1:4791")
	peer4  = netip.MustParseAddrPort("192.0.2.2:49152")
	local6 = netip.MustParseAddrPort("[2001:db8::1]:4791")
	peer6  = netip.MustParseAddrPort("[2001:db8::2]:49152")
)

// frameTo builds a frame from peer to local carrying payload, as a goverbs sender does.
func frameTo(peer, local netip.AddrPort, payload []byte) []byte {
	v6 := local.Addr().Is6()
	f := make([]byte, headerLen(v6)+len(payload))
	copy(f[headerLen(v6):], payload)
	var t txTemplate
	t.build([6]byte{2, 0, 0, 0, 0, 2}, [6]byte{2, 0, 0, 0, 0, 1}, peer, local, DefaultTTL)
	t.put(f, len(payload), 0)
	return f
}

func TestHeadersRoundTrip(t *testing.T) {
	for _, c := range []struct{ peer, local netip.AddrPort }{{peer4, local4}, {peer6, local6}} {
		for _, n := range []int{0, 1, 7, 8, 33, 1000, 1472} {
			payload := make([]byte, n)
			for i := range payload {
				payload[i] = byte(i*13 + n)
			}
			f := frameTo(c.peer, c.local, payload)
			p, why := parseFrame(f, c.local)
			if why != dropNone || p.src != c.peer || p.dst != c.local || !bytes.Equal(p.payload, payload) {
				t.Fatalf("%v, %d bytes: %v %+v", c.local, n, why, p)
			}
			// Ethernet pads short frames to 60 bytes: the padding is not the datagram's.
			padded := append(bytes.Clone(f), make([]byte, 64)...)
			if p, why := parseFrame(padded, c.local); why != dropNone || !bytes.Equal(p.payload, payload) {
				t.Fatalf("%v, %d bytes, padded: %v %d bytes", c.local, n, why, len(p.payload))
			}
		}
	}
}

func TestParseFrameRefuses(t *testing.T) {
	f4 := frameTo(peer4, local4, []byte("payload!"))
	f6 := frameTo(peer6, local6, []byte("payload!"))
	mod := func(f []byte, fn func(b []byte)) []byte { b := bytes.Clone(f); fn(b); return b }
	ip := ethHeaderLen
	for _, c := range []struct {
		name  string
		frame []byte
		local netip.AddrPort
		want  dropReason
	}{
		{"empty", nil, local4, dropMalformed},
		{"ethernet only", f4[:ethHeaderLen], local4, dropMalformed},
		{"ipv4 cut", f4[:ethHeaderLen+10], local4, dropMalformed},
		{"ipv4 total beyond frame", mod(f4, func(b []byte) { binary.BigEndian.PutUint16(b[ip+2:], 2000) }), local4, dropMalformed},
		{"ipv4 ihl too small", mod(f4, func(b []byte) { b[ip] = 0x44 }), local4, dropMalformed},
		{"ipv4 bad checksum", mod(f4, func(b []byte) { b[ip+8]-- }), local4, dropMalformed},
		{"ipv4 version", mod(f4, func(b []byte) { b[ip] = 0x65 }), local4, dropMalformed},
		{"udp length beyond ip", mod(f4, func(b []byte) { binary.BigEndian.PutUint16(b[ip+24:], 100) }), local4, dropMalformed},
		{"udp length under header", mod(f4, func(b []byte) { binary.BigEndian.PutUint16(b[ip+24:], 7) }), local4, dropMalformed},
		{"other port", frameTo(peer4, netip.AddrPortFrom(local4.Addr(), 5000), nil), local4, dropNotOurs},
		{"other address", frameTo(peer4, netip.MustParseAddrPort("192.0.2.9:4791"), nil), local4, dropNotOurs},
		{"ipv6 to an ipv4 conn", f6, local4, dropNotOurs},
		{"ipv6 cut", f6[:ethHeaderLen+39], local6, dropMalformed},
		{"ipv6 payload length beyond frame", mod(f6, func(b []byte) { binary.BigEndian.PutUint16(b[ip+4:], 900) }), local6, dropMalformed},
		{"ipv6 extension header", mod(f6, func(b []byte) { b[ip+6] = 0 }), local6, dropNotOurs},
		{"ipv6 udp cut", mod(f6, func(b []byte) { binary.BigEndian.PutUint16(b[ip+4:], 4) }), local6, dropMalformed},
	} {
		if _, why := parseFrame(c.frame, c.local); why != c.want {
			t.Errorf("%s: %v, want %v", c.name, why, c.want)
		}
	}
	// A fragment's header checksum must be right for the fragment check to be reached.
	frag := bytes.Clone(f4)
	frag[ip+6] |= 0x20
	binary.BigEndian.PutUint16(frag[ip+10:], 0)
	binary.BigEndian.PutUint16(frag[ip+10:], ^wire.ChecksumFold(wire.Checksum(0, frag[ip:ip+ipv4HeaderLen])))
	if _, why := parseFrame(frag, local4); why != dropNotOurs {
		t.Errorf("fragment: %v", why)
	}
}

// FuzzParseFrame feeds parseFrame hostile frames: it must never panic, and what it
// accepts must be a datagram to local whose payload lies inside the frame, which a
// sender re-encodes to a frame that parses the same.
func FuzzParseFrame(f *testing.F) {
	f.Add(frameTo(peer4, local4, []byte("seed")), false)
	f.Add(frameTo(peer6, local6, []byte("seed six")), true)
	f.Add(frameTo(peer4, local4, nil), false)
	f.Fuzz(func(t *testing.T, frame []byte, v6 bool) {
		local := local4
		if v6 {
			local = local6
		}
		p, why := parseFrame(frame, local)
		if why != dropNone {
			return
		}
		if p.dst != local {
			t.Fatalf("accepted a datagram to %v", p.dst)
		}
		if len(p.payload) > 0 {
			start := uintptr(unsafe.Pointer(unsafe.SliceData(p.payload))) - uintptr(unsafe.Pointer(unsafe.SliceData(frame)))
			if start+uintptr(len(p.payload)) > uintptr(len(frame)) {
				t.Fatal("payload outside the frame")
			}
		}
		again, why := parseFrame(frameTo(p.src, local, p.payload), local)
		if why != dropNone || again.src != p.src || !bytes.Equal(again.payload, p.payload) {
			t.Fatalf("re-encoded: %v %+v", why, again)
		}
	})
}

// A datagram's headers patched from its destination's template are what wire builds
// from scratch for the same datagram (the IP header, checksum included, and the UDP
// header; for IPv6 wire.AppendIPUDPPacket's checksum), for every ECN codepoint and
// length, one template serving all of them; and the UDP checksum verifies (RFC 768).
func TestTemplateMatchesWire(t *testing.T) {
	for _, c := range []struct{ src, dst netip.AddrPort }{{local4, peer4}, {local6, peer6}} {
		var tm txTemplate
		srcMAC, dstMAC := [6]byte{2, 0, 0, 0, 0, 1}, [6]byte{2, 0, 0, 0, 0, 2}
		tm.build(srcMAC, dstMAC, c.src, c.dst, DefaultTTL)
		v6 := c.dst.Addr().Is6()
		for _, n := range []int{0, 1, 7, 8, 33, 1000, 1471, 4096} {
			for _, ecn := range []netio.ECN{netio.ECNNotECT, netio.ECNECT1, netio.ECNECT0, netio.ECNCE} {
				payload := make([]byte, n)
				for i := range payload {
					payload[i] = byte(i*29 + n + 0xf0)
				}
				f := make([]byte, headerLen(v6)+n)
				copy(f[headerLen(v6):], payload)
				tm.put(f, n, netio.DSField(0xb8, ecn)) // DSCP 46 (EF) beside each codepoint
				ip := wire.IPHeader{Src: c.src.Addr(), Dst: c.dst.Addr(), SrcPort: c.src.Port(), DstPort: c.dst.Port(),
					DF: !v6, TTL: DefaultTTL, TOS: netio.DSField(0xb8, ecn)}
				want := wire.AppendIPUDPPacket(nil, &ip, payload)
				got := f[ethHeaderLen:]
				udpAt := ipv4HeaderLen
				if v6 {
					udpAt = ipv6HeaderLen
				}
				if !bytes.Equal(got[:udpAt+6], want[:udpAt+6]) || !bytes.Equal(got[udpAt+8:], want[udpAt+8:]) {
					t.Fatalf("%v, %d bytes, %v:\n got %x\nwant %x", c.dst, n, ecn, got[:udpAt+8], want[:udpAt+8])
				}
				if v6 && !bytes.Equal(got[udpAt+6:udpAt+8], want[udpAt+6:udpAt+8]) {
					t.Fatalf("%v, %d bytes, %v: UDP checksum %x, wire's %x", c.dst, n, ecn, got[udpAt+6:udpAt+8], want[udpAt+6:udpAt+8])
				}
				if !bytes.Equal(f[0:6], dstMAC[:]) || !bytes.Equal(f[6:12], srcMAC[:]) {
					t.Fatalf("Ethernet addresses %x", f[:12])
				}
				// The UDP checksum over the pseudo-header, header and payload sums to all ones.
				var pseudo []byte
				if v6 {
					pseudo = append(pseudo, got[8:40]...)
				} else {
					pseudo = append(pseudo, got[12:20]...)
				}
				udp := got[udpAt:]
				s := wire.Checksum(wire.Checksum(0, pseudo)+protoUDP+uint64(len(udp)), udp)
				if wire.ChecksumFold(s) != 0xffff {
					t.Fatalf("%v, %d bytes, %v: UDP checksum does not verify", c.dst, n, ecn)
				}
				p, why := parseFrame(f, c.dst)
				if why != dropNone || !bytes.Equal(p.payload, payload) || p.ecn != ecn || p.tc != 0xb8 {
					t.Fatalf("%v, %d bytes, %v: parse %v, ECN %v, traffic class %#x", c.dst, n, ecn, why, p.ecn, p.tc)
				}
			}
		}
	}
}

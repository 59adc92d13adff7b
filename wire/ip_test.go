package wire_test

import (
	"bytes"
	"errors"
	"net/netip"
	"testing"

	"github.com/goverbs/goverbs/wire"
)

func TestIPUDP(t *testing.T) {
	v4 := wire.IPHeader{Src: netip.MustParseAddr("192.0.2.1"), Dst: netip.MustParseAddr("192.0.2.2"),
		SrcPort: 0xc0de, DstPort: wire.UDPPort, ID: 0xbeef, DF: true, TTL: 3, TOS: 0x02}
	v6 := wire.IPHeader{Src: netip.MustParseAddr("2001:db8::1"), Dst: netip.MustParseAddr("2001:db8::2"),
		SrcPort: 0xc0de, DstPort: wire.UDPPort, TTL: 255, TOS: 0xb8, FlowLabel: 0xabcde}
	payload := []byte("0123456789abcdefX")
	for _, ip := range []wire.IPHeader{v4, v6} {
		b := wire.AppendIPUDPPacket([]byte("prefix"), &ip, payload)
		if string(b[:6]) != "prefix" {
			t.Fatal("prefix clobbered")
		}
		b = append(b[6:], 0, 0, 0) // link-layer padding is ignored
		got, pl, err := wire.ParseIPUDP(b)
		if err != nil || got != ip || !bytes.Equal(pl, payload) {
			t.Errorf("%v: %v %+v %q", ip.Src, err, got, pl)
		}
	}
	// rxe's IPv4: checksum right, UDP checksum zero.
	b := wire.AppendIPUDP(nil, &v4, 100)
	if len(b) != 28 || b[0] != 0x45 || b[6] != 0x40 || b[26] != 0 || b[27] != 0 || b[2] != 0 || b[3] != 128 {
		t.Errorf("IPv4 header %x", b)
	}
	if d := (wire.IPHeader{Src: v4.Src, Dst: v4.Dst}); wire.AppendIPUDP(nil, &d, 0)[8] != 64 {
		t.Error("default TTL not 64")
	}

	ok4 := wire.AppendIPUDPPacket(nil, &v4, payload)
	ok6 := wire.AppendIPUDPPacket(nil, &v6, payload)
	mod := func(b []byte, f func([]byte)) []byte { c := bytes.Clone(b); f(c); return c }
	m16 := netip.MustParseAddr("::ffff:1.2.3.4").As16()
	cases := []struct {
		name string
		b    []byte
		want error
	}{
		{"empty", nil, wire.ErrIPTruncated},
		{"v4 short", ok4[:19], wire.ErrIPTruncated},
		{"v4 total > len", ok4[:30], wire.ErrIPTruncated},
		{"v4 options", mod(ok4, func(c []byte) { c[0] = 0x46 }), wire.ErrIPOptions},
		{"v4 MF", mod(ok4, func(c []byte) { c[6] |= 0x20 }), wire.ErrIPFragment},
		{"v4 offset", mod(ok4, func(c []byte) { c[7] = 1 }), wire.ErrIPFragment},
		{"v4 tcp", mod(ok4, func(c []byte) { c[9] = 6 }), wire.ErrNotUDP},
		{"v4 no udp", mod(ok4, func(c []byte) { c[2], c[3] = 0, 24 }), wire.ErrIPTruncated},
		{"udp len big", mod(ok4, func(c []byte) { c[24] = 0xff }), wire.ErrUDPLength},
		{"udp len small", mod(ok4, func(c []byte) { c[24], c[25] = 0, 7 }), wire.ErrUDPLength},
		{"v5", mod(ok4, func(c []byte) { c[0] = 0x55 }), wire.ErrIPVersion},
		{"v6 short", ok6[:39], wire.ErrIPTruncated},
		{"v6 payload > len", ok6[:50], wire.ErrIPTruncated},
		{"v6 ext header", mod(ok6, func(c []byte) { c[6] = 0 }), wire.ErrNotUDP},
		{"v6 mapped src", mod(ok6, func(c []byte) { copy(c[8:], m16[:]) }), wire.ErrMappedAddr},
		{"v6 mapped dst", mod(ok6, func(c []byte) { copy(c[24:], m16[:]) }), wire.ErrMappedAddr},
	}
	for _, c := range cases {
		if _, _, err := wire.ParseIPUDP(c.b); !errors.Is(err, c.want) {
			t.Errorf("%s: %v want %v", c.name, err, c.want)
		}
	}
}

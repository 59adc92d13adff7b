package wire_test

import (
	"strconv"
	"testing"
	"time"

	"github.com/goverbs/goverbs/wire"
)

func TestPSN(t *testing.T) {
	const top = wire.PSN(wire.PSNMask)
	cases := []struct {
		p, q wire.PSN
		diff int32
	}{
		{5, 3, 2},
		{3, 5, -2},
		{0, top, 1}, // wrap
		{top, 0, -1},
		{1 << 23, 0, 1 << 23}, // exactly half: after
		{0, 1 << 23, 1 << 23},
		{1<<23 + 1, 0, -(1<<23 - 1)},
		{7, 7, 0},
	}
	for _, c := range cases {
		if d := c.p.Diff(c.q); d != c.diff {
			t.Errorf("%v.Diff(%v) = %d want %d", c.p, c.q, d, c.diff)
		}
		if c.p.Before(c.q) != (c.diff < 0) || c.p.After(c.q) != (c.diff > 0) {
			t.Errorf("%v vs %v: Before/After wrong", c.p, c.q)
		}
	}
	if top.Add(1) != 0 || wire.PSN(0).Sub(1) != top || wire.PSN(10).Add(1<<24) != 10 || top.Add(3) != 2 {
		t.Error("Add/Sub do not wrap")
	}
	win := []struct {
		p, start wire.PSN
		size     uint32
		in       bool
	}{
		{10, 10, 1, true},
		{11, 10, 1, false},
		{9, 10, 5, false},
		{top, top - 1, 3, true},
		{1, top - 1, 3, false},
		{0, top - 1, 3, true},
		{0, 0, 0, false},
		{12345, 99, 1 << 24, true},
	}
	for _, c := range win {
		if c.p.InWindow(c.start, c.size) != c.in {
			t.Errorf("%v.InWindow(%v,%d) != %v", c.p, c.start, c.size, c.in)
		}
	}
}

func TestMTU(t *testing.T) {
	for m, n := range map[wire.MTU]int{wire.MTU256: 256, wire.MTU512: 512, wire.MTU1024: 1024, wire.MTU2048: 2048, wire.MTU4096: 4096} {
		if !m.Valid() || m.Bytes() != n || m.String() != strconv.Itoa(n) {
			t.Errorf("%d: %d %q", m, m.Bytes(), m.String())
		}
		if got, ok := wire.MTUFromBytes(n); !ok || got != m {
			t.Errorf("MTUFromBytes(%d) = %v %v", n, got, ok)
		}
	}
	for _, m := range []wire.MTU{0, 6, 255} {
		if m.Valid() || m.Bytes() != 0 {
			t.Errorf("%d valid", m)
		}
	}
	for _, n := range []int{0, 255, 1000, 1500, 8192} {
		if _, ok := wire.MTUFromBytes(n); ok {
			t.Errorf("MTUFromBytes(%d) ok", n)
		}
	}
	for iface, want := range map[int]wire.MTU{
		1500: wire.MTU1024, 1104: wire.MTU1024, 1103: wire.MTU512, 9000: wire.MTU4096,
		4176: wire.MTU4096, 4175: wire.MTU2048, 576: wire.MTU256, 68: wire.MTU256, 0: wire.MTU256, 65536: wire.MTU4096,
	} {
		if got := wire.ActiveMTU(iface); got != want {
			t.Errorf("ActiveMTU(%d) = %v want %v", iface, got, want)
		}
	}
	for n, want := range []int{0, 3, 2, 1, 0, 3} {
		if wire.PadLen(n) != want {
			t.Errorf("PadLen(%d) = %d", n, wire.PadLen(n))
		}
	}
}

func TestSyndrome(t *testing.T) {
	for c := range uint8(32) {
		s := wire.ACKSyndrome(c)
		if s.Type() != wire.AckTypeACK || s.Credits() != c || uint8(s) != c {
			t.Errorf("ACK %d -> %#x", c, uint8(s))
		}
		r := wire.RNRNAKSyndrome(c)
		if r.Type() != wire.AckTypeRNRNAK || r.RNRTimer() != c || uint8(r) != 0x20|c {
			t.Errorf("RNR %d -> %#x", c, uint8(r))
		}
		n := wire.NAKSyndrome(wire.NAKCode(c))
		if n.Type() != wire.AckTypeNAK || n.NAKCode() != wire.NAKCode(c) || uint8(n) != 0x60|c {
			t.Errorf("NAK %d -> %#x", c, uint8(n))
		}
	}
	if wire.ACKSyndrome(wire.CreditsInvalid) != 0x1f || wire.Syndrome(0x40).Type() != wire.AckTypeReserved {
		t.Error("constants")
	}
	for s, want := range map[wire.Syndrome]string{
		0x1f: "ACK credits=31", 0x2c: "RNR NAK timer=12", 0x60: "NAK PSN sequence error",
		0x61: "NAK invalid request", 0x62: "NAK remote access error", 0x63: "NAK remote operational error",
		0x64: "NAK invalid RD request", 0x65: "NAK reserved NAK code 5", 0x40: "reserved syndrome 0x40",
	} {
		if s.String() != want {
			t.Errorf("%#x: %q want %q", uint8(s), s.String(), want)
		}
	}
	// IBTA table 45.
	for i, want := range map[uint8]time.Duration{
		0: 655360 * time.Microsecond, 1: 10 * time.Microsecond, 2: 20 * time.Microsecond, 5: 60 * time.Microsecond,
		12: 640 * time.Microsecond, 14: 1280 * time.Microsecond, 24: 40960 * time.Microsecond, 31: 491520 * time.Microsecond,
	} {
		if got := wire.RNRTimerDuration(i); got != want {
			t.Errorf("RNRTimerDuration(%d) = %v want %v", i, got, want)
		}
	}
	prev := time.Duration(0)
	for i := uint8(1); i < 32; i++ {
		d := wire.RNRTimerDuration(i)
		if d <= prev {
			t.Errorf("table 45 not increasing at %d", i)
		}
		prev = d
	}
}

func TestBTHAccessors(t *testing.T) {
	b := make(wire.BTH, wire.BTHLen)
	b.SetOpcode(wire.RCFetchAdd)
	b.SetSE(true)
	b.SetMigReq(true)
	b.SetPadCnt(3)
	b.SetTVer(0)
	b.SetPKey(0xffff)
	b.SetFECN(true)
	b.SetBECN(true)
	b.SetDestQP(0x1234567) // 24 bits kept
	b.SetAckReq(true)
	b.SetPSN(0xabcdef)
	want := []byte{0x14, 0xf0, 0xff, 0xff, 0xc0, 0x23, 0x45, 0x67, 0x80, 0xab, 0xcd, 0xef}
	if string(b) != string(want) {
		t.Fatalf("got %x want %x", []byte(b), want)
	}
	if !b.FECN() || !b.BECN() || b.Resv8a() != 0xc0 || b.DestQP() != 0x234567 || b.PadCnt() != 3 || !b.SE() || !b.MigReq() || !b.AckReq() || b.PSN() != 0xabcdef {
		t.Error("getters")
	}
	b.SetSE(false)
	b.SetFECN(false)
	b.SetAckReq(false)
	b.SetPadCnt(1)
	if b[1] != 0x50 || b[4] != 0x40 || b[8] != 0 {
		t.Errorf("clear bits: %x", []byte(b))
	}
	// Reserved bits survive Fields/Encode.
	b[8] = 0x7f
	f := b.Fields()
	c := make(wire.BTH, wire.BTHLen)
	c.Encode(&f)
	if string(c) != string(b) {
		t.Errorf("resv7 lost: %x vs %x", []byte(c), []byte(b))
	}
}

func TestExtAccessors(t *testing.T) {
	a := make(wire.AETH, 4)
	a.SetSyndrome(wire.RNRNAKSyndrome(14))
	a.SetMSN(0xff123456)
	if string(a) != "\x2e\x12\x34\x56" || a.MSN() != 0x123456 {
		t.Errorf("AETH %x", []byte(a))
	}
	d := make(wire.DETH, 8)
	d.SetQKey(0x80010000)
	d.SetSrcQP(0x1000001)
	if string(d) != "\x80\x01\x00\x00\x00\x00\x00\x01" || d.SrcQP() != 1 {
		t.Errorf("DETH %x", []byte(d))
	}
	r := make(wire.RETH, 16)
	r.SetVA(0x0102030405060708)
	r.SetRKey(0x0a0b0c0d)
	r.SetDMALen(4096)
	if r.Fields() != (wire.RETHFields{VA: 0x0102030405060708, RKey: 0x0a0b0c0d, DMALen: 4096}) || r[15] != 0 || r[14] != 0x10 {
		t.Errorf("RETH %x", []byte(r))
	}
	at := make(wire.AtomicETH, 28)
	at.Encode(&wire.AtomicETHFields{VA: 1, RKey: 2, SwapAdd: 3, Compare: 4})
	if at[7] != 1 || at[11] != 2 || at[19] != 3 || at[27] != 4 || at.Fields().Compare != 4 {
		t.Errorf("AtomicETH %x", []byte(at))
	}
	im := make(wire.ImmDt, 4)
	im.SetImm(0x11223344)
	ie := make(wire.IETH, 4)
	ie.SetRKey(0x55667788)
	aa := make(wire.AtomicAckETH, 8)
	aa.SetOrigData(0x99)
	if im[0] != 0x11 || im.Imm() != 0x11223344 || ie.RKey() != 0x55667788 || ie[3] != 0x88 || aa[7] != 0x99 || aa.OrigData() != 0x99 {
		t.Error("ImmDt/IETH/AtomicAckETH")
	}
	x := wire.XRCETH{0xff, 0, 0, 0}
	x.SetSRQN(0xff123456)
	if string(x) != "\x00\x12\x34\x56" || x.SRQN() != 0x123456 {
		t.Errorf("XRCETH %x", []byte(x))
	}
}

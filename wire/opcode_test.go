package wire_test

import (
	"bytes"
	"errors"
	"fmt"
	"testing"

	"github.com/goverbs/goverbs/wire"
)

type opCase struct {
	h       wire.Headers
	payload []byte
	pkt     []byte // encoded with Finish and a zero ICRC
}

// allOpcodeCases builds one packet for every valid opcode with every header
// field set to a distinct non-zero value.
func allOpcodeCases() []opCase {
	var out []opCase
	for i := range 256 {
		op := wire.Opcode(i)
		if !op.Valid() {
			continue
		}
		in := op.Info()
		h := wire.Headers{
			BTH: wire.BTHFields{Opcode: op, SE: i&1 != 0, MigReq: true, PKey: 0xffff,
				Resv8a: byte(i) & 0xc0, DestQP: 0xabcdef ^ uint32(i), AckReq: in.Flags.Has(wire.CanAckReq),
				PSN: wire.PSN(0xfffff0).Add(uint32(i))},
			RETH:         wire.RETHFields{VA: 0x1122334455667788, RKey: 0x99aabbcc, DMALen: 0x3000},
			AETH:         wire.AETHFields{Syndrome: wire.ACKSyndrome(wire.CreditsInvalid), MSN: 0x123456},
			AtomicETH:    wire.AtomicETHFields{VA: 0x1000, RKey: 0xdeadbeef, SwapAdd: 0x0102030405060708, Compare: 0xf1f2f3f4f5f6f7f8},
			AtomicAckETH: 0xcafebabedeadbeef,
			ImmDt:        0x01020304,
			IETH:         0x55667788,
			DETH:         wire.DETHFields{QKey: 0x11111111, SrcQP: 0x000123},
			XRCSRQN:      0x00abcd ^ uint32(i),
		}
		var payload []byte
		if in.Flags.Has(wire.HasPayload) {
			payload = bytes.Repeat([]byte{byte(i)}, 13+i%4)
		}
		b := make([]byte, h.Len()+len(payload)+3+wire.ICRCLen)
		hl := h.Encode(b)
		copy(b[hl:], payload)
		n := wire.Finish(b, hl, len(payload))
		h.BTH.PadCnt = uint8(wire.PadLen(len(payload)))
		out = append(out, opCase{h, payload, b[:n+wire.ICRCLen]})
	}
	return out
}

// TestOpcodeRoundTrip encodes every opcode, parses it back and compares
// every field of every header the table says is present.
func TestOpcodeRoundTrip(t *testing.T) {
	cases := allOpcodeCases()
	if len(cases) != 23+12+2+1+23 {
		t.Fatalf("%d valid opcodes, want 61", len(cases))
	}
	for _, tc := range cases {
		op := tc.h.BTH.Opcode
		t.Run(op.String(), func(t *testing.T) {
			var p wire.Packet
			if err := p.Parse(tc.pkt, 4096); err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(p.Payload, tc.payload) {
				t.Errorf("payload %x want %x", p.Payload, tc.payload)
			}
			got := p.Headers()
			want := tc.h
			in := op.Info()
			// Absent headers decode as zero.
			if !in.Flags.Has(wire.HasRETH) {
				want.RETH = wire.RETHFields{}
			}
			if !in.Flags.Has(wire.HasAETH) {
				want.AETH = wire.AETHFields{}
			}
			if !in.Flags.Has(wire.HasAtomicETH) {
				want.AtomicETH = wire.AtomicETHFields{}
			}
			if !in.Flags.Has(wire.HasAtomicAckETH) {
				want.AtomicAckETH = 0
			}
			if !in.Flags.Has(wire.HasImmDt) {
				want.ImmDt = 0
			}
			if !in.Flags.Has(wire.HasIETH) {
				want.IETH = 0
			}
			if !in.Flags.Has(wire.HasDETH) {
				want.DETH = wire.DETHFields{}
			}
			if !in.Flags.Has(wire.HasXRCETH) {
				want.XRCSRQN = 0
			}
			if got != want {
				t.Errorf("headers\n got %+v\nwant %+v", got, want)
			}
			for _, hv := range []struct {
				flag wire.OpFlags
				view []byte
			}{
				{wire.HasRETH, p.RETH}, {wire.HasAETH, p.AETH}, {wire.HasAtomicETH, p.AtomicETH},
				{wire.HasAtomicAckETH, p.AtomicAckETH}, {wire.HasImmDt, p.ImmDt}, {wire.HasIETH, p.IETH}, {wire.HasDETH, p.DETH},
				{wire.HasXRCETH, p.XRCETH},
			} {
				if (hv.view != nil) != in.Flags.Has(hv.flag) {
					t.Errorf("view presence for flag %#x wrong", hv.flag)
				}
			}
			enc := make([]byte, got.Len())
			got.Encode(enc)
			if !bytes.Equal(enc, tc.pkt[:in.HeaderLen]) {
				t.Errorf("re-encode differs")
			}
		})
	}
}

// TestOpcodeTable checks the table against IBTA table 36 as a list of
// expected header sets, lengths and classes.
func TestOpcodeTable(t *testing.T) {
	type row struct {
		op    wire.Opcode
		name  string
		hlen  int
		flags wire.OpFlags
	}
	R, P := wire.Request, wire.HasPayload
	rows := []row{
		{wire.RCSendFirst, "RC_SEND_FIRST", 12, R | P | wire.First | wire.ConsumesRecvWQE | wire.CanAckReq | wire.OpSend},
		{wire.RCSendMiddle, "RC_SEND_MIDDLE", 12, R | P | wire.Middle | wire.OpSend},
		{wire.RCSendLastImm, "RC_SEND_LAST_WITH_IMMEDIATE", 16, R | P | wire.Last | wire.HasImmDt},
		{wire.RCSendOnlyInv, "RC_SEND_ONLY_WITH_INVALIDATE", 16, R | P | wire.Only | wire.HasIETH},
		{wire.RCWriteFirst, "RC_RDMA_WRITE_FIRST", 28, R | P | wire.First | wire.HasRETH | wire.OpWrite},
		{wire.RCWriteOnlyImm, "RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE", 32, R | P | wire.HasRETH | wire.HasImmDt | wire.ConsumesRecvWQE},
		{wire.RCReadRequest, "RC_RDMA_READ_REQUEST", 28, R | wire.HasRETH | wire.OpRead | wire.CanAckReq},
		{wire.RCReadResponseFirst, "RC_RDMA_READ_RESPONSE_FIRST", 16, wire.Response | P | wire.HasAETH | wire.First},
		{wire.RCReadResponseMiddle, "RC_RDMA_READ_RESPONSE_MIDDLE", 12, wire.Response | P | wire.Middle},
		{wire.RCAck, "RC_ACKNOWLEDGE", 16, wire.Response | wire.HasAETH | wire.OpAck},
		{wire.RCAtomicAck, "RC_ATOMIC_ACKNOWLEDGE", 24, wire.Response | wire.HasAETH | wire.HasAtomicAckETH | wire.OpAtomic},
		{wire.RCCompareSwap, "RC_COMPARE_SWAP", 40, R | wire.HasAtomicETH | wire.OpAtomic},
		{wire.RCFetchAdd, "RC_FETCH_ADD", 40, R | wire.HasAtomicETH | wire.OpAtomic},
		{wire.UCSendFirst, "UC_SEND_FIRST", 12, R | P | wire.First | wire.ConsumesRecvWQE},
		{wire.UCWriteOnlyImm, "UC_RDMA_WRITE_ONLY_WITH_IMMEDIATE", 32, R | P | wire.HasRETH | wire.HasImmDt | wire.ConsumesRecvWQE},
		{wire.UDSendOnly, "UD_SEND_ONLY", 20, R | P | wire.HasDETH | wire.Only | wire.ConsumesRecvWQE},
		{wire.UDSendOnlyImm, "UD_SEND_ONLY_WITH_IMMEDIATE", 24, R | P | wire.HasDETH | wire.HasImmDt},
		{wire.CNP, "CNP", 28, wire.Only},
		// XRC (Annex A14): requests carry the 4-byte XRCETH first, responses do not.
		{wire.XRCSendFirst, "XRC_SEND_FIRST", 16, R | P | wire.First | wire.HasXRCETH | wire.ConsumesRecvWQE | wire.CanAckReq},
		{wire.XRCSendOnlyImm, "XRC_SEND_ONLY_WITH_IMMEDIATE", 20, R | P | wire.Only | wire.HasXRCETH | wire.HasImmDt},
		{wire.XRCSendOnlyInv, "XRC_SEND_ONLY_WITH_INVALIDATE", 20, R | P | wire.Only | wire.HasXRCETH | wire.HasIETH},
		{wire.XRCWriteFirst, "XRC_RDMA_WRITE_FIRST", 32, R | P | wire.First | wire.HasXRCETH | wire.HasRETH | wire.OpWrite},
		{wire.XRCWriteMiddle, "XRC_RDMA_WRITE_MIDDLE", 16, R | P | wire.Middle | wire.HasXRCETH},
		{wire.XRCWriteOnlyImm, "XRC_RDMA_WRITE_ONLY_WITH_IMMEDIATE", 36, R | P | wire.HasXRCETH | wire.HasRETH | wire.HasImmDt | wire.ConsumesRecvWQE},
		{wire.XRCReadRequest, "XRC_RDMA_READ_REQUEST", 32, R | wire.HasXRCETH | wire.HasRETH | wire.OpRead | wire.CanAckReq},
		{wire.XRCReadResponseFirst, "XRC_RDMA_READ_RESPONSE_FIRST", 16, wire.Response | P | wire.HasAETH | wire.First},
		{wire.XRCAck, "XRC_ACKNOWLEDGE", 16, wire.Response | wire.HasAETH | wire.OpAck},
		{wire.XRCAtomicAck, "XRC_ATOMIC_ACKNOWLEDGE", 24, wire.Response | wire.HasAETH | wire.HasAtomicAckETH},
		{wire.XRCCompareSwap, "XRC_COMPARE_SWAP", 44, R | wire.HasXRCETH | wire.HasAtomicETH | wire.OpAtomic},
		{wire.XRCFetchAdd, "XRC_FETCH_ADD", 44, R | wire.HasXRCETH | wire.HasAtomicETH | wire.OpAtomic},
	}
	for _, r := range rows {
		in := r.op.Info()
		if !in.Valid || in.Name != r.name || r.op.String() != r.name || in.HeaderLen != r.hlen || !in.Flags.Has(r.flags) {
			t.Errorf("%#x: got %+v, want %s hlen %d flags %#x", uint8(r.op), *in, r.name, r.hlen, r.flags)
		}
	}
	// Offsets: ImmDt after RETH, AtomicAckETH after AETH, ImmDt after DETH.
	if in := wire.RCWriteOnlyImm.Info(); in.RETHOff != 12 || in.ImmDtOff != 28 {
		t.Errorf("WRITE_ONLY_IMM offsets %+v", in)
	}
	if in := wire.RCAtomicAck.Info(); in.AETHOff != 12 || in.AtomicAckETHOff != 16 {
		t.Errorf("ATOMIC_ACK offsets %+v", in)
	}
	if in := wire.UDSendOnlyImm.Info(); in.DETHOff != 12 || in.ImmDtOff != 20 {
		t.Errorf("UD_SEND_ONLY_IMM offsets %+v", in)
	}
	// XRCETH directly after the BTH, the RC headers after it.
	if in := wire.XRCWriteOnlyImm.Info(); in.XRCETHOff != 12 || in.RETHOff != 16 || in.ImmDtOff != 32 {
		t.Errorf("XRC_RDMA_WRITE_ONLY_IMM offsets %+v", in)
	}
	if in := wire.XRCCompareSwap.Info(); in.XRCETHOff != 12 || in.AtomicETHOff != 16 {
		t.Errorf("XRC_COMPARE_SWAP offsets %+v", in)
	}
	if in := wire.XRCAtomicAck.Info(); in.XRCETHOff != 0 || in.AETHOff != 12 || in.AtomicAckETHOff != 16 {
		t.Errorf("XRC_ATOMIC_ACK offsets %+v", in)
	}
	// Classes that must not be set.
	for i := range 256 {
		op := wire.Opcode(i)
		in := op.Info()
		if in == nil {
			t.Fatalf("%#x: nil info", i)
		}
		if !in.Valid {
			if op.Valid() || in.HeaderLen != wire.BTHLen || op.String() != fmt.Sprintf("UNKNOWN(0x%x)", i) {
				t.Errorf("%#x: bad unknown row %+v %q", i, in, op)
			}
			continue
		}
		f := in.Flags
		if in.Transport != wire.Transport(i>>5) && !(op == wire.CNP && in.Transport == wire.TransportCNP) {
			t.Errorf("%v: transport %v", op, in.Transport)
		}
		if f.Has(wire.Request) == f.Has(wire.Response) && op != wire.CNP {
			t.Errorf("%v: request xor response", op)
		}
		n := 0
		for _, x := range []wire.OpFlags{wire.First, wire.Middle, wire.Last, wire.Only} {
			if f.Has(x) {
				n++
			}
		}
		if n != 1 {
			t.Errorf("%v: %d of First/Middle/Last/Only", op, n)
		}
		reliable := in.Transport == wire.TransportRC || in.Transport == wire.TransportXRC
		if f.Has(wire.CanAckReq) != (reliable && f.Has(wire.Request)) {
			t.Errorf("%v: CanAckReq wrong", op)
		}
		if f.Has(wire.HasXRCETH) != (in.Transport == wire.TransportXRC && f.Has(wire.Request)) {
			t.Errorf("%v: HasXRCETH wrong", op)
		}
		if f.Has(wire.OpSend) && !f.Has(wire.ConsumesRecvWQE) {
			t.Errorf("%v: SEND must consume a receive WQE", op)
		}
		if f.Has(wire.OpWrite) && f.Has(wire.ConsumesRecvWQE) != f.Has(wire.HasImmDt) {
			t.Errorf("%v: WRITE consumes a receive WQE iff it carries immediate data", op)
		}
	}
	for _, op := range []wire.Opcode{0x15, 0x18, 0x2c, 0x40, 0x4c, 0x63, 0x66, 0x80, 0x82, 0xb5, 0xb8, 0xc0, 0xff} {
		if op.Valid() {
			t.Errorf("%#x should be unknown", uint8(op))
		}
	}
}

func TestParseErrors(t *testing.T) {
	mk := func(op wire.Opcode, data int, pad int) []byte {
		h := wire.Headers{BTH: wire.BTHFields{Opcode: op, PadCnt: uint8(pad), PKey: 0xffff}}
		b := make([]byte, h.Len()+data+wire.ICRCLen)
		h.Encode(b)
		return b
	}
	tver := mk(wire.RCSendOnly, 4, 0)
	tver[1] |= 1
	cases := []struct {
		name string
		b    []byte
		max  int
		want error
	}{
		{"empty", nil, 0, wire.ErrTruncated},
		{"short BTH", make([]byte, 15), 0, wire.ErrTruncated},
		{"unknown opcode", mk(0x15, 0, 0), 0, wire.ErrUnknownOpcode},
		{"RD opcode", mk(0x40, 0, 0), 0, wire.ErrUnknownOpcode},
		{"tver", tver, 0, wire.ErrTVer},
		{"short RETH", mk(wire.RCWriteOnly, 0, 0)[:20], 0, wire.ErrTruncated},
		{"ack with payload", mk(wire.RCAck, 4, 0), 0, wire.ErrLength},
		{"read req with payload", mk(wire.RCReadRequest, 4, 0), 0, wire.ErrLength},
		{"ack with padcnt", mk(wire.RCAck, 0, 1), 0, wire.ErrPadCnt},
		{"cnp short", mk(wire.CNP, 0, 0)[:20], 0, wire.ErrTruncated},
		{"cnp long", mk(wire.CNP, 4, 0), 0, wire.ErrLength},
		{"unaligned", mk(wire.RCSendOnly, 5, 0), 0, wire.ErrLength},
		{"first empty", mk(wire.RCSendFirst, 0, 0), 0, wire.ErrLength},
		{"middle all pad", mk(wire.RCWriteMiddle, 4, 0)[:16], 0, wire.ErrLength},
		{"padcnt > data", mk(wire.RCSendOnly, 0, 2), 0, wire.ErrPadCnt},
		{"too long", mk(wire.RCSendOnly, 260, 0), 256, wire.ErrTooLong},
	}
	for _, c := range cases {
		var p wire.Packet
		err := p.Parse(c.b, c.max)
		var pe *wire.ParseError
		if !errors.Is(err, c.want) || !errors.As(err, &pe) || pe.Reason.Sentinel() != c.want {
			t.Errorf("%s: got %v, want %v", c.name, err, c.want)
			continue
		}
		for _, other := range []error{wire.ErrTruncated, wire.ErrTVer, wire.ErrUnknownOpcode, wire.ErrLength, wire.ErrPadCnt, wire.ErrTooLong} {
			if other != c.want && errors.Is(err, other) {
				t.Errorf("%s: also matches %v", c.name, other)
			}
		}
		t.Logf("%s: %v", c.name, err)
	}
	// Accepted edge cases.
	for _, c := range []struct {
		name string
		b    []byte
		max  int
	}{
		{"send only empty", mk(wire.RCSendOnly, 0, 0), 0},
		{"write last empty", mk(wire.RCWriteLast, 0, 0), 0},
		{"payload 1 pad 3", mk(wire.UDSendOnly, 4, 3), 1},
		{"exactly MTU", mk(wire.RCSendMiddle, 256, 0), 256},
		{"cnp", mk(wire.CNP, 0, 0), 0},
	} {
		var p wire.Packet
		if err := p.Parse(c.b, c.max); err != nil {
			t.Errorf("%s: %v", c.name, err)
		}
	}
}

func TestFinish(t *testing.T) {
	for n := range 9 {
		b := bytes.Repeat([]byte{0xee}, 12+n+3)
		end := wire.Finish(b, 12, n)
		pad := wire.PadLen(n)
		if end != 12+n+pad || end%4 != 0 || wire.BTH(b).PadCnt() != pad {
			t.Errorf("n=%d: end %d pad %d", n, end, wire.BTH(b).PadCnt())
		}
		for _, c := range b[12+n : end] {
			if c != 0 {
				t.Errorf("n=%d: pad not zeroed", n)
			}
		}
	}
}

// TestParseView parses every opcode from a private copy of its headers (TryParseView),
// as the same-host receive path does, and checks that it finds what TryParse finds and
// that a change to the shared bytes afterwards reaches none of the headers it checked.
func TestParseView(t *testing.T) {
	for _, tc := range allOpcodeCases() {
		op := tc.h.BTH.Opcode
		if op.Info().HeaderLen > wire.MaxHeaderLen {
			t.Fatalf("%v: headers of %d bytes, MaxHeaderLen %d", op, op.Info().HeaderLen, wire.MaxHeaderLen)
		}
		view := append([]byte(nil), tc.pkt...)
		head := make([]byte, wire.MaxHeaderLen)
		head = head[:copy(head, view)]
		var p wire.Packet
		if e, ok := p.TryParseView(head, view, 4096); !ok {
			t.Fatalf("%v: %v", op, &e)
		}
		var q wire.Packet
		if err := q.Parse(tc.pkt, 4096); err != nil {
			t.Fatal(err)
		}
		if p.Headers() != q.Headers() || !bytes.Equal(p.Payload, q.Payload) || p.ICRC != q.ICRC || !bytes.Equal(p.Head, tc.pkt[:op.Info().HeaderLen]) {
			t.Fatalf("%v: TryParseView differs from TryParse", op)
		}
		for i := range min(len(view), wire.MaxHeaderLen) {
			view[i] ^= 0xff // the peer scribbles on its ring after the copy
		}
		if p.Headers() != q.Headers() || !bytes.Equal(p.Head, tc.pkt[:op.Info().HeaderLen]) {
			t.Fatalf("%v: a change to the shared bytes reached the parsed headers", op)
		}
	}
	var p wire.Packet
	if _, ok := p.TryParseView(make([]byte, 8), make([]byte, 100), 4096); ok {
		t.Fatal("TryParseView accepted a head shorter than the headers")
	}
}

package wire

import "testing"

// TestParseErrorFields pins what each failed check reports (ParseError's Reason, Opcode,
// Len, Want and Value, which the error's text and the engine's drop counters show): the
// order of the checks and the figures each one gives.
func TestParseErrorFields(t *testing.T) {
	// pkt is a packet of op with payload bytes of payload (the headers' length taken
	// from the table, a 4-byte ICRC) and PadCnt pad.
	pkt := func(op Opcode, payload, pad int) []byte {
		hl := opTable[op].HeaderLen
		if hl == 0 {
			hl = BTHLen
		}
		b := make([]byte, hl+payload+ICRCLen)
		b[0] = byte(op)
		BTH(b[:BTHLen]).SetPadCnt(pad)
		return b
	}
	tver := pkt(RCSendOnly, 4, 0)
	tver[1] |= 0x02
	unknown := pkt(RCSendOnly, 4, 0)
	unknown[0] = 0x1f
	cases := []struct {
		name       string
		buf        []byte
		maxPayload int
		want       ParseError
	}{
		{"empty", nil, 0, ParseError{Reason: ReasonTruncated, Len: 0, Want: BTHLen + ICRCLen}},
		{"short of a BTH", []byte{byte(RCSendOnly), 0, 0}, 0, ParseError{Reason: ReasonTruncated, Opcode: RCSendOnly, Len: 3, Want: BTHLen + ICRCLen}},
		{"unknown opcode", unknown, 0, ParseError{Reason: ReasonUnknownOpcode, Opcode: 0x1f, Len: len(unknown)}},
		{"TVer", tver, 0, ParseError{Reason: ReasonTVer, Opcode: RCSendOnly, Len: len(tver), Value: 2}},
		{"READ request short of its RETH", pkt(RCReadRequest, 0, 0)[:BTHLen+8+ICRCLen], 0, ParseError{Reason: ReasonTruncated, Opcode: RCReadRequest, Len: BTHLen + 8 + ICRCLen, Want: opTable[RCReadRequest].HeaderLen + ICRCLen}},
		{"ACK with payload", pkt(RCAck, 4, 0), 0, ParseError{Reason: ReasonLength, Opcode: RCAck, Len: len(pkt(RCAck, 4, 0)), Want: 0, Value: 4}},
		{"ACK with PadCnt", pkt(RCAck, 0, 2), 0, ParseError{Reason: ReasonPadCnt, Opcode: RCAck, Len: len(pkt(RCAck, 0, 2)), Want: 0, Value: 2}},
		{"payload not a multiple of 4", pkt(RCSendOnly, 5, 0), 0, ParseError{Reason: ReasonLength, Opcode: RCSendOnly, Len: len(pkt(RCSendOnly, 5, 0)), Want: -1, Value: 5}},
		{"PadCnt beyond the payload", pkt(RCSendLast, 0, 3), 0, ParseError{Reason: ReasonPadCnt, Opcode: RCSendLast, Len: len(pkt(RCSendLast, 0, 3)), Want: 0, Value: 3}},
		{"empty FIRST", pkt(RCSendFirst, 4, 0)[:BTHLen+ICRCLen], 0, ParseError{Reason: ReasonLength, Opcode: RCSendFirst, Len: BTHLen + ICRCLen, Want: -1, Value: 0}},
		{"empty MIDDLE", pkt(RCWriteMiddle, 0, 0), 0, ParseError{Reason: ReasonLength, Opcode: RCWriteMiddle, Len: BTHLen + ICRCLen, Want: -1, Value: 0}},
		{"empty SEND ONLY", pkt(RCSendOnly, 0, 0), 0, ParseError{}},
		{"longer than allowed", pkt(RCSendOnly, 64, 0), 60, ParseError{Reason: ReasonTooLong, Opcode: RCSendOnly, Len: len(pkt(RCSendOnly, 64, 0)), Want: 60, Value: 64}},
	}
	for _, c := range cases {
		var p Packet
		got, ok := p.TryParse(c.buf, c.maxPayload)
		if ok != (c.want == ParseError{}) || got != c.want {
			t.Errorf("%s: got %+v ok=%v, want %+v", c.name, got, ok, c.want)
		}
	}
	if _, ok := new(Packet).TryParse(pkt(RCSendOnly, 8, 0), 8); !ok {
		t.Errorf("a good SEND ONLY of 8 bytes refused")
	}
}

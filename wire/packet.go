package wire

import "encoding/binary"

// Packet is a parsed view of one RoCEv2 UDP payload, BTH through ICRC. The
// header slices and Payload alias Buf; nothing is copied or allocated.
type Packet struct {
	Buf []byte // the whole UDP payload including the ICRC
	// Head is the headers as checked (BTH and extended headers, Op.HeaderLen bytes):
	// Buf's start, or a private copy of it when Buf lies in shared memory
	// (TryParseView). Whoever keeps a packet keeps these headers, not Buf's.
	Head []byte
	Op   *OpInfo
	BTH  BTH

	// Extended headers; nil when the opcode does not carry them.
	RETH         RETH
	AETH         AETH
	AtomicETH    AtomicETH
	AtomicAckETH AtomicAckETH
	ImmDt        ImmDt
	IETH         IETH
	DETH         DETH
	XRCETH       XRCETH

	Payload []byte // the data, without pad
	ICRC    uint32 // as transmitted: the last four bytes read little endian
}

func sub(b []byte, off, n int) []byte {
	if off == 0 {
		return nil
	}
	return b[off : off+n : off+n]
}

// Parse checks buf once and points p's fields into it. The checks, in order:
//
//   - at least BTH and ICRC (ErrTruncated);
//   - the opcode is in the table (ErrUnknownOpcode): RC, UC, UD, XRC or CNP;
//   - TVer is 0 (ErrTVer, IBTA 9.2);
//   - at least the opcode's headers and ICRC (ErrTruncated);
//   - opcodes without payload (READ request, ACK, atomic ACK, atomic
//     requests, CNP) have nothing between headers and ICRC (ErrLength),
//     so their PadCnt must be 0 (ErrPadCnt);
//   - for opcodes with payload, payload plus pad is a multiple of four,
//     as every header length is, so the packet is (ErrLength, IBTA 9.2);
//   - PadCnt is not larger than payload plus pad (ErrPadCnt);
//   - FIRST and MIDDLE packets carry data (ErrLength). The spec requires
//     exactly the path MTU there, but the path MTU is the QP's state, not
//     the packet's; the responder checks it. LAST and ONLY may be empty;
//   - with maxPayload > 0, the payload is at most maxPayload (ErrTooLong).
//
// The ICRC is not checked here, because it needs the IP header: see
// CheckICRC. Reserved fields are not checked (IBTA: ignored on receive).
// On error p is left in an unspecified state.
func (p *Packet) Parse(buf []byte, maxPayload int) error {
	e, ok := p.TryParse(buf, maxPayload)
	if ok {
		return nil
	}
	err := e // only a failure allocates
	return &err
}

// TryParse is Parse for a receive path that counts and drops what fails: the failure
// comes back by value, so a flood of malformed packets allocates nothing.
func (p *Packet) TryParse(buf []byte, maxPayload int) (ParseError, bool) {
	return p.tryParse(buf, buf, maxPayload)
}

// MaxHeaderLen is the longest header set of any opcode (BTH and extended headers): a
// private copy of a packet's first MaxHeaderLen bytes (or all of it, if shorter) holds
// every header TryParseView checks.
const MaxHeaderLen = 64

// TryParseView is TryParse for a packet that lies in memory another process may write
// while it is read (a same-host peer's ring): head is a private copy of its first
// min(len(view), MaxHeaderLen) bytes, taken once, and everything the checks and the
// receive path decide on comes from it. The header slices point into head, Payload into
// view (its bytes are only ever copied to where the checked headers say), ICRC is read
// once from view's last four bytes. Buf is view.
func (p *Packet) TryParseView(head, view []byte, maxPayload int) (ParseError, bool) {
	if len(head) < min(len(view), MaxHeaderLen) {
		return ParseError{Reason: ReasonTruncated, Len: len(head), Want: min(len(view), MaxHeaderLen)}, false
	}
	return p.tryParse(head, view, maxPayload)
}

// TryParseLent is TryParseView for a packet whose payload lies apart from the rest of
// it (a same-host peer's datagram whose payload was lent from the sender's memory,
// netio.Message.Lent): rest is a private copy of its headers followed by its pad and
// ICRC, payload is its payload. The header slices point into rest, Payload is payload;
// Buf is nil.
func (p *Packet) TryParseLent(rest, payload []byte, maxPayload int) (ParseError, bool) {
	n := len(rest) + len(payload)
	if perr, ok := p.parseHeaders(rest, n, maxPayload); !ok {
		return perr, false
	}
	hl, pad := len(p.Head), p.BTH.PadCnt()
	if len(rest) != hl+pad+ICRCLen {
		// The bytes after the headers must be the pad and the ICRC, with no payload.
		return ParseError{Reason: ReasonLength, Opcode: p.BTH.Opcode(), Len: n, Want: hl + pad + ICRCLen, Value: len(rest)}, false
	}
	p.Buf, p.Payload = nil, payload[:len(payload):len(payload)]
	p.ICRC = binary.LittleEndian.Uint32(rest[len(rest)-ICRCLen:])
	return ParseError{}, true
}

// WireLen is the packet's length on the wire (the UDP payload): len(Buf), or for a
// packet parsed by TryParseLent its headers, payload, pad and ICRC.
func (p *Packet) WireLen() int {
	if p.Buf != nil {
		return len(p.Buf)
	}
	return len(p.Head) + len(p.Payload) + p.BTH.PadCnt() + ICRCLen
}

// tryParse parses the packet buf whose headers are read from hdr: buf itself, or a
// private copy of its first bytes (TryParseView).
func (p *Packet) tryParse(hdr, buf []byte, maxPayload int) (ParseError, bool) {
	if perr, ok := p.parseHeaders(hdr, len(buf), maxPayload); !ok {
		return perr, false
	}
	n := len(buf)
	end := n - ICRCLen - p.BTH.PadCnt()
	p.Buf, p.Payload = buf, buf[len(p.Head):end:end]
	p.ICRC = binary.LittleEndian.Uint32(buf[n-ICRCLen:])
	return ParseError{}, true
}

// parseHeaders checks a packet of n bytes whose headers are read from hdr, and points
// p's header fields into hdr (Head, Op, BTH and the extended headers). The caller sets
// Buf, Payload and ICRC.
func (p *Packet) parseHeaders(hdr []byte, n, maxPayload int) (ParseError, bool) {
	if n < BTHLen+ICRCLen || len(hdr) < BTHLen {
		op := Opcode(0)
		if n > 0 && len(hdr) > 0 {
			op = Opcode(hdr[0])
		}
		return ParseError{Reason: ReasonTruncated, Opcode: op, Len: n, Want: BTHLen + ICRCLen}, false
	}
	bth := BTH(hdr[:BTHLen:BTHLen])
	op := bth.Opcode()
	in := &opTable[op]
	if !in.Valid {
		return ParseError{Reason: ReasonUnknownOpcode, Opcode: op, Len: n}, false
	}
	if v := bth.TVer(); v != 0 {
		return ParseError{Reason: ReasonTVer, Opcode: op, Len: n, Value: int(v)}, false
	}
	hl := in.HeaderLen
	if n < hl+ICRCLen || len(hdr) < hl {
		return ParseError{Reason: ReasonTruncated, Opcode: op, Len: n, Want: hl + ICRCLen}, false
	}
	data := n - hl - ICRCLen // payload + pad
	pad := bth.PadCnt()
	if !in.Flags.Has(HasPayload) {
		if data != 0 {
			return ParseError{Reason: ReasonLength, Opcode: op, Len: n, Want: 0, Value: data}, false
		}
		if pad != 0 {
			return ParseError{Reason: ReasonPadCnt, Opcode: op, Len: n, Want: data, Value: pad}, false
		}
	} else {
		if data&3 != 0 {
			return ParseError{Reason: ReasonLength, Opcode: op, Len: n, Want: -1, Value: data}, false
		}
		if pad > data {
			return ParseError{Reason: ReasonPadCnt, Opcode: op, Len: n, Want: data, Value: pad}, false
		}
		if data-pad == 0 && in.Flags&(First|Middle) != 0 {
			return ParseError{Reason: ReasonLength, Opcode: op, Len: n, Want: -1, Value: data}, false
		}
		if maxPayload > 0 && data-pad > maxPayload {
			return ParseError{Reason: ReasonTooLong, Opcode: op, Len: n, Want: maxPayload, Value: data - pad}, false
		}
	}
	// Field by field rather than one composite literal, which is built aside and copied
	// in by the runtime's pointer-aware copy: about twice as slow (BenchmarkDecodeCheck).
	p.Head, p.Op, p.BTH = hdr[:hl:hl], in, bth
	p.RETH = sub(hdr, in.RETHOff, RETHLen)
	p.AETH = sub(hdr, in.AETHOff, AETHLen)
	p.AtomicETH = sub(hdr, in.AtomicETHOff, AtomicETHLen)
	p.AtomicAckETH = sub(hdr, in.AtomicAckETHOff, AtomicAckETHLen)
	p.ImmDt = sub(hdr, in.ImmDtOff, ImmDtLen)
	p.IETH = sub(hdr, in.IETHOff, IETHLen)
	p.DETH = sub(hdr, in.DETHOff, DETHLen)
	p.XRCETH = sub(hdr, in.XRCETHOff, XRCETHLen)
	return ParseError{}, true
}

// Headers is everything needed to encode one packet's header set. Only the
// headers the opcode carries (per the table) are used.
type Headers struct {
	BTH          BTHFields
	RETH         RETHFields
	AETH         AETHFields
	AtomicETH    AtomicETHFields
	AtomicAckETH uint64 // original remote data
	ImmDt        uint32
	IETH         uint32 // R_Key to invalidate
	DETH         DETHFields
	XRCSRQN      uint32 // the XRCETH's SRQ number
}

// Headers decodes the headers present in p; absent ones are zero.
func (p *Packet) Headers() Headers {
	var h Headers
	h.BTH = p.BTH.Fields()
	if p.RETH != nil {
		h.RETH = p.RETH.Fields()
	}
	if p.AETH != nil {
		h.AETH = p.AETH.Fields()
	}
	if p.AtomicETH != nil {
		h.AtomicETH = p.AtomicETH.Fields()
	}
	if p.AtomicAckETH != nil {
		h.AtomicAckETH = p.AtomicAckETH.OrigData()
	}
	if p.ImmDt != nil {
		h.ImmDt = p.ImmDt.Imm()
	}
	if p.IETH != nil {
		h.IETH = p.IETH.RKey()
	}
	if p.DETH != nil {
		h.DETH = p.DETH.Fields()
	}
	if p.XRCETH != nil {
		h.XRCSRQN = p.XRCETH.SRQN()
	}
	return h
}

// Len is the header length for h.BTH.Opcode from the table (BTHLen for an
// unknown opcode).
func (h *Headers) Len() int { return opTable[h.BTH.Opcode].HeaderLen }

// Encode writes the BTH and the opcode's extended headers into b, which must
// hold at least Len bytes, and returns Len. It does not touch payload, pad or
// ICRC; PadCnt is written as h.BTH.PadCnt says (see Finish). For a CNP the
// 16 reserved bytes are written as zero; the DETH and XRCETH reserved bytes likewise.
func (h *Headers) Encode(b []byte) int {
	in := &opTable[h.BTH.Opcode]
	b = b[:in.HeaderLen]
	BTH(b).Encode(&h.BTH)
	if o := in.XRCETHOff; o != 0 {
		XRCETH(b[o:]).SetSRQN(h.XRCSRQN)
	}
	if o := in.DETHOff; o != 0 {
		DETH(b[o:]).Encode(&h.DETH)
	}
	if o := in.RETHOff; o != 0 {
		RETH(b[o:]).Encode(&h.RETH)
	}
	if o := in.AtomicETHOff; o != 0 {
		AtomicETH(b[o:]).Encode(&h.AtomicETH)
	}
	if o := in.AETHOff; o != 0 {
		AETH(b[o:]).Encode(&h.AETH)
	}
	if o := in.AtomicAckETHOff; o != 0 {
		AtomicAckETH(b[o:]).SetOrigData(h.AtomicAckETH)
	}
	if o := in.ImmDtOff; o != 0 {
		ImmDt(b[o:]).SetImm(h.ImmDt)
	}
	if o := in.IETHOff; o != 0 {
		IETH(b[o:]).SetRKey(h.IETH)
	}
	if in.Transport == TransportCNP {
		clear(b[BTHLen:])
	}
	return in.HeaderLen
}

// Finish completes a packet whose headers occupy b[:hlen] and whose payload
// the caller has copied to b[hlen:hlen+payloadLen]: it zeroes the pad bytes,
// sets the BTH PadCnt and returns the length without ICRC (hlen +
// payloadLen + pad). Follow it with PutICRC.
func Finish(b []byte, hlen, payloadLen int) int {
	pad := PadLen(payloadLen)
	end := hlen + payloadLen
	clear(b[end : end+pad])
	BTH(b).SetPadCnt(pad)
	return end + pad
}

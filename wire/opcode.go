package wire

import "strconv"

// Opcode is the BTH OpCode (IBTA Vol. 1 9.2, table 36). The top three bits
// select the transport service, the low five the operation.
type Opcode uint8

// Opcodes for the RC, UC, UD and XRC services and the RoCEv2 CNP.
const (
	RCSendFirst          Opcode = 0x00
	RCSendMiddle         Opcode = 0x01
	RCSendLast           Opcode = 0x02
	RCSendLastImm        Opcode = 0x03
	RCSendOnly           Opcode = 0x04
	RCSendOnlyImm        Opcode = 0x05
	RCWriteFirst         Opcode = 0x06
	RCWriteMiddle        Opcode = 0x07
	RCWriteLast          Opcode = 0x08
	RCWriteLastImm       Opcode = 0x09
	RCWriteOnly          Opcode = 0x0a
	RCWriteOnlyImm       Opcode = 0x0b
	RCReadRequest        Opcode = 0x0c
	RCReadResponseFirst  Opcode = 0x0d
	RCReadResponseMiddle Opcode = 0x0e
	RCReadResponseLast   Opcode = 0x0f
	RCReadResponseOnly   Opcode = 0x10
	RCAck                Opcode = 0x11
	RCAtomicAck          Opcode = 0x12
	RCCompareSwap        Opcode = 0x13
	RCFetchAdd           Opcode = 0x14
	RCSendLastInv        Opcode = 0x16
	RCSendOnlyInv        Opcode = 0x17

	UCSendFirst    Opcode = 0x20
	UCSendMiddle   Opcode = 0x21
	UCSendLast     Opcode = 0x22
	UCSendLastImm  Opcode = 0x23
	UCSendOnly     Opcode = 0x24
	UCSendOnlyImm  Opcode = 0x25
	UCWriteFirst   Opcode = 0x26
	UCWriteMiddle  Opcode = 0x27
	UCWriteLast    Opcode = 0x28
	UCWriteLastImm Opcode = 0x29
	UCWriteOnly    Opcode = 0x2a
	UCWriteOnlyImm Opcode = 0x2b

	UDSendOnly    Opcode = 0x64
	UDSendOnlyImm Opcode = 0x65

	// XRC (IBTA Vol. 1 Annex A14, the XRC transport service, 101b): the RC operations
	// at 0xA0 + their RC code, requests carrying an XRCETH after the BTH.
	XRCSendFirst          Opcode = 0xa0
	XRCSendMiddle         Opcode = 0xa1
	XRCSendLast           Opcode = 0xa2
	XRCSendLastImm        Opcode = 0xa3
	XRCSendOnly           Opcode = 0xa4
	XRCSendOnlyImm        Opcode = 0xa5
	XRCWriteFirst         Opcode = 0xa6
	XRCWriteMiddle        Opcode = 0xa7
	XRCWriteLast          Opcode = 0xa8
	XRCWriteLastImm       Opcode = 0xa9
	XRCWriteOnly          Opcode = 0xaa
	XRCWriteOnlyImm       Opcode = 0xab
	XRCReadRequest        Opcode = 0xac
	XRCReadResponseFirst  Opcode = 0xad
	XRCReadResponseMiddle Opcode = 0xae
	XRCReadResponseLast   Opcode = 0xaf
	XRCReadResponseOnly   Opcode = 0xb0
	XRCAck                Opcode = 0xb1
	XRCAtomicAck          Opcode = 0xb2
	XRCCompareSwap        Opcode = 0xb3
	XRCFetchAdd           Opcode = 0xb4
	XRCSendLastInv        Opcode = 0xb6
	XRCSendOnlyInv        Opcode = 0xb7

	// CNP is the RoCEv2 Congestion Notification Packet (Annex A17.9.3).
	CNP Opcode = 0x81
)

// Transport is the service an opcode belongs to (bits 7..5 of the opcode).
type Transport uint8

// Transports. RD opcodes are not implemented and are unknown to the table.
const (
	TransportRC  Transport = 0
	TransportUC  Transport = 1
	TransportRD  Transport = 2
	TransportUD  Transport = 3
	TransportCNP Transport = 4
	TransportXRC Transport = 5
)

// String names the transport.
func (t Transport) String() string {
	switch t {
	case TransportRC:
		return "RC"
	case TransportUC:
		return "UC"
	case TransportRD:
		return "RD"
	case TransportUD:
		return "UD"
	case TransportCNP:
		return "CNP"
	case TransportXRC:
		return "XRC"
	}
	return "Transport(" + strconv.Itoa(int(t)) + ")"
}

// OpFlags describe an opcode: which headers follow the BTH, and its class.
type OpFlags uint32

// Opcode flags.
const (
	HasRETH OpFlags = 1 << iota
	HasAETH
	HasAtomicETH
	HasAtomicAckETH
	HasImmDt
	HasIETH
	HasDETH
	HasXRCETH  // XRC requests (Annex A14): the target's XRC SRQ number
	HasPayload // the packet carries a (possibly empty) data payload

	Request  // sent by a requester
	Response // sent by a responder: ACK, atomic ACK, READ response
	First    // first packet of a multi-packet message
	Middle
	Last
	Only // a single-packet message, and every non-data packet

	// ConsumesRecvWQE: the message consumes a receive WQE at the
	// responder (every SEND opcode, and RDMA WRITE with immediate on its
	// LAST/ONLY packet). rxe's RXE_RWR_MASK.
	ConsumesRecvWQE
	// CanAckReq: the AckReq bit has a meaning (every RC request). UC and
	// UD are unacknowledged and responses are never acknowledged.
	CanAckReq

	OpSend
	OpWrite
	OpRead
	OpAtomic
	OpAck
)

// Has reports whether every bit of x is set in f.
func (f OpFlags) Has(x OpFlags) bool { return f&x == x }

// OpInfo is one row of the opcode table.
type OpInfo struct {
	Name      string // as rxe and Wireshark spell it, e.g. "RC_SEND_FIRST"
	Valid     bool
	Flags     OpFlags
	Transport Transport
	HeaderLen int // BTH and all extended headers (for CNP also its 16 reserved bytes)

	// Offsets from the start of the BTH; 0 when the header is absent.
	RETHOff, AETHOff, AtomicETHOff, AtomicAckETHOff, ImmDtOff, IETHOff, DETHOff, XRCETHOff int
}

// opTable is filled once at init from the short descriptions below. The
// order of extended headers after the BTH is fixed by IBTA 9.2 (figure 109):
// DETH, RETH, AtomicETH, AETH, AtomicAckETH, ImmDt, IETH; the XRC annex (A14)
// puts the XRCETH first, directly after the BTH (where RD's RDETH would be).
// The order in which the flags are tested in init reproduces it.
var opTable [256]OpInfo

type opDesc struct {
	op    Opcode
	name  string
	flags OpFlags
}

const (
	sendReq  = Request | OpSend | ConsumesRecvWQE | HasPayload
	writeReq = Request | OpWrite | HasPayload
	readResp = Response | OpRead | HasPayload
)

// The RC rows of table 36. UC reuses rows 0x00..0x0b (without CanAckReq); XRC
// reuses them all at 0xA0 + the RC code, its requests with an XRCETH (Annex A14:
// responses go back to the initiator QP and name no SRQ).
var rcOps = [...]opDesc{
	{RCSendFirst, "SEND_FIRST", sendReq | First},
	{RCSendMiddle, "SEND_MIDDLE", sendReq | Middle},
	{RCSendLast, "SEND_LAST", sendReq | Last},
	{RCSendLastImm, "SEND_LAST_WITH_IMMEDIATE", sendReq | Last | HasImmDt},
	{RCSendOnly, "SEND_ONLY", sendReq | Only},
	{RCSendOnlyImm, "SEND_ONLY_WITH_IMMEDIATE", sendReq | Only | HasImmDt},
	{RCWriteFirst, "RDMA_WRITE_FIRST", writeReq | First | HasRETH},
	{RCWriteMiddle, "RDMA_WRITE_MIDDLE", writeReq | Middle},
	{RCWriteLast, "RDMA_WRITE_LAST", writeReq | Last},
	{RCWriteLastImm, "RDMA_WRITE_LAST_WITH_IMMEDIATE", writeReq | Last | HasImmDt | ConsumesRecvWQE},
	{RCWriteOnly, "RDMA_WRITE_ONLY", writeReq | Only | HasRETH},
	{RCWriteOnlyImm, "RDMA_WRITE_ONLY_WITH_IMMEDIATE", writeReq | Only | HasRETH | HasImmDt | ConsumesRecvWQE},
	{RCReadRequest, "RDMA_READ_REQUEST", Request | OpRead | Only | HasRETH},
	{RCReadResponseFirst, "RDMA_READ_RESPONSE_FIRST", readResp | First | HasAETH},
	{RCReadResponseMiddle, "RDMA_READ_RESPONSE_MIDDLE", readResp | Middle},
	{RCReadResponseLast, "RDMA_READ_RESPONSE_LAST", readResp | Last | HasAETH},
	{RCReadResponseOnly, "RDMA_READ_RESPONSE_ONLY", readResp | Only | HasAETH},
	{RCAck, "ACKNOWLEDGE", Response | OpAck | Only | HasAETH},
	{RCAtomicAck, "ATOMIC_ACKNOWLEDGE", Response | OpAtomic | Only | HasAETH | HasAtomicAckETH},
	{RCCompareSwap, "COMPARE_SWAP", Request | OpAtomic | Only | HasAtomicETH},
	{RCFetchAdd, "FETCH_ADD", Request | OpAtomic | Only | HasAtomicETH},
	{RCSendLastInv, "SEND_LAST_WITH_INVALIDATE", sendReq | Last | HasIETH},
	{RCSendOnlyInv, "SEND_ONLY_WITH_INVALIDATE", sendReq | Only | HasIETH},
}

func init() {
	for i := range opTable {
		opTable[i] = OpInfo{Name: "UNKNOWN", HeaderLen: BTHLen}
	}
	add := func(op Opcode, name string, t Transport, f OpFlags) {
		in := &opTable[op]
		*in = OpInfo{Name: name, Valid: true, Flags: f, Transport: t}
		n := BTHLen
		at := func(has OpFlags, l int) int {
			if !f.Has(has) {
				return 0
			}
			off := n
			n += l
			return off
		}
		in.XRCETHOff = at(HasXRCETH, XRCETHLen)
		in.DETHOff = at(HasDETH, DETHLen)
		in.RETHOff = at(HasRETH, RETHLen)
		in.AtomicETHOff = at(HasAtomicETH, AtomicETHLen)
		in.AETHOff = at(HasAETH, AETHLen)
		in.AtomicAckETHOff = at(HasAtomicAckETH, AtomicAckETHLen)
		in.ImmDtOff = at(HasImmDt, ImmDtLen)
		in.IETHOff = at(HasIETH, IETHLen)
		if t == TransportCNP {
			n += CNPPayloadLen
		}
		in.HeaderLen = n
	}
	for _, d := range rcOps {
		f := d.flags
		if f.Has(Request) {
			f |= CanAckReq
		}
		add(d.op, "RC_"+d.name, TransportRC, f)
		if d.op <= RCWriteOnlyImm {
			add(d.op|0x20, "UC_"+d.name, TransportUC, d.flags)
		}
		if d.flags.Has(Request) {
			f |= HasXRCETH
		}
		add(d.op|0xa0, "XRC_"+d.name, TransportXRC, f)
	}
	add(UDSendOnly, "UD_SEND_ONLY", TransportUD, sendReq|Only|HasDETH)
	add(UDSendOnlyImm, "UD_SEND_ONLY_WITH_IMMEDIATE", TransportUD, sendReq|Only|HasDETH|HasImmDt)
	add(CNP, "CNP", TransportCNP, Only)
}

// Info returns the table row for o. For an opcode the table does not know,
// Valid is false, Name is "UNKNOWN" and HeaderLen is BTHLen, so callers may
// always dereference the result.
func (o Opcode) Info() *OpInfo { return &opTable[o] }

// Valid reports whether o is an RC, UC, UD, XRC or CNP opcode this package knows.
func (o Opcode) Valid() bool { return opTable[o].Valid }

// String is the table name, or "UNKNOWN(0xNN)".
func (o Opcode) String() string {
	if in := &opTable[o]; in.Valid {
		return in.Name
	}
	return "UNKNOWN(0x" + strconv.FormatUint(uint64(o), 16) + ")"
}

package wire

import "encoding/binary"

// Header lengths in bytes (IBTA Vol. 1 sections 9.2 through 9.3).
const (
	BTHLen          = 12
	RETHLen         = 16
	AETHLen         = 4
	AtomicETHLen    = 28
	AtomicAckETHLen = 8
	ImmDtLen        = 4
	IETHLen         = 4
	DETHLen         = 8
	XRCETHLen       = 4
	ICRCLen         = 4
	// CNPPayloadLen is the length of the reserved field that follows the
	// BTH of a RoCEv2 Congestion Notification Packet (Annex A17.9.3). The
	// opcode table counts it as part of the CNP's header.
	CNPPayloadLen = 16
)

// BTH is the Base Transport Header (IBTA Vol. 1 9.2, figure 110).
// RoCEv2 reuses the two high bits of the byte the IB spec calls resv8a for
// FECN and BECN (Annex A17.9.2).
//
//	 0               1               2               3
//	 0 1 2 3 4 5 6 7 0 1 2 3 4 5 6 7 0 1 2 3 4 5 6 7 0 1 2 3 4 5 6 7
//	+---------------+-+-+---+-------+-------------------------------+
//	|    OpCode     |S|M|Pad| TVer  |            P_Key              |
//	+-+-+-----------+-+-+---+-------+-------------------------------+
//	|F|B|  resv6a   |                 DestQP                        |
//	+-+-+-----------+-----------------------------------------------+
//	|A|   resv7     |                   PSN                         |
//	+-+-------------+-----------------------------------------------+
//
// S = Solicited Event, M = MigReq, Pad = PadCnt, A = AckReq.
type BTH []byte

// BTHFields is the whole BTH decoded. Resv8a holds the entire byte 4
// (including FECN and BECN) and Resv7 the seven reserved bits of byte 8 so
// that Fields followed by Encode reproduces the header exactly.
type BTHFields struct {
	Opcode Opcode
	SE     bool
	MigReq bool
	PadCnt uint8
	TVer   uint8
	PKey   uint16
	Resv8a uint8
	DestQP uint32
	AckReq bool
	Resv7  uint8
	PSN    PSN
}

const (
	bthSE     = 0x80
	bthMigReq = 0x40
	bthFECN   = 0x80
	bthBECN   = 0x40
	bthAckReq = 0x80
	mask24    = 1<<24 - 1
)

func get24(b []byte) uint32    { return uint32(b[0])<<16 | uint32(b[1])<<8 | uint32(b[2]) }
func put24(b []byte, v uint32) { b[0], b[1], b[2] = byte(v>>16), byte(v>>8), byte(v) }

func setBit(b *byte, m byte, on bool) {
	if on {
		*b |= m
	} else {
		*b &^= m
	}
}

// Opcode is the transport opcode (byte 0).
func (b BTH) Opcode() Opcode { return Opcode(b[0]) }

// SE is the Solicited Event bit.
func (b BTH) SE() bool { return b[1]&bthSE != 0 }

// MigReq is the migration request bit (path migration; rxe sends 1 on RC).
func (b BTH) MigReq() bool { return b[1]&bthMigReq != 0 }

// PadCnt is the number of pad bytes (0..3) after the payload.
func (b BTH) PadCnt() int { return int(b[1]>>4) & 3 }

// TVer is the transport header version; 0 is the only one defined.
func (b BTH) TVer() uint8 { return b[1] & 0x0f }

// PKey is the partition key.
func (b BTH) PKey() uint16 { return binary.BigEndian.Uint16(b[2:]) }

// FECN is the Forward Explicit Congestion Notification bit (A17.9.2).
func (b BTH) FECN() bool { return b[4]&bthFECN != 0 }

// BECN is the Backward Explicit Congestion Notification bit (A17.9.2).
func (b BTH) BECN() bool { return b[4]&bthBECN != 0 }

// Resv8a is the whole of byte 4, FECN and BECN included. The ICRC masks it.
func (b BTH) Resv8a() uint8 { return b[4] }

// DestQP is the 24-bit destination queue pair number.
func (b BTH) DestQP() uint32 { return get24(b[5:]) }

// AckReq asks the responder to acknowledge this packet.
func (b BTH) AckReq() bool { return b[8]&bthAckReq != 0 }

// Resv7 returns the seven reserved bits following AckReq.
func (b BTH) Resv7() uint8 { return b[8] &^ bthAckReq }

// PSN is the 24-bit packet sequence number.
func (b BTH) PSN() PSN { return PSN(get24(b[9:])) }

// SetOpcode sets the opcode.
func (b BTH) SetOpcode(o Opcode) { b[0] = byte(o) }

// SetSE sets the Solicited Event bit.
func (b BTH) SetSE(v bool) { setBit(&b[1], bthSE, v) }

// SetMigReq sets the MigReq bit.
func (b BTH) SetMigReq(v bool) { setBit(&b[1], bthMigReq, v) }

// SetPadCnt sets PadCnt; only the low two bits of n are used.
func (b BTH) SetPadCnt(n int) { b[1] = b[1]&^0x30 | byte(n&3)<<4 }

// SetTVer sets the transport version (low four bits of v).
func (b BTH) SetTVer(v uint8) { b[1] = b[1]&^0x0f | v&0x0f }

// SetPKey sets the partition key.
func (b BTH) SetPKey(k uint16) { binary.BigEndian.PutUint16(b[2:], k) }

// SetFECN sets the FECN bit of byte 4.
func (b BTH) SetFECN(v bool) { setBit(&b[4], bthFECN, v) }

// SetBECN sets the BECN bit of byte 4.
func (b BTH) SetBECN(v bool) { setBit(&b[4], bthBECN, v) }

// SetResv8a sets the whole of byte 4.
func (b BTH) SetResv8a(v uint8) { b[4] = v }

// SetDestQP sets the destination QP number (low 24 bits of qp).
func (b BTH) SetDestQP(qp uint32) { put24(b[5:], qp&mask24) }

// SetAckReq sets the AckReq bit.
func (b BTH) SetAckReq(v bool) { setBit(&b[8], bthAckReq, v) }

// SetPSN sets the packet sequence number.
func (b BTH) SetPSN(p PSN) { put24(b[9:], uint32(p)&mask24) }

// Encode writes every field of f into b.
func (b BTH) Encode(f *BTHFields) {
	_ = b[BTHLen-1]
	b[0] = byte(f.Opcode)
	var x byte
	if f.SE {
		x |= bthSE
	}
	if f.MigReq {
		x |= bthMigReq
	}
	b[1] = x | (f.PadCnt&3)<<4 | f.TVer&0x0f
	binary.BigEndian.PutUint16(b[2:], f.PKey)
	b[4] = f.Resv8a
	put24(b[5:], f.DestQP&mask24)
	x = f.Resv7 &^ bthAckReq
	if f.AckReq {
		x |= bthAckReq
	}
	b[8] = x
	put24(b[9:], uint32(f.PSN)&mask24)
}

// Fields decodes every field of b.
func (b BTH) Fields() BTHFields {
	_ = b[BTHLen-1]
	return BTHFields{
		Opcode: b.Opcode(),
		SE:     b.SE(),
		MigReq: b.MigReq(),
		PadCnt: uint8(b.PadCnt()),
		TVer:   b.TVer(),
		PKey:   b.PKey(),
		Resv8a: b.Resv8a(),
		DestQP: b.DestQP(),
		AckReq: b.AckReq(),
		Resv7:  b.Resv7(),
		PSN:    b.PSN(),
	}
}

package mad

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// Sizes in bytes (IBTA Vol. 1 13.4.2 and 12.6).
const (
	Len       = 256 // a MAD of the GSI classes, header included
	HeaderLen = 24  // the common MAD header
	DataLen   = Len - HeaderLen
)

// Values of the common header a CM MAD carries (13.4.2, 12.6.1).
const (
	BaseVersion    = 1
	ClassCM        = 0x07
	ClassVersionCM = 2
	// QKeyGSI is the well-known Q_Key of QP1 (13.5.1, QP1's Q_Key).
	QKeyGSI = 0x80010000
	// QPNGSI is the General Services Interface's QP number.
	QPNGSI = 1
	// PKeyDefault is the default partition's full-membership P_Key.
	PKeyDefault = 0xFFFF
)

// Method is the MAD method (13.4.5). The CM sends all its messages with
// MethodSend.
type Method uint8

// Methods of the CM class.
const (
	MethodGet     Method = 0x01
	MethodSet     Method = 0x02
	MethodSend    Method = 0x03
	MethodGetResp Method = 0x81
)

// AttrID is the attribute ID: which message the MAD carries (12.6 table 104).
type AttrID uint16

// The CM attributes.
const (
	AttrClassPortInfo AttrID = 0x0001
	AttrREQ           AttrID = 0x0010
	AttrMRA           AttrID = 0x0011
	AttrREJ           AttrID = 0x0012
	AttrREP           AttrID = 0x0013
	AttrRTU           AttrID = 0x0014
	AttrDREQ          AttrID = 0x0015
	AttrDREP          AttrID = 0x0016
	AttrSIDRReq       AttrID = 0x0017
	AttrSIDRRep       AttrID = 0x0018
	AttrLAP           AttrID = 0x0019
	AttrAPR           AttrID = 0x001A
)

var attrNames = map[AttrID]string{
	AttrClassPortInfo: "ClassPortInfo", AttrREQ: "REQ", AttrMRA: "MRA", AttrREJ: "REJ",
	AttrREP: "REP", AttrRTU: "RTU", AttrDREQ: "DREQ", AttrDREP: "DREP",
	AttrSIDRReq: "SIDR_REQ", AttrSIDRRep: "SIDR_REP", AttrLAP: "LAP", AttrAPR: "APR",
}

func (a AttrID) String() string {
	if s, ok := attrNames[a]; ok {
		return s
	}
	return fmt.Sprintf("attr(%#04x)", uint16(a))
}

// Errors from Parse and ParseCM.
var (
	ErrLength       = errors.New("mad: not 256 bytes")
	ErrBaseVersion  = errors.New("mad: unsupported base version")
	ErrClass        = errors.New("mad: not a CM MAD")
	ErrClassVersion = errors.New("mad: unsupported CM class version")
	ErrMethod       = errors.New("mad: CM method is not Send")
	ErrAttribute    = errors.New("mad: unsupported CM attribute")
)

// Header is the 24-byte common MAD header (13.4.2, figure 155).
//
//	 0               1               2               3
//	+---------------+---------------+---------------+---------------+
//	|  BaseVersion  |  MgmtClass    | ClassVersion  |R|   Method    |
//	+---------------+---------------+---------------+---------------+
//	|            Status             |        ClassSpecific          |
//	+-------------------------------+-------------------------------+
//	|                   TransactionID (64 bits)                     |
//	+-------------------------------+-------------------------------+
//	|          AttributeID          |           Reserved            |
//	+-------------------------------+-------------------------------+
//	|                      AttributeModifier                        |
//	+---------------------------------------------------------------+
type Header []byte

// HeaderFields is the whole header decoded.
type HeaderFields struct {
	BaseVersion   uint8
	MgmtClass     uint8
	ClassVersion  uint8
	Method        Method // the R bit is Method's high bit
	Status        uint16
	ClassSpecific uint16
	TransactionID uint64
	AttrID        AttrID
	AttrModifier  uint32
}

// BaseVersion is the MAD format version; 1 is the only one defined.
func (h Header) BaseVersion() uint8 { return h[0] }

// MgmtClass is the management class (0x07 for the CM).
func (h Header) MgmtClass() uint8 { return h[1] }

// ClassVersion is the version of the class's attributes.
func (h Header) ClassVersion() uint8 { return h[2] }

// Method is the method with the response bit.
func (h Header) Method() Method { return Method(h[3]) }

// Status is the MAD status (13.4.7).
func (h Header) Status() uint16 { return binary.BigEndian.Uint16(h[4:]) }

// ClassSpecific is the class-specific status word.
func (h Header) ClassSpecific() uint16 { return binary.BigEndian.Uint16(h[6:]) }

// TransactionID matches a response to its request; the CM keeps one per
// exchange (12.6.1: a retransmission carries the same one).
func (h Header) TransactionID() uint64 { return binary.BigEndian.Uint64(h[8:]) }

// AttrID names the message.
func (h Header) AttrID() AttrID { return AttrID(binary.BigEndian.Uint16(h[16:])) }

// AttrModifier is the attribute modifier; the CM sends 0.
func (h Header) AttrModifier() uint32 { return binary.BigEndian.Uint32(h[20:]) }

// SetTransactionID sets the TransactionID.
func (h Header) SetTransactionID(t uint64) { binary.BigEndian.PutUint64(h[8:], t) }

// Encode writes every field of f into h, the reserved word as zero.
func (h Header) Encode(f *HeaderFields) {
	_ = h[HeaderLen-1]
	h[0], h[1], h[2], h[3] = f.BaseVersion, f.MgmtClass, f.ClassVersion, byte(f.Method)
	binary.BigEndian.PutUint16(h[4:], f.Status)
	binary.BigEndian.PutUint16(h[6:], f.ClassSpecific)
	binary.BigEndian.PutUint64(h[8:], f.TransactionID)
	binary.BigEndian.PutUint16(h[16:], uint16(f.AttrID))
	h[18], h[19] = 0, 0
	binary.BigEndian.PutUint32(h[20:], f.AttrModifier)
}

// Fields decodes every field of h.
func (h Header) Fields() HeaderFields {
	_ = h[HeaderLen-1]
	return HeaderFields{
		BaseVersion: h.BaseVersion(), MgmtClass: h.MgmtClass(), ClassVersion: h.ClassVersion(),
		Method: h.Method(), Status: h.Status(), ClassSpecific: h.ClassSpecific(),
		TransactionID: h.TransactionID(), AttrID: h.AttrID(), AttrModifier: h.AttrModifier(),
	}
}

// CMHeader returns the header fields of a CM message: base and class
// versions, class CM, method Send, status 0.
func CMHeader(tid uint64, attr AttrID) HeaderFields {
	return HeaderFields{BaseVersion: BaseVersion, MgmtClass: ClassCM, ClassVersion: ClassVersionCM,
		Method: MethodSend, TransactionID: tid, AttrID: attr}
}

// MAD is a whole 256-byte management datagram.
type MAD []byte

// Header is the common header.
func (m MAD) Header() Header { return Header(m[:HeaderLen]) }

// Data is the 232 bytes after the header, the message.
func (m MAD) Data() []byte { return m[HeaderLen:Len] }

// Parse checks that b is a MAD this package can read: 256 bytes, base
// version 1. Wire input is hostile: nothing after Parse reads out of bounds.
func Parse(b []byte) (MAD, error) {
	if len(b) != Len {
		return nil, fmt.Errorf("%w: %d", ErrLength, len(b))
	}
	if b[0] != BaseVersion {
		return nil, fmt.Errorf("%w: %d", ErrBaseVersion, b[0])
	}
	return MAD(b), nil
}

// ParseCM checks that b is a CM message: Parse's checks, class 0x07,
// class version 2, method Send and an attribute this package knows (LAP
// and APR, for path migration, are not supported).
func ParseCM(b []byte) (MAD, error) {
	m, err := Parse(b)
	if err != nil {
		return nil, err
	}
	h := m.Header()
	switch {
	case h.MgmtClass() != ClassCM:
		return nil, fmt.Errorf("%w: class %#02x", ErrClass, h.MgmtClass())
	case h.ClassVersion() != ClassVersionCM:
		return nil, fmt.Errorf("%w: %d", ErrClassVersion, h.ClassVersion())
	case h.Method() != MethodSend:
		return nil, fmt.Errorf("%w: %#02x", ErrMethod, uint8(h.Method()))
	}
	switch a := h.AttrID(); a {
	case AttrREQ, AttrMRA, AttrREJ, AttrREP, AttrRTU, AttrDREQ, AttrDREP, AttrSIDRReq, AttrSIDRRep:
	default:
		return nil, fmt.Errorf("%w: %v", ErrAttribute, a)
	}
	return m, nil
}

// Byte-order and bit-field helpers. A field of width w at bit offset o of a
// byte counts o from the most significant bit (the specification's order).
func u24(b []byte) uint32 { return uint32(b[0])<<16 | uint32(b[1])<<8 | uint32(b[2]) }
func put24(b []byte, v uint32) {
	b[0], b[1], b[2] = byte(v>>16), byte(v>>8), byte(v)
}

func bits(b byte, o, w uint) uint8 { return b >> (8 - o - w) & (1<<w - 1) }

func setBits(b *byte, o, w uint, v uint8) {
	s := 8 - o - w
	m := byte(1<<w-1) << s
	*b = *b&^m | v<<s&m
}

func bit(b byte, o uint) bool { return bits(b, o, 1) != 0 }

func b2u(v bool) uint8 {
	if v {
		return 1
	}
	return 0
}

// putPrivate copies p into the private-data field dst, zero-filling the rest.
// A caller checks the budget first; here a longer p is cut to fit.
func putPrivate(dst, p []byte) {
	n := copy(dst, p)
	clear(dst[n:])
}

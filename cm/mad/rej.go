package mad

import (
	"encoding/binary"
	"strconv"
)

// Rejected names the message a REJ or an MRA answers (12.6.6, 12.6.7).
type Rejected uint8

// The messages a REJ can reject and an MRA can acknowledge.
const (
	RejectedREQ   Rejected = 0
	RejectedREP   Rejected = 1
	RejectedOther Rejected = 2 // REJ: a message that was neither; MRA: a LAP
)

func (m Rejected) String() string {
	switch m {
	case RejectedREQ:
		return "REQ"
	case RejectedREP:
		return "REP"
	case RejectedOther:
		return "other"
	}
	return "reserved"
}

// Reason is a REJ's reason code (12.6.7.2, table 109).
type Reason uint16

// Rejection reasons. Linux's CM sends ReasonInvalidServiceID when nobody
// listens, ReasonStaleConnection for a REQ that reuses a live connection's
// QPN, and ReasonConsumerReject when the application refuses.
const (
	ReasonNoQP                      Reason = 1
	ReasonNoEEC                     Reason = 2
	ReasonNoResources               Reason = 3
	ReasonTimeout                   Reason = 4
	ReasonUnsupportedRequest        Reason = 5
	ReasonInvalidCommID             Reason = 6
	ReasonInvalidCommInstance       Reason = 7
	ReasonInvalidServiceID          Reason = 8
	ReasonInvalidTransportType      Reason = 9
	ReasonStaleConnection           Reason = 10
	ReasonRDCNotExist               Reason = 11
	ReasonInvalidGID                Reason = 12
	ReasonInvalidLID                Reason = 13
	ReasonInvalidSL                 Reason = 14
	ReasonInvalidTrafficClass       Reason = 15
	ReasonInvalidHopLimit           Reason = 16
	ReasonInvalidPacketRate         Reason = 17
	ReasonInvalidAltGID             Reason = 18
	ReasonInvalidAltLID             Reason = 19
	ReasonInvalidAltSL              Reason = 20
	ReasonInvalidAltTrafficClass    Reason = 21
	ReasonInvalidAltHopLimit        Reason = 22
	ReasonInvalidAltPacketRate      Reason = 23
	ReasonPortCMRedirect            Reason = 24
	ReasonPortRedirect              Reason = 25
	ReasonInvalidMTU                Reason = 26
	ReasonInsufficientRespResources Reason = 27
	ReasonConsumerReject            Reason = 28
	ReasonInvalidRNRRetry           Reason = 29
	ReasonDuplicateLocalCommID      Reason = 30
	ReasonInvalidClassVersion       Reason = 31
	ReasonInvalidFlowLabel          Reason = 32
	ReasonInvalidAltFlowLabel       Reason = 33
	ReasonVendorOptionNotSupported  Reason = 35
)

var reasonNames = [...]string{
	ReasonNoQP: "no QP", ReasonNoEEC: "no EEC", ReasonNoResources: "no resources",
	ReasonTimeout: "timeout", ReasonUnsupportedRequest: "unsupported request",
	ReasonInvalidCommID: "invalid communication ID", ReasonInvalidCommInstance: "invalid communication instance",
	ReasonInvalidServiceID: "invalid service ID", ReasonInvalidTransportType: "invalid transport service type",
	ReasonStaleConnection: "stale connection", ReasonRDCNotExist: "RDC does not exist",
	ReasonInvalidGID: "primary remote port GID rejected", ReasonInvalidLID: "primary remote port LID rejected",
	ReasonInvalidSL: "invalid primary SL", ReasonInvalidTrafficClass: "invalid primary traffic class",
	ReasonInvalidHopLimit: "invalid primary hop limit", ReasonInvalidPacketRate: "invalid primary packet rate",
	ReasonInvalidAltGID: "alternate remote port GID rejected", ReasonInvalidAltLID: "alternate remote port LID rejected",
	ReasonInvalidAltSL: "invalid alternate SL", ReasonInvalidAltTrafficClass: "invalid alternate traffic class",
	ReasonInvalidAltHopLimit: "invalid alternate hop limit", ReasonInvalidAltPacketRate: "invalid alternate packet rate",
	ReasonPortCMRedirect: "port CM redirection", ReasonPortRedirect: "port redirection",
	ReasonInvalidMTU: "invalid path MTU", ReasonInsufficientRespResources: "insufficient responder resources",
	ReasonConsumerReject: "consumer reject", ReasonInvalidRNRRetry: "RNR retry count reject",
	ReasonDuplicateLocalCommID: "duplicate local communication ID", ReasonInvalidClassVersion: "unsupported class version",
	ReasonInvalidFlowLabel: "invalid primary flow label", ReasonInvalidAltFlowLabel: "invalid alternate flow label",
	ReasonVendorOptionNotSupported: "vendor option not supported",
}

func (r Reason) String() string {
	if int(r) < len(reasonNames) && reasonNames[r] != "" {
		return reasonNames[r]
	}
	return "reason " + strconv.Itoa(int(r))
}

// REJ rejects a REQ or a REP (12.6.7, table 108).
//
//	0  Local Communication ID   4  Remote Communication ID
//	8  Message REJected (2) | reserved   9  Reject Info Length (7) | reserved
//	10 Reason (16)   12 Additional Rejection Information (72)   84 Private Data (148)
type REJ []byte

// REJFields is a whole REJ.
type REJFields struct {
	LocalCommID     uint32 // 0 when the sender has no record of the connection
	RemoteCommID    uint32
	MessageRejected Rejected
	RejectInfoLen   uint8 // 7 bits: how much of ARI is meaningful
	Reason          Reason
	ARI             []byte // REJARILen bytes
	PrivateData     []byte // REJPrivateLen bytes
}

// LocalCommID is the rejecter's communication ID.
func (r REJ) LocalCommID() uint32 { return commIDs(r).local() }

// RemoteCommID is the communication ID of the message's sender.
func (r REJ) RemoteCommID() uint32 { return commIDs(r).remote() }

// MessageRejected says which message is rejected.
func (r REJ) MessageRejected() Rejected { return Rejected(bits(r[8], 0, 2)) }

// RejectInfoLen is the length of the meaningful part of ARI.
func (r REJ) RejectInfoLen() uint8 { return bits(r[9], 0, 7) }

// Reason is the rejection reason.
func (r REJ) Reason() Reason { return Reason(binary.BigEndian.Uint16(r[10:])) }

// ARI is the Additional Rejection Information (its meaning depends on Reason).
func (r REJ) ARI() []byte { return r[12 : 12+REJARILen] }

// PrivateData is the 148 bytes of private data.
func (r REJ) PrivateData() []byte { return r[84 : 84+REJPrivateLen] }

// Fields decodes every field of r.
func (r REJ) Fields() REJFields {
	_ = r[DataLen-1]
	return REJFields{r.LocalCommID(), r.RemoteCommID(), r.MessageRejected(), r.RejectInfoLen(),
		r.Reason(), r.ARI(), r.PrivateData()}
}

// Encode writes every field of f into r, reserved bits as zero.
func (r REJ) Encode(f *REJFields) {
	_ = r[DataLen-1]
	commIDs(r).put(f.LocalCommID, f.RemoteCommID)
	r[8], r[9] = 0, 0
	setBits(&r[8], 0, 2, uint8(f.MessageRejected))
	setBits(&r[9], 0, 7, f.RejectInfoLen)
	binary.BigEndian.PutUint16(r[10:], uint16(f.Reason))
	putPrivate(r[12:12+REJARILen], f.ARI)
	putPrivate(r[84:84+REJPrivateLen], f.PrivateData)
}

// MRA is Message Receipt Acknowledgement (12.6.6, table 107): "I have your
// message, answering will take longer than you expect".
//
//	0  Local Communication ID   4  Remote Communication ID
//	8  Message MRAed (2) | reserved   9  Service Timeout (5) | reserved   10 Private Data (222)
type MRA []byte

// MRAFields is a whole MRA.
type MRAFields struct {
	LocalCommID    uint32
	RemoteCommID   uint32
	MessageMRAed   Rejected
	ServiceTimeout uint8 // 5 bits: 4.096 µs × 2^value, added to the sender's wait
	PrivateData    []byte
}

// LocalCommID is the sender's communication ID.
func (r MRA) LocalCommID() uint32 { return commIDs(r).local() }

// RemoteCommID is the receiver's communication ID.
func (r MRA) RemoteCommID() uint32 { return commIDs(r).remote() }

// MessageMRAed says which message is acknowledged (REQ, REP or LAP).
func (r MRA) MessageMRAed() Rejected { return Rejected(bits(r[8], 0, 2)) }

// ServiceTimeout is how much longer the answer may take.
func (r MRA) ServiceTimeout() uint8 { return bits(r[9], 0, 5) }

// PrivateData is the 222 bytes of private data.
func (r MRA) PrivateData() []byte { return r[10 : 10+MRAPrivateLen] }

// Fields decodes every field of r.
func (r MRA) Fields() MRAFields {
	_ = r[DataLen-1]
	return MRAFields{r.LocalCommID(), r.RemoteCommID(), r.MessageMRAed(), r.ServiceTimeout(), r.PrivateData()}
}

// Encode writes every field of f into r, reserved bits as zero.
func (r MRA) Encode(f *MRAFields) {
	_ = r[DataLen-1]
	commIDs(r).put(f.LocalCommID, f.RemoteCommID)
	r[8], r[9] = 0, 0
	setBits(&r[8], 0, 2, uint8(f.MessageMRAed))
	setBits(&r[9], 0, 5, f.ServiceTimeout)
	putPrivate(r[10:10+MRAPrivateLen], f.PrivateData)
}

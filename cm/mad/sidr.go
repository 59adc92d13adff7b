package mad

import "encoding/binary"

// SIDRStatus is a SIDR_REP's status (12.11.2, table 120).
type SIDRStatus uint8

// SIDR_REP statuses.
const (
	SIDRValid                 SIDRStatus = 0
	SIDRServiceIDNotSupported SIDRStatus = 1
	SIDRRejected              SIDRStatus = 2
	SIDRNoQP                  SIDRStatus = 3
	SIDRRedirect              SIDRStatus = 4
	SIDRVersionNotSupported   SIDRStatus = 5
)

func (s SIDRStatus) String() string {
	switch s {
	case SIDRValid:
		return "valid"
	case SIDRServiceIDNotSupported:
		return "service ID not supported"
	case SIDRRejected:
		return "rejected"
	case SIDRNoQP:
		return "no QP"
	case SIDRRedirect:
		return "redirect"
	case SIDRVersionNotSupported:
		return "version not supported"
	}
	return "reserved"
}

// SIDRReq asks which UD QP serves a service (12.11.1, table 119).
//
//	0  Request ID   4  P_Key (16) | reserved   8  Service ID (64)   16 Private Data (216)
type SIDRReq []byte

// SIDRReqFields is a whole SIDR_REQ.
type SIDRReqFields struct {
	RequestID   uint32
	PKey        uint16
	ServiceID   uint64
	PrivateData []byte // SIDRReqPrivateLen bytes
}

// RequestID matches the reply to the request.
func (r SIDRReq) RequestID() uint32 { return binary.BigEndian.Uint32(r[0:]) }

// PKey is the partition the requester will send in.
func (r SIDRReq) PKey() uint16 { return binary.BigEndian.Uint16(r[4:]) }

// ServiceID names the service.
func (r SIDRReq) ServiceID() uint64 { return binary.BigEndian.Uint64(r[8:]) }

// PrivateData is the 216 bytes of private data.
func (r SIDRReq) PrivateData() []byte { return r[16 : 16+SIDRReqPrivateLen] }

// Fields decodes every field of r.
func (r SIDRReq) Fields() SIDRReqFields {
	_ = r[DataLen-1]
	return SIDRReqFields{r.RequestID(), r.PKey(), r.ServiceID(), r.PrivateData()}
}

// Encode writes every field of f into r, reserved bits as zero.
func (r SIDRReq) Encode(f *SIDRReqFields) {
	_ = r[DataLen-1]
	binary.BigEndian.PutUint32(r[0:], f.RequestID)
	binary.BigEndian.PutUint16(r[4:], f.PKey)
	r[6], r[7] = 0, 0
	binary.BigEndian.PutUint64(r[8:], f.ServiceID)
	putPrivate(r[16:16+SIDRReqPrivateLen], f.PrivateData)
}

// SIDRRep answers a SIDR_REQ (12.11.2, table 120).
//
//	0  Request ID   4  Status   5  Additional Info Length   6  reserved
//	8  QPN (24) | reserved   12 Service ID (64)   20 Q_Key
//	24 Additional Information (72)   96 Private Data (136)
type SIDRRep []byte

// SIDRRepFields is a whole SIDR_REP.
type SIDRRepFields struct {
	RequestID   uint32
	Status      SIDRStatus
	InfoLen     uint8
	QPN         uint32
	ServiceID   uint64
	QKey        uint32
	Info        []byte // SIDRRepInfoLen bytes
	PrivateData []byte // SIDRRepPrivateLen bytes
}

// RequestID is the SIDR_REQ's.
func (r SIDRRep) RequestID() uint32 { return binary.BigEndian.Uint32(r[0:]) }

// Status says whether the service was found.
func (r SIDRRep) Status() SIDRStatus { return SIDRStatus(r[4]) }

// InfoLen is the length of the meaningful part of Info.
func (r SIDRRep) InfoLen() uint8 { return r[5] }

// QPN is the UD QP that serves the service.
func (r SIDRRep) QPN() uint32 { return u24(r[8:]) }

// ServiceID is the SIDR_REQ's.
func (r SIDRRep) ServiceID() uint64 { return binary.BigEndian.Uint64(r[12:]) }

// QKey is the Q_Key to send to QPN with.
func (r SIDRRep) QKey() uint32 { return binary.BigEndian.Uint32(r[20:]) }

// Info is the Additional Information (a ClassPortInfo for a redirect).
func (r SIDRRep) Info() []byte { return r[24 : 24+SIDRRepInfoLen] }

// PrivateData is the 136 bytes of private data.
func (r SIDRRep) PrivateData() []byte { return r[96 : 96+SIDRRepPrivateLen] }

// Fields decodes every field of r.
func (r SIDRRep) Fields() SIDRRepFields {
	_ = r[DataLen-1]
	return SIDRRepFields{r.RequestID(), r.Status(), r.InfoLen(), r.QPN(), r.ServiceID(), r.QKey(),
		r.Info(), r.PrivateData()}
}

// Encode writes every field of f into r, reserved bits as zero.
func (r SIDRRep) Encode(f *SIDRRepFields) {
	_ = r[DataLen-1]
	binary.BigEndian.PutUint32(r[0:], f.RequestID)
	r[4], r[5], r[6], r[7] = byte(f.Status), f.InfoLen, 0, 0
	put24(r[8:], f.QPN)
	r[11] = 0
	binary.BigEndian.PutUint64(r[12:], f.ServiceID)
	binary.BigEndian.PutUint32(r[20:], f.QKey)
	putPrivate(r[24:24+SIDRRepInfoLen], f.Info)
	putPrivate(r[96:96+SIDRRepPrivateLen], f.PrivateData)
}

package mad

import "encoding/binary"

// Private-data sizes of the CM messages (12.6, tables 106 to 120).
const (
	REQPrivateLen     = 92
	MRAPrivateLen     = 222
	REJPrivateLen     = 148
	REPPrivateLen     = 196
	RTUPrivateLen     = 224
	DREQPrivateLen    = 220
	DREPPrivateLen    = 224
	SIDRReqPrivateLen = 216
	SIDRRepPrivateLen = 136
	REJARILen         = 72 // REJ's Additional Rejection Information
	SIDRRepInfoLen    = 72 // SIDR_REP's Additional Information
)

// TransportType is a REQ's Transport Service Type (12.6.5).
type TransportType uint8

// Transport service types.
const (
	TransportRC TransportType = 0
	TransportUC TransportType = 1
	TransportRD TransportType = 2
)

func (t TransportType) String() string {
	switch t {
	case TransportRC:
		return "RC"
	case TransportUC:
		return "UC"
	case TransportRD:
		return "RD"
	}
	return "reserved"
}

// Path is one of a REQ's two path descriptions (12.6.5, the Primary and
// Alternate fields; on RoCE the LIDs are 0 or 0xFFFF and the GIDs carry the
// IP addresses).
type Path struct {
	LocalLID        uint16
	RemoteLID       uint16
	LocalGID        [16]byte
	RemoteGID       [16]byte
	FlowLabel       uint32 // 20 bits
	PacketRate      uint8  // 6 bits
	TrafficClass    uint8
	HopLimit        uint8
	SL              uint8 // 4 bits
	SubnetLocal     bool
	LocalACKTimeout uint8 // 5 bits: 4.096 µs × 2^value
}

// Offsets of a path in a REQ; the alternate path has the same layout.
const (
	reqPrimaryPath   = 52
	reqAlternatePath = 96
	pathLen          = 44
)

func decodePath(b []byte) Path {
	var p Path
	p.LocalLID = binary.BigEndian.Uint16(b[0:])
	p.RemoteLID = binary.BigEndian.Uint16(b[2:])
	copy(p.LocalGID[:], b[4:20])
	copy(p.RemoteGID[:], b[20:36])
	p.FlowLabel = binary.BigEndian.Uint32(b[36:]) >> 12
	p.PacketRate = bits(b[39], 2, 6)
	p.TrafficClass = b[40]
	p.HopLimit = b[41]
	p.SL = bits(b[42], 0, 4)
	p.SubnetLocal = bit(b[42], 4)
	p.LocalACKTimeout = bits(b[43], 0, 5)
	return p
}

// encodePath writes p; the bits of byte 43 after the ACK timeout are the
// caller's (the alternate path keeps SAP Supported there).
func encodePath(b []byte, p *Path) {
	_ = b[pathLen-1]
	binary.BigEndian.PutUint16(b[0:], p.LocalLID)
	binary.BigEndian.PutUint16(b[2:], p.RemoteLID)
	copy(b[4:20], p.LocalGID[:])
	copy(b[20:36], p.RemoteGID[:])
	binary.BigEndian.PutUint32(b[36:], (p.FlowLabel&(1<<20-1))<<12)
	setBits(&b[39], 2, 6, p.PacketRate)
	b[40], b[41] = p.TrafficClass, p.HopLimit
	b[42] = 0
	setBits(&b[42], 0, 4, p.SL)
	setBits(&b[42], 4, 1, b2u(p.SubnetLocal))
	setBits(&b[43], 0, 5, p.LocalACKTimeout)
}

// REQ is the connection request (12.6.5, table 106): the 232 bytes after
// the MAD header.
//
//	 0  Local Communication ID       4  reserved
//	 8  Service ID (64)             16  Local CA GUID (64)
//	24  reserved                    28  Local Q_Key
//	32  Local QPN (24) | Responder Resources (8)
//	36  Local EECN (24) | Initiator Depth (8)
//	40  Remote EECN (24) | Remote CM Response Timeout (5) | Transport Service Type (2) | E2E Flow Control (1)
//	44  Starting PSN (24) | Local CM Response Timeout (5) | Retry Count (3)
//	48  P_Key (16) | Path MTU (4) | RDC Exists (1) | RNR Retry Count (3) | Max CM Retries (4) | SRQ (1) | Ext. Transport Type (3)
//	52  primary path (44)           96  alternate path (44); bit 5 of byte 139 is SAP Supported
//	140 Private Data (92)
type REQ []byte

// REQFields is a whole REQ.
type REQFields struct {
	LocalCommID             uint32
	ServiceID               uint64
	LocalCAGUID             uint64
	LocalQKey               uint32
	LocalQPN                uint32
	ResponderResources      uint8
	LocalEECN               uint32
	InitiatorDepth          uint8
	RemoteEECN              uint32
	RemoteCMResponseTimeout uint8 // 5 bits: 4.096 µs × 2^value
	TransportServiceType    TransportType
	EndToEndFlowControl     bool
	StartingPSN             uint32
	LocalCMResponseTimeout  uint8
	RetryCount              uint8 // 3 bits
	PKey                    uint16
	PathMTU                 uint8 // the IB MTU enumeration: 1 = 256 ... 5 = 4096
	RDCExists               bool
	RNRRetryCount           uint8 // 3 bits
	MaxCMRetries            uint8 // 4 bits
	SRQ                     bool
	ExtendedTransportType   uint8 // 3 bits
	Primary                 Path
	Alternate               Path
	SAPSupported            bool
	PrivateData             []byte // REQPrivateLen bytes; Fields returns a view into the message
}

// LocalCommID is the sender's communication ID for this connection.
func (r REQ) LocalCommID() uint32 { return binary.BigEndian.Uint32(r[0:]) }

// ServiceID names the service asked for; rdma_cm puts its port space and
// port here (see ServiceID).
func (r REQ) ServiceID() uint64 { return binary.BigEndian.Uint64(r[8:]) }

// LocalCAGUID is the sender's channel adapter GUID.
func (r REQ) LocalCAGUID() uint64 { return binary.BigEndian.Uint64(r[16:]) }

// LocalQKey is the sender's Q_Key (RD only).
func (r REQ) LocalQKey() uint32 { return binary.BigEndian.Uint32(r[28:]) }

// LocalQPN is the sender's QP number.
func (r REQ) LocalQPN() uint32 { return u24(r[32:]) }

// ResponderResources is the number of RDMA READ and atomic requests the
// sender will accept in flight (its max_dest_rd_atomic).
func (r REQ) ResponderResources() uint8 { return r[35] }

// LocalEECN is the sender's EE context (RD only).
func (r REQ) LocalEECN() uint32 { return u24(r[36:]) }

// InitiatorDepth is how many READs and atomics the sender will have in
// flight (its max_rd_atomic).
func (r REQ) InitiatorDepth() uint8 { return r[39] }

// RemoteEECN is the EE context asked of the receiver (RD only).
func (r REQ) RemoteEECN() uint32 { return u24(r[40:]) }

// RemoteCMResponseTimeout bounds how long the sender waits for the
// receiver's answer: 4.096 µs × 2^value.
func (r REQ) RemoteCMResponseTimeout() uint8 { return bits(r[43], 0, 5) }

// TransportServiceType is RC, UC or RD.
func (r REQ) TransportServiceType() TransportType { return TransportType(bits(r[43], 5, 2)) }

// EndToEndFlowControl says the sender issues end-to-end credits.
func (r REQ) EndToEndFlowControl() bool { return bit(r[43], 7) }

// StartingPSN is the PSN the sender expects the receiver's first request to
// carry (Linux's ib_cm starts the passive side's send queue there).
func (r REQ) StartingPSN() uint32 { return u24(r[44:]) }

// LocalCMResponseTimeout is how long the sender takes to answer a CM message.
func (r REQ) LocalCMResponseTimeout() uint8 { return bits(r[47], 0, 5) }

// RetryCount is the transport retry count for the receiver's QP.
func (r REQ) RetryCount() uint8 { return bits(r[47], 5, 3) }

// PKey is the partition key of the connection.
func (r REQ) PKey() uint16 { return binary.BigEndian.Uint16(r[48:]) }

// PathMTU is the path's MTU, in the IB enumeration.
func (r REQ) PathMTU() uint8 { return bits(r[50], 0, 4) }

// RDCExists is for RD.
func (r REQ) RDCExists() bool { return bit(r[50], 4) }

// RNRRetryCount is the receiver's QP's RNR retry count.
func (r REQ) RNRRetryCount() uint8 { return bits(r[50], 5, 3) }

// MaxCMRetries is how many times the sender retransmits a CM message.
func (r REQ) MaxCMRetries() uint8 { return bits(r[51], 0, 4) }

// SRQ says the sender's QP takes its receives from an SRQ.
func (r REQ) SRQ() bool { return bit(r[51], 4) }

// ExtendedTransportType is for XRC; 0 otherwise.
func (r REQ) ExtendedTransportType() uint8 { return bits(r[51], 5, 3) }

// Primary is the primary path.
func (r REQ) Primary() Path { return decodePath(r[reqPrimaryPath:]) }

// Alternate is the alternate path (all zero when there is none).
func (r REQ) Alternate() Path { return decodePath(r[reqAlternatePath:]) }

// SAPSupported is the Send Additional Path bit.
func (r REQ) SAPSupported() bool { return bit(r[139], 5) }

// PrivateData is the 92 bytes of private data (rdma_cm's header first).
func (r REQ) PrivateData() []byte { return r[140 : 140+REQPrivateLen] }

// Fields decodes every field of r.
func (r REQ) Fields() REQFields {
	_ = r[DataLen-1]
	return REQFields{
		LocalCommID: r.LocalCommID(), ServiceID: r.ServiceID(), LocalCAGUID: r.LocalCAGUID(),
		LocalQKey: r.LocalQKey(), LocalQPN: r.LocalQPN(), ResponderResources: r.ResponderResources(),
		LocalEECN: r.LocalEECN(), InitiatorDepth: r.InitiatorDepth(), RemoteEECN: r.RemoteEECN(),
		RemoteCMResponseTimeout: r.RemoteCMResponseTimeout(), TransportServiceType: r.TransportServiceType(),
		EndToEndFlowControl: r.EndToEndFlowControl(), StartingPSN: r.StartingPSN(),
		LocalCMResponseTimeout: r.LocalCMResponseTimeout(), RetryCount: r.RetryCount(), PKey: r.PKey(),
		PathMTU: r.PathMTU(), RDCExists: r.RDCExists(), RNRRetryCount: r.RNRRetryCount(),
		MaxCMRetries: r.MaxCMRetries(), SRQ: r.SRQ(), ExtendedTransportType: r.ExtendedTransportType(),
		Primary: r.Primary(), Alternate: r.Alternate(), SAPSupported: r.SAPSupported(),
		PrivateData: r.PrivateData(),
	}
}

// Encode writes every field of f into r, reserved bits as zero.
func (r REQ) Encode(f *REQFields) {
	_ = r[DataLen-1]
	clear(r[:140])
	binary.BigEndian.PutUint32(r[0:], f.LocalCommID)
	binary.BigEndian.PutUint64(r[8:], f.ServiceID)
	binary.BigEndian.PutUint64(r[16:], f.LocalCAGUID)
	binary.BigEndian.PutUint32(r[28:], f.LocalQKey)
	put24(r[32:], f.LocalQPN)
	r[35] = f.ResponderResources
	put24(r[36:], f.LocalEECN)
	r[39] = f.InitiatorDepth
	put24(r[40:], f.RemoteEECN)
	setBits(&r[43], 0, 5, f.RemoteCMResponseTimeout)
	setBits(&r[43], 5, 2, uint8(f.TransportServiceType))
	setBits(&r[43], 7, 1, b2u(f.EndToEndFlowControl))
	put24(r[44:], f.StartingPSN)
	setBits(&r[47], 0, 5, f.LocalCMResponseTimeout)
	setBits(&r[47], 5, 3, f.RetryCount)
	binary.BigEndian.PutUint16(r[48:], f.PKey)
	setBits(&r[50], 0, 4, f.PathMTU)
	setBits(&r[50], 4, 1, b2u(f.RDCExists))
	setBits(&r[50], 5, 3, f.RNRRetryCount)
	setBits(&r[51], 0, 4, f.MaxCMRetries)
	setBits(&r[51], 4, 1, b2u(f.SRQ))
	setBits(&r[51], 5, 3, f.ExtendedTransportType)
	encodePath(r[reqPrimaryPath:], &f.Primary)
	encodePath(r[reqAlternatePath:], &f.Alternate)
	setBits(&r[139], 5, 1, b2u(f.SAPSupported))
	putPrivate(r[140:140+REQPrivateLen], f.PrivateData)
}

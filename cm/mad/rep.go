package mad

import "encoding/binary"

// REP is the connection reply (12.6.8, table 110).
//
//	 0  Local Communication ID      4  Remote Communication ID
//	 8  Local Q_Key                12  Local QPN (24) | reserved
//	16  Local EECN (24) | reserved 20  Starting PSN (24) | reserved
//	24  Responder Resources        25  Initiator Depth
//	26  Target ACK Delay (5) | Failover Accepted (2) | E2E Flow Control (1)
//	27  RNR Retry Count (3) | SRQ (1) | reserved
//	28  Local CA GUID (64)         36  Private Data (196)
type REP []byte

// REPFields is a whole REP.
type REPFields struct {
	LocalCommID         uint32
	RemoteCommID        uint32
	LocalQKey           uint32
	LocalQPN            uint32
	LocalEECN           uint32
	StartingPSN         uint32
	ResponderResources  uint8
	InitiatorDepth      uint8
	TargetACKDelay      uint8 // 5 bits
	FailoverAccepted    uint8 // 2 bits
	EndToEndFlowControl bool
	RNRRetryCount       uint8 // 3 bits
	SRQ                 bool
	LocalCAGUID         uint64
	PrivateData         []byte // REPPrivateLen bytes
}

// LocalCommID is the replier's communication ID.
func (r REP) LocalCommID() uint32 { return binary.BigEndian.Uint32(r[0:]) }

// RemoteCommID is the requester's communication ID, from its REQ.
func (r REP) RemoteCommID() uint32 { return binary.BigEndian.Uint32(r[4:]) }

// LocalQKey is the replier's Q_Key (RD only).
func (r REP) LocalQKey() uint32 { return binary.BigEndian.Uint32(r[8:]) }

// LocalQPN is the replier's QP number.
func (r REP) LocalQPN() uint32 { return u24(r[12:]) }

// LocalEECN is the replier's EE context (RD only).
func (r REP) LocalEECN() uint32 { return u24(r[16:]) }

// StartingPSN is the PSN the replier expects the requester's first request
// to carry (Linux's ib_cm starts the active side's send queue there).
func (r REP) StartingPSN() uint32 { return u24(r[20:]) }

// ResponderResources is the replier's max_dest_rd_atomic.
func (r REP) ResponderResources() uint8 { return r[24] }

// InitiatorDepth is the replier's max_rd_atomic.
func (r REP) InitiatorDepth() uint8 { return r[25] }

// TargetACKDelay is the replier's ACK delay: 4.096 µs × 2^value.
func (r REP) TargetACKDelay() uint8 { return bits(r[26], 0, 5) }

// FailoverAccepted answers the REQ's alternate path.
func (r REP) FailoverAccepted() uint8 { return bits(r[26], 5, 2) }

// EndToEndFlowControl says the replier issues end-to-end credits.
func (r REP) EndToEndFlowControl() bool { return bit(r[26], 7) }

// RNRRetryCount is the requester's QP's RNR retry count.
func (r REP) RNRRetryCount() uint8 { return bits(r[27], 0, 3) }

// SRQ says the replier's QP uses an SRQ.
func (r REP) SRQ() bool { return bit(r[27], 3) }

// LocalCAGUID is the replier's channel adapter GUID.
func (r REP) LocalCAGUID() uint64 { return binary.BigEndian.Uint64(r[28:]) }

// PrivateData is the 196 bytes of private data.
func (r REP) PrivateData() []byte { return r[36 : 36+REPPrivateLen] }

// Fields decodes every field of r.
func (r REP) Fields() REPFields {
	_ = r[DataLen-1]
	return REPFields{
		LocalCommID: r.LocalCommID(), RemoteCommID: r.RemoteCommID(), LocalQKey: r.LocalQKey(),
		LocalQPN: r.LocalQPN(), LocalEECN: r.LocalEECN(), StartingPSN: r.StartingPSN(),
		ResponderResources: r.ResponderResources(), InitiatorDepth: r.InitiatorDepth(),
		TargetACKDelay: r.TargetACKDelay(), FailoverAccepted: r.FailoverAccepted(),
		EndToEndFlowControl: r.EndToEndFlowControl(), RNRRetryCount: r.RNRRetryCount(),
		SRQ: r.SRQ(), LocalCAGUID: r.LocalCAGUID(), PrivateData: r.PrivateData(),
	}
}

// Encode writes every field of f into r, reserved bits as zero.
func (r REP) Encode(f *REPFields) {
	_ = r[DataLen-1]
	clear(r[:36])
	binary.BigEndian.PutUint32(r[0:], f.LocalCommID)
	binary.BigEndian.PutUint32(r[4:], f.RemoteCommID)
	binary.BigEndian.PutUint32(r[8:], f.LocalQKey)
	put24(r[12:], f.LocalQPN)
	put24(r[16:], f.LocalEECN)
	put24(r[20:], f.StartingPSN)
	r[24], r[25] = f.ResponderResources, f.InitiatorDepth
	setBits(&r[26], 0, 5, f.TargetACKDelay)
	setBits(&r[26], 5, 2, f.FailoverAccepted)
	setBits(&r[26], 7, 1, b2u(f.EndToEndFlowControl))
	setBits(&r[27], 0, 3, f.RNRRetryCount)
	setBits(&r[27], 3, 1, b2u(f.SRQ))
	binary.BigEndian.PutUint64(r[28:], f.LocalCAGUID)
	putPrivate(r[36:36+REPPrivateLen], f.PrivateData)
}

// commIDs is the layout shared by RTU, DREP and the start of DREQ, MRA
// and REJ: the sender's and the receiver's communication IDs.
type commIDs []byte

func (c commIDs) local() uint32  { return binary.BigEndian.Uint32(c[0:]) }
func (c commIDs) remote() uint32 { return binary.BigEndian.Uint32(c[4:]) }
func (c commIDs) put(local, remote uint32) {
	binary.BigEndian.PutUint32(c[0:], local)
	binary.BigEndian.PutUint32(c[4:], remote)
}

// RTU is Ready To Use, the requester's answer to a REP (12.6.9, table 111).
//
//	0  Local Communication ID   4  Remote Communication ID   8  Private Data (224)
type RTU []byte

// RTUFields is a whole RTU.
type RTUFields struct {
	LocalCommID  uint32
	RemoteCommID uint32
	PrivateData  []byte // RTUPrivateLen bytes
}

// LocalCommID is the sender's communication ID.
func (r RTU) LocalCommID() uint32 { return commIDs(r).local() }

// RemoteCommID is the receiver's communication ID.
func (r RTU) RemoteCommID() uint32 { return commIDs(r).remote() }

// PrivateData is the 224 bytes of private data.
func (r RTU) PrivateData() []byte { return r[8 : 8+RTUPrivateLen] }

// Fields decodes every field of r.
func (r RTU) Fields() RTUFields {
	return RTUFields{r.LocalCommID(), r.RemoteCommID(), r.PrivateData()}
}

// Encode writes every field of f into r.
func (r RTU) Encode(f *RTUFields) {
	_ = r[DataLen-1]
	commIDs(r).put(f.LocalCommID, f.RemoteCommID)
	putPrivate(r[8:8+RTUPrivateLen], f.PrivateData)
}

// DREQ asks to disconnect (12.6.10, table 112).
//
//	0  Local Communication ID   4  Remote Communication ID
//	8  Remote QPN/EECN (24) | reserved   12  Private Data (220)
type DREQ []byte

// DREQFields is a whole DREQ.
type DREQFields struct {
	LocalCommID  uint32
	RemoteCommID uint32
	RemoteQPN    uint32 // the receiver's QPN (or EECN for RD)
	PrivateData  []byte // DREQPrivateLen bytes
}

// LocalCommID is the sender's communication ID.
func (r DREQ) LocalCommID() uint32 { return commIDs(r).local() }

// RemoteCommID is the receiver's communication ID.
func (r DREQ) RemoteCommID() uint32 { return commIDs(r).remote() }

// RemoteQPN is the receiver's QP number, which the receiver checks.
func (r DREQ) RemoteQPN() uint32 { return u24(r[8:]) }

// PrivateData is the 220 bytes of private data.
func (r DREQ) PrivateData() []byte { return r[12 : 12+DREQPrivateLen] }

// Fields decodes every field of r.
func (r DREQ) Fields() DREQFields {
	return DREQFields{r.LocalCommID(), r.RemoteCommID(), r.RemoteQPN(), r.PrivateData()}
}

// Encode writes every field of f into r.
func (r DREQ) Encode(f *DREQFields) {
	_ = r[DataLen-1]
	commIDs(r).put(f.LocalCommID, f.RemoteCommID)
	put24(r[8:], f.RemoteQPN)
	r[11] = 0
	putPrivate(r[12:12+DREQPrivateLen], f.PrivateData)
}

// DREP answers a DREQ (12.6.11, table 113).
//
//	0  Local Communication ID   4  Remote Communication ID   8  Private Data (224)
type DREP []byte

// DREPFields is a whole DREP.
type DREPFields struct {
	LocalCommID  uint32
	RemoteCommID uint32
	PrivateData  []byte // DREPPrivateLen bytes
}

// LocalCommID is the sender's communication ID.
func (r DREP) LocalCommID() uint32 { return commIDs(r).local() }

// RemoteCommID is the receiver's communication ID.
func (r DREP) RemoteCommID() uint32 { return commIDs(r).remote() }

// PrivateData is the 224 bytes of private data.
func (r DREP) PrivateData() []byte { return r[8 : 8+DREPPrivateLen] }

// Fields decodes every field of r.
func (r DREP) Fields() DREPFields {
	return DREPFields{r.LocalCommID(), r.RemoteCommID(), r.PrivateData()}
}

// Encode writes every field of f into r.
func (r DREP) Encode(f *DREPFields) {
	_ = r[DataLen-1]
	commIDs(r).put(f.LocalCommID, f.RemoteCommID)
	putPrivate(r[8:8+DREPPrivateLen], f.PrivateData)
}

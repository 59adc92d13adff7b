// The engine's data-path types and enums (work requests, completions, SGEs, QP
// attributes, address handles), carrying libibverbs' numeric values.

package engine

import (
	"net/netip"

	"github.com/goverbs/goverbs/wire"
)

// Access is the ibv_access_flags bit set.
type Access uint32

const (
	AccessLocalWrite   Access = 1 << 0
	AccessRemoteWrite  Access = 1 << 1
	AccessRemoteRead   Access = 1 << 2
	AccessRemoteAtomic Access = 1 << 3
	AccessMWBind       Access = 1 << 4
)

// QPType follows enum ibv_qp_type.
type QPType uint8

const (
	QPTypeRC QPType = 2
	QPTypeUC QPType = 3
	QPTypeUD QPType = 4
)

// QPState follows enum ibv_qp_state (IBTA 10.3.1).
type QPState uint8

const (
	QPStateReset QPState = iota
	QPStateInit
	QPStateRTR
	QPStateRTS
	QPStateSQD
	QPStateSQE
	QPStateErr
)

// WROpcode follows enum ibv_wr_opcode.
type WROpcode uint8

const (
	WRRDMAWrite        WROpcode = 0
	WRRDMAWriteWithImm WROpcode = 1
	WRSend             WROpcode = 2
	WRSendWithImm      WROpcode = 3
	WRRDMARead         WROpcode = 4
	WRAtomicCmpAndSwp  WROpcode = 5
	WRAtomicFetchAdd   WROpcode = 6
	WRLocalInv         WROpcode = 7
	WRBindMW           WROpcode = 8
	WRSendWithInv      WROpcode = 9
)

// SendFlags follows enum ibv_send_flags.
type SendFlags uint32

const (
	SendFence     SendFlags = 1 << 0
	SendSignaled  SendFlags = 1 << 1
	SendSolicited SendFlags = 1 << 2
	SendInline    SendFlags = 1 << 3
)

// WCOpcode follows enum ibv_wc_opcode.
type WCOpcode uint8

const (
	WCSend            WCOpcode = 0
	WCRDMAWrite       WCOpcode = 1
	WCRDMARead        WCOpcode = 2
	WCCompSwap        WCOpcode = 3
	WCFetchAdd        WCOpcode = 4
	WCBindMW          WCOpcode = 5
	WCLocalInv        WCOpcode = 6
	WCRecv            WCOpcode = 128
	WCRecvRDMAWithImm WCOpcode = 129
)

// WCStatus follows enum ibv_wc_status.
type WCStatus uint8

const (
	WCSuccess        WCStatus = 0
	WCLocLenErr      WCStatus = 1
	WCLocQPOpErr     WCStatus = 2
	WCLocProtErr     WCStatus = 4
	WCWRFlushErr     WCStatus = 5
	WCMWBindErr      WCStatus = 6
	WCBadRespErr     WCStatus = 7
	WCLocAccessErr   WCStatus = 8
	WCRemInvReqErr   WCStatus = 9
	WCRemAccessErr   WCStatus = 10
	WCRemOpErr       WCStatus = 11
	WCRetryExcErr    WCStatus = 12
	WCRNRRetryExcErr WCStatus = 13
	WCRemInvRdReqErr WCStatus = 15
	WCFatalErr       WCStatus = 19
	WCGeneralErr     WCStatus = 21
)

// WCFlags follows enum ibv_wc_flags.
type WCFlags uint32

const (
	WCWithGRH WCFlags = 1 << 0
	WCWithImm WCFlags = 1 << 1
	WCWithInv WCFlags = 1 << 3
)

// SGE is one scatter/gather element: Length bytes at virtual address Addr of the memory
// region whose lkey is LKey.
type SGE struct {
	Addr   uint64
	Length uint32
	LKey   uint32
}

// SendWR is one send-queue work request (struct ibv_send_wr without the list link).
type SendWR struct {
	ID         uint64
	Opcode     WROpcode
	Flags      SendFlags
	SGL        []SGE
	Imm        uint32 // immediate data, or the rkey to invalidate for SEND_WITH_INV / LOCAL_INV
	RemoteAddr uint64
	RKey       uint32
	CompareAdd uint64 // compare (CMP_AND_SWP) or add (FETCH_AND_ADD) operand
	Swap       uint64

	// UD only.
	AH         *AH
	RemoteQPN  uint32
	RemoteQKey uint32

	// BIND_MW only.
	Bind *BindMW
}

// RecvWR is one receive work request.
type RecvWR struct {
	ID  uint64
	SGL []SGE
}

// WC is one work completion (struct ibv_wc).
type WC struct {
	ID      uint64
	Status  WCStatus
	Opcode  WCOpcode
	ByteLen uint32
	Imm     uint32 // immediate data (host order), or the invalidated rkey with WCWithInv
	QPN     uint32
	SrcQP   uint32
	Flags   WCFlags
	// VendorErr carries the NAK syndrome or local reason behind an error status, for logs.
	VendorErr uint32
}

// QPCap is the queue sizes of a QP (struct ibv_qp_cap).
type QPCap struct {
	MaxSendWR, MaxRecvWR   uint32
	MaxSendSGE, MaxRecvSGE uint32
	MaxInline              uint32
}

// AH is an address vector: where a QP's packets go (IBTA 10.2.1, RoCEv2 Annex A17.4).
type AH struct {
	DGID         [16]byte
	Addr         netip.Addr // DGID as an IP address (IPv4 unmapped)
	HopLimit     uint8
	TrafficClass uint8
	FlowLabel    uint32
	SL           uint8
	SGIDIndex    uint8
	Port         uint8
}

// QPAttrMask follows enum ibv_qp_attr_mask.
type QPAttrMask uint32

const (
	QPAttrState            QPAttrMask = 1 << 0
	QPAttrCurState         QPAttrMask = 1 << 1
	QPAttrEnSQDAsyncNotify QPAttrMask = 1 << 2
	QPAttrAccessFlags      QPAttrMask = 1 << 3
	QPAttrPKeyIndex        QPAttrMask = 1 << 4
	QPAttrPort             QPAttrMask = 1 << 5
	QPAttrQKey             QPAttrMask = 1 << 6
	QPAttrAV               QPAttrMask = 1 << 7
	QPAttrPathMTU          QPAttrMask = 1 << 8
	QPAttrTimeout          QPAttrMask = 1 << 9
	QPAttrRetryCnt         QPAttrMask = 1 << 10
	QPAttrRNRRetry         QPAttrMask = 1 << 11
	QPAttrRQPSN            QPAttrMask = 1 << 12
	QPAttrMaxQPRdAtomic    QPAttrMask = 1 << 13
	QPAttrAltPath          QPAttrMask = 1 << 14
	QPAttrMinRNRTimer      QPAttrMask = 1 << 15
	QPAttrSQPSN            QPAttrMask = 1 << 16
	QPAttrMaxDestRdAtomic  QPAttrMask = 1 << 17
	QPAttrPathMigState     QPAttrMask = 1 << 18
	QPAttrCap              QPAttrMask = 1 << 19
	QPAttrDestQPN          QPAttrMask = 1 << 20
)

// QPAttr is struct ibv_qp_attr, the subset a RoCEv2 device uses.
type QPAttr struct {
	State           QPState
	CurState        QPState
	PathMTU         wire.MTU
	QKey            uint32
	RQPSN           wire.PSN
	SQPSN           wire.PSN
	DestQPN         uint32
	AccessFlags     Access
	Cap             QPCap
	AH              AH
	PKeyIndex       uint16
	Port            uint8
	MinRNRTimer     uint8
	Timeout         uint8
	RetryCnt        uint8
	RNRRetry        uint8
	MaxRdAtomic     uint8
	MaxDestRdAtomic uint8
}

var qpStateNames = [...]string{"RESET", "INIT", "RTR", "RTS", "SQD", "SQE", "ERR"}

func (s QPState) String() string {
	if int(s) < len(qpStateNames) {
		return qpStateNames[s]
	}
	return "QPState(?)"
}

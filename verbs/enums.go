package verbs

import "github.com/goverbs/goverbs/verbs/driver"

// The enums and flags are defined once, in package verbs/driver, which every provider
// shares; these are the same types and constants under their verbs names.

// MTU is an InfiniBand MTU (enum ibv_mtu): MTU256 … MTU4096.
type MTU = driver.MTU

const (
	MTU256  = driver.MTU256
	MTU512  = driver.MTU512
	MTU1024 = driver.MTU1024
	MTU2048 = driver.MTU2048
	MTU4096 = driver.MTU4096
)

// Access is the set of access rights of a memory region, window or QP (ibv_access_flags).
type Access = driver.Access

const (
	AccessLocalWrite   = driver.AccessLocalWrite
	AccessRemoteWrite  = driver.AccessRemoteWrite
	AccessRemoteRead   = driver.AccessRemoteRead
	AccessRemoteAtomic = driver.AccessRemoteAtomic
	AccessMWBind       = driver.AccessMWBind
)

// QPType is the transport service of a QP (ibv_qp_type).
type QPType = driver.QPType

const (
	QPTypeRC = driver.QPTypeRC
	QPTypeUC = driver.QPTypeUC
	QPTypeUD = driver.QPTypeUD
	// XRC (IBTA Annex A14): see XRCD.
	QPTypeXRCSend = driver.QPTypeXRCSend
	QPTypeXRCRecv = driver.QPTypeXRCRecv
)

// QPState is a QP's state (ibv_qp_state, IBTA 10.3.1).
type QPState = driver.QPState

const (
	QPStateReset = driver.QPStateReset
	QPStateInit  = driver.QPStateInit
	QPStateRTR   = driver.QPStateRTR
	QPStateRTS   = driver.QPStateRTS
	QPStateSQD   = driver.QPStateSQD
	QPStateSQE   = driver.QPStateSQE
	QPStateErr   = driver.QPStateErr
)

// WROpcode is the operation of a send work request (ibv_wr_opcode).
type WROpcode = driver.WROpcode

const (
	WRRDMAWrite        = driver.WRRDMAWrite
	WRRDMAWriteWithImm = driver.WRRDMAWriteWithImm
	WRSend             = driver.WRSend
	WRSendWithImm      = driver.WRSendWithImm
	WRRDMARead         = driver.WRRDMARead
	WRAtomicCmpAndSwp  = driver.WRAtomicCmpAndSwp
	WRAtomicFetchAdd   = driver.WRAtomicFetchAdd
	WRLocalInv         = driver.WRLocalInv
	WRBindMW           = driver.WRBindMW
	WRSendWithInv      = driver.WRSendWithInv
)

// SendFlags modify a send work request (ibv_send_flags).
type SendFlags = driver.SendFlags

const (
	SendFence     = driver.SendFence
	SendSignaled  = driver.SendSignaled
	SendSolicited = driver.SendSolicited
	SendInline    = driver.SendInline
)

// WCOpcode is the operation a work completion reports (ibv_wc_opcode).
type WCOpcode = driver.WCOpcode

const (
	WCSend            = driver.WCSend
	WCRDMAWrite       = driver.WCRDMAWrite
	WCRDMARead        = driver.WCRDMARead
	WCCompSwap        = driver.WCCompSwap
	WCFetchAdd        = driver.WCFetchAdd
	WCBindMW          = driver.WCBindMW
	WCLocalInv        = driver.WCLocalInv
	WCRecv            = driver.WCRecv
	WCRecvRDMAWithImm = driver.WCRecvRDMAWithImm
)

// WCStatus is the outcome of a work request (ibv_wc_status).
type WCStatus = driver.WCStatus

const (
	WCSuccess        = driver.WCSuccess
	WCLocLenErr      = driver.WCLocLenErr
	WCLocQPOpErr     = driver.WCLocQPOpErr
	WCLocEECOpErr    = driver.WCLocEECOpErr
	WCLocProtErr     = driver.WCLocProtErr
	WCWRFlushErr     = driver.WCWRFlushErr
	WCMWBindErr      = driver.WCMWBindErr
	WCBadRespErr     = driver.WCBadRespErr
	WCLocAccessErr   = driver.WCLocAccessErr
	WCRemInvReqErr   = driver.WCRemInvReqErr
	WCRemAccessErr   = driver.WCRemAccessErr
	WCRemOpErr       = driver.WCRemOpErr
	WCRetryExcErr    = driver.WCRetryExcErr
	WCRNRRetryExcErr = driver.WCRNRRetryExcErr
	WCLocRDDViolErr  = driver.WCLocRDDViolErr
	WCRemInvRdReqErr = driver.WCRemInvRdReqErr
	WCRemAbortErr    = driver.WCRemAbortErr
	WCInvEECNErr     = driver.WCInvEECNErr
	WCInvEECStateErr = driver.WCInvEECStateErr
	WCFatalErr       = driver.WCFatalErr
	WCRespTimeoutErr = driver.WCRespTimeoutErr
	WCGeneralErr     = driver.WCGeneralErr
)

// WCFlags describe a work completion (ibv_wc_flags).
type WCFlags = driver.WCFlags

const (
	WCWithGRH = driver.WCWithGRH
	WCWithImm = driver.WCWithImm
	WCWithInv = driver.WCWithInv
)

// QPAttrMask selects the attributes ModifyQP applies (ibv_qp_attr_mask).
type QPAttrMask = driver.QPAttrMask

const (
	QPAttrState            = driver.QPAttrState
	QPAttrCurState         = driver.QPAttrCurState
	QPAttrEnSQDAsyncNotify = driver.QPAttrEnSQDAsyncNotify
	QPAttrAccessFlags      = driver.QPAttrAccessFlags
	QPAttrPKeyIndex        = driver.QPAttrPKeyIndex
	QPAttrPort             = driver.QPAttrPort
	QPAttrQKey             = driver.QPAttrQKey
	QPAttrAV               = driver.QPAttrAV
	QPAttrPathMTU          = driver.QPAttrPathMTU
	QPAttrTimeout          = driver.QPAttrTimeout
	QPAttrRetryCnt         = driver.QPAttrRetryCnt
	QPAttrRNRRetry         = driver.QPAttrRNRRetry
	QPAttrRQPSN            = driver.QPAttrRQPSN
	QPAttrMaxQPRdAtomic    = driver.QPAttrMaxQPRdAtomic
	QPAttrAltPath          = driver.QPAttrAltPath
	QPAttrMinRNRTimer      = driver.QPAttrMinRNRTimer
	QPAttrSQPSN            = driver.QPAttrSQPSN
	QPAttrMaxDestRdAtomic  = driver.QPAttrMaxDestRdAtomic
	QPAttrPathMigState     = driver.QPAttrPathMigState
	QPAttrCap              = driver.QPAttrCap
	QPAttrDestQPN          = driver.QPAttrDestQPN
)

// EventType is the kind of an asynchronous event (ibv_event_type).
type EventType = driver.EventType

const (
	EventCQErr            = driver.EventCQErr
	EventQPFatal          = driver.EventQPFatal
	EventQPReqErr         = driver.EventQPReqErr
	EventQPAccessErr      = driver.EventQPAccessErr
	EventCommEst          = driver.EventCommEst
	EventSQDrained        = driver.EventSQDrained
	EventDeviceFatal      = driver.EventDeviceFatal
	EventPortActive       = driver.EventPortActive
	EventPortErr          = driver.EventPortErr
	EventSRQErr           = driver.EventSRQErr
	EventSRQLimitReached  = driver.EventSRQLimitReached
	EventQPLastWQEReached = driver.EventQPLastWQEReached
)

// NodeType is what kind of node a device is (ibv_node_type).
type NodeType = driver.NodeType

const (
	NodeCA   = driver.NodeCA
	NodeRNIC = driver.NodeRNIC
)

// AtomicCap says how atomics are atomic (ibv_atomic_cap).
type AtomicCap = driver.AtomicCap

const (
	AtomicNone = driver.AtomicNone
	AtomicHCA  = driver.AtomicHCA  // atomic among this device's operations
	AtomicGlob = driver.AtomicGlob // atomic with the CPU too
)

// PortState is a port's logical state (ibv_port_state).
type PortState = driver.PortState

const (
	PortDown   = driver.PortDown
	PortInit   = driver.PortInit
	PortArmed  = driver.PortArmed
	PortActive = driver.PortActive
)

// MWType is a memory window's type (ibv_mw_type).
type MWType = driver.MWType

const (
	// MWType1 windows are bound with QP.BindMW and stay bound until rebound.
	MWType1 = driver.MWType1
	// MWType2 windows are bound with a BIND_MW work request and revoked with LOCAL_INV
	// or by a peer's SEND_WITH_INV.
	MWType2 = driver.MWType2
)

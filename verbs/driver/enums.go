package driver

import (
	"fmt"
	"strings"

	"github.com/goverbs/goverbs/wire"
)

// MTU is an InfiniBand MTU (enum ibv_mtu): MTU256 … MTU4096.
type MTU = wire.MTU

const (
	MTU256  = wire.MTU256
	MTU512  = wire.MTU512
	MTU1024 = wire.MTU1024
	MTU2048 = wire.MTU2048
	MTU4096 = wire.MTU4096
)

// Access is the set of access rights of a memory region, window or QP (ibv_access_flags).
type Access uint32

const (
	AccessLocalWrite   Access = 1 << 0
	AccessRemoteWrite  Access = 1 << 1
	AccessRemoteRead   Access = 1 << 2
	AccessRemoteAtomic Access = 1 << 3
	AccessMWBind       Access = 1 << 4
)

func (a Access) String() string {
	return flagString(uint64(a), []string{"LOCAL_WRITE", "REMOTE_WRITE", "REMOTE_READ", "REMOTE_ATOMIC", "MW_BIND"})
}

// QPType is the transport service of a QP (ibv_qp_type).
type QPType uint8

const (
	QPTypeRC QPType = 2
	QPTypeUC QPType = 3
	QPTypeUD QPType = 4
	// QPTypeXRCSend is an XRC initiator (IBV_QPT_XRC_SEND, IBTA Annex A14): a send
	// queue without a receive queue, each SEND naming the target's XRC SRQ
	// (SendWR.RemoteSRQN).
	QPTypeXRCSend QPType = 9
	// QPTypeXRCRecv is an XRC target (IBV_QPT_XRC_RECV): transport state without
	// queues of its own, created from an XRC domain; what it receives lands in the XRC
	// SRQ each request names, and completes in that SRQ's CQ.
	QPTypeXRCRecv QPType = 10
)

// XRC reports whether t is one of the two XRC types.
func (t QPType) XRC() bool { return t == QPTypeXRCSend || t == QPTypeXRCRecv }

func (t QPType) String() string {
	switch t {
	case QPTypeRC:
		return "RC"
	case QPTypeUC:
		return "UC"
	case QPTypeUD:
		return "UD"
	case QPTypeXRCSend:
		return "XRC_SEND"
	case QPTypeXRCRecv:
		return "XRC_RECV"
	}
	return fmt.Sprintf("QPType(%d)", uint8(t))
}

// SRQType is the kind of a shared receive queue (ibv_srq_type).
type SRQType uint8

const (
	SRQTypeBasic SRQType = 0 // IBV_SRQT_BASIC: receives of the QPs created with it
	SRQTypeXRC   SRQType = 1 // IBV_SRQT_XRC: receives of XRC requests naming its number
)

func (t SRQType) String() string {
	switch t {
	case SRQTypeBasic:
		return "BASIC"
	case SRQTypeXRC:
		return "XRC"
	}
	return fmt.Sprintf("SRQType(%d)", uint8(t))
}

// DeviceXRC is the device capability bit for XRC (IBV_DEVICE_XRC) in
// DeviceAttr.DeviceCapFlags.
const DeviceXRC = 1 << 20

// QPState is a QP's state (ibv_qp_state, IBTA 10.3.1).
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

var qpStateNames = [...]string{"RESET", "INIT", "RTR", "RTS", "SQD", "SQE", "ERR"}

func (s QPState) String() string {
	if int(s) < len(qpStateNames) {
		return qpStateNames[s]
	}
	return fmt.Sprintf("QPState(%d)", uint8(s))
}

// WROpcode is the operation of a send work request (ibv_wr_opcode).
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

var wrOpcodeNames = [...]string{"RDMA_WRITE", "RDMA_WRITE_WITH_IMM", "SEND", "SEND_WITH_IMM", "RDMA_READ",
	"ATOMIC_CMP_AND_SWP", "ATOMIC_FETCH_AND_ADD", "LOCAL_INV", "BIND_MW", "SEND_WITH_INV"}

func (o WROpcode) String() string {
	if int(o) < len(wrOpcodeNames) {
		return wrOpcodeNames[o]
	}
	return fmt.Sprintf("WROpcode(%d)", uint8(o))
}

// SendFlags modify a send work request (ibv_send_flags).
type SendFlags uint32

const (
	SendFence     SendFlags = 1 << 0
	SendSignaled  SendFlags = 1 << 1
	SendSolicited SendFlags = 1 << 2
	SendInline    SendFlags = 1 << 3
)

func (f SendFlags) String() string {
	return flagString(uint64(f), []string{"FENCE", "SIGNALED", "SOLICITED", "INLINE"})
}

// WCOpcode is the operation a work completion reports (ibv_wc_opcode).
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

func (o WCOpcode) String() string {
	switch o {
	case WCSend:
		return "SEND"
	case WCRDMAWrite:
		return "RDMA_WRITE"
	case WCRDMARead:
		return "RDMA_READ"
	case WCCompSwap:
		return "COMP_SWAP"
	case WCFetchAdd:
		return "FETCH_ADD"
	case WCBindMW:
		return "BIND_MW"
	case WCLocalInv:
		return "LOCAL_INV"
	case WCRecv:
		return "RECV"
	case WCRecvRDMAWithImm:
		return "RECV_RDMA_WITH_IMM"
	}
	return fmt.Sprintf("WCOpcode(%d)", uint8(o))
}

// WCStatus is the outcome of a work request (ibv_wc_status).
type WCStatus uint8

const (
	WCSuccess        WCStatus = 0
	WCLocLenErr      WCStatus = 1
	WCLocQPOpErr     WCStatus = 2
	WCLocEECOpErr    WCStatus = 3
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
	WCLocRDDViolErr  WCStatus = 14
	WCRemInvRdReqErr WCStatus = 15
	WCRemAbortErr    WCStatus = 16
	WCInvEECNErr     WCStatus = 17
	WCInvEECStateErr WCStatus = 18
	WCFatalErr       WCStatus = 19
	WCRespTimeoutErr WCStatus = 20
	WCGeneralErr     WCStatus = 21
)

// The texts of ibv_wc_status_str, so logs read the same as with libibverbs.
var wcStatusNames = [...]string{
	"success", "local length error", "local QP operation error", "local EE context operation error",
	"local protection error", "Work Request Flushed Error", "memory management operation error",
	"bad response error", "local access error", "remote invalid request error", "remote access error",
	"remote operation error", "transport retry counter exceeded", "RNR retry counter exceeded",
	"local RDD violation error", "remote invalid RD request", "aborted error", "invalid EE context number",
	"invalid EE context state", "fatal error", "response timeout error", "general error",
}

func (s WCStatus) String() string {
	if int(s) < len(wcStatusNames) {
		return wcStatusNames[s]
	}
	return "unknown"
}

// WCFlags describe a work completion (ibv_wc_flags).
type WCFlags uint32

const (
	WCWithGRH WCFlags = 1 << 0
	WCWithImm WCFlags = 1 << 1
	WCWithInv WCFlags = 1 << 3
)

func (f WCFlags) String() string {
	return flagString(uint64(f), []string{"GRH", "WITH_IMM", "IP_CSUM_OK", "WITH_INV"})
}

// QPAttrMask selects the attributes ModifyQP applies (ibv_qp_attr_mask).
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

var qpAttrNames = []string{"STATE", "CUR_STATE", "EN_SQD_ASYNC_NOTIFY", "ACCESS_FLAGS", "PKEY_INDEX",
	"PORT", "QKEY", "AV", "PATH_MTU", "TIMEOUT", "RETRY_CNT", "RNR_RETRY", "RQ_PSN", "MAX_QP_RD_ATOMIC",
	"ALT_PATH", "MIN_RNR_TIMER", "SQ_PSN", "MAX_DEST_RD_ATOMIC", "PATH_MIG_STATE", "CAP", "DEST_QPN"}

func (m QPAttrMask) String() string { return flagString(uint64(m), qpAttrNames) }

// EventType is the kind of an asynchronous event (ibv_event_type).
type EventType uint8

const (
	EventCQErr            EventType = 0
	EventQPFatal          EventType = 1
	EventQPReqErr         EventType = 2
	EventQPAccessErr      EventType = 3
	EventCommEst          EventType = 4
	EventSQDrained        EventType = 5
	EventDeviceFatal      EventType = 8
	EventPortActive       EventType = 9
	EventPortErr          EventType = 10
	EventSRQErr           EventType = 14
	EventSRQLimitReached  EventType = 15
	EventQPLastWQEReached EventType = 16
)

// The texts of ibv_event_type_str.
func (e EventType) String() string {
	switch e {
	case EventCQErr:
		return "CQ error"
	case EventQPFatal:
		return "local work queue catastrophic error"
	case EventQPReqErr:
		return "invalid request local work queue error"
	case EventQPAccessErr:
		return "local access violation work queue error"
	case EventCommEst:
		return "communication established"
	case EventSQDrained:
		return "send queue drained"
	case EventDeviceFatal:
		return "local catastrophic error"
	case EventPortActive:
		return "port active"
	case EventPortErr:
		return "port error"
	case EventSRQErr:
		return "SRQ catastrophic error"
	case EventSRQLimitReached:
		return "SRQ limit reached"
	case EventQPLastWQEReached:
		return "last WQE reached"
	}
	return "unknown"
}

func flagString(v uint64, names []string) string {
	if v == 0 {
		return "0"
	}
	var parts []string
	for i, n := range names {
		if v&(1<<i) != 0 {
			parts = append(parts, n)
			v &^= 1 << i
		}
	}
	if v != 0 {
		parts = append(parts, fmt.Sprintf("%#x", v))
	}
	return strings.Join(parts, "|")
}

// NodeType is what kind of node a device is (ibv_node_type).
type NodeType uint8

const (
	NodeCA   NodeType = 1
	NodeRNIC NodeType = 4
)

func (n NodeType) String() string {
	switch n {
	case NodeCA:
		return "InfiniBand channel adapter"
	case NodeRNIC:
		return "iWARP NIC"
	}
	return "unknown"
}

// AtomicCap says how atomics are atomic (ibv_atomic_cap).
type AtomicCap uint8

const (
	AtomicNone AtomicCap = 0
	AtomicHCA  AtomicCap = 1 // atomic among this device's operations
	AtomicGlob AtomicCap = 2 // atomic with the CPU too
)

func (a AtomicCap) String() string {
	switch a {
	case AtomicHCA:
		return "ATOMIC_HCA"
	case AtomicGlob:
		return "ATOMIC_GLOB"
	}
	return "ATOMIC_NONE"
}

// PortState is a port's logical state (ibv_port_state).
type PortState uint8

const (
	PortDown   PortState = 1
	PortInit   PortState = 2
	PortArmed  PortState = 3
	PortActive PortState = 4
)

func (s PortState) String() string {
	switch s {
	case PortDown:
		return "PORT_DOWN"
	case PortInit:
		return "PORT_INIT"
	case PortArmed:
		return "PORT_ARMED"
	case PortActive:
		return "PORT_ACTIVE"
	}
	return "PORT_NOP"
}

// MWType is a memory window's type (ibv_mw_type).
type MWType uint8

const (
	// MWType1 windows are bound with QP.BindMW and stay bound until rebound.
	MWType1 MWType = 1
	// MWType2 windows are bound with a BIND_MW work request and revoked with LOCAL_INV
	// or by a peer's SEND_WITH_INV.
	MWType2 MWType = 2
)

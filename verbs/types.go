package verbs

import (
	"net/netip"
)

// SGE is one scatter/gather element: Length bytes at address Addr inside the memory region
// whose local key is LKey (struct ibv_sge). Build them with MR.SGE.
type SGE struct {
	Addr   uint64
	Length uint32
	LKey   uint32
}

// SendWR is a send work request (struct ibv_send_wr; the list link is a Go slice instead).
type SendWR struct {
	ID     uint64
	Opcode WROpcode
	Flags  SendFlags
	SGL    []SGE
	// Imm is the immediate data of the *_WITH_IMM operations (a host-order value; it is
	// carried big-endian on the wire as ibv's __be32 imm_data is), or the rkey to
	// invalidate for SEND_WITH_INV and LOCAL_INV.
	Imm uint32
	// RemoteAddr and RKey name the remote memory of RDMA and atomic operations.
	RemoteAddr uint64
	RKey       uint32
	// CompareAdd is the compare operand of ATOMIC_CMP_AND_SWP or the addend of
	// ATOMIC_FETCH_AND_ADD; Swap is CMP_AND_SWP's new value.
	CompareAdd uint64
	Swap       uint64
	// UD: the destination.
	AH         *AH
	RemoteQPN  uint32
	RemoteQKey uint32
	// BIND_MW: the window and its binding.
	Bind *MWBindWR
}

// RecvWR is a receive work request (struct ibv_recv_wr).
type RecvWR struct {
	ID  uint64
	SGL []SGE
}

// WC is a work completion (struct ibv_wc).
type WC struct {
	ID      uint64
	Status  WCStatus
	Opcode  WCOpcode
	ByteLen uint32
	// Imm is the immediate data with WCWithImm, or the invalidated rkey with WCWithInv.
	Imm   uint32
	QPN   uint32
	SrcQP uint32
	Flags WCFlags
	// VendorErr carries the NAK syndrome behind a remote error status.
	VendorErr uint32
}

// GID is a 128-bit global identifier. On RoCEv2 it is the port's IP address, IPv4
// addresses mapped into IPv6 (::ffff:a.b.c.d), IBTA Annex A17.8.
type GID [16]byte

// GIDFromAddr returns the RoCEv2 GID of an IP address.
func GIDFromAddr(a netip.Addr) GID {
	if a.Is4() {
		a = netip.AddrFrom16(a.As16())
	}
	return GID(a.As16())
}

// Addr returns the IP address the GID stands for (IPv4 unmapped).
func (g GID) Addr() netip.Addr { return netip.AddrFrom16(g).Unmap() }

// String formats the GID as libibverbs tools do (eight groups of four hex digits).
func (g GID) String() string {
	const hex = "0123456789abcdef"
	b := make([]byte, 0, 39)
	for i := 0; i < 16; i += 2 {
		if i > 0 {
			b = append(b, ':')
		}
		b = append(b, hex[g[i]>>4], hex[g[i]&15], hex[g[i+1]>>4], hex[g[i+1]&15])
	}
	return string(b)
}

// IsZero reports whether the GID is all zeros.
func (g GID) IsZero() bool { return g == GID{} }

// AHAttr is an address vector (struct ibv_ah_attr with its GRH): where packets go.
// On RoCEv2 the destination GID is what matters; DLID and the like do not exist.
type AHAttr struct {
	DGID         GID
	SGIDIndex    uint8
	HopLimit     uint8
	TrafficClass uint8
	FlowLabel    uint32
	SL           uint8
	Port         uint8
}

// QPCap is the sizes of a QP's queues (struct ibv_qp_cap).
type QPCap struct {
	MaxSendWR, MaxRecvWR   uint32
	MaxSendSGE, MaxRecvSGE uint32
	MaxInline              uint32
}

// QPInitAttr describes a QP to create (struct ibv_qp_init_attr).
type QPInitAttr struct {
	Type   QPType
	SendCQ *CQ
	RecvCQ *CQ
	SRQ    *SRQ
	Cap    QPCap
	// SigAll makes every send WR signaled (sq_sig_all).
	SigAll bool
}

// QPAttr is a QP's attributes (struct ibv_qp_attr), set with QP.Modify and read with QP.Query.
type QPAttr struct {
	State           QPState
	CurState        QPState
	PathMTU         MTU
	QKey            uint32
	RQPSN           uint32
	SQPSN           uint32
	DestQPN         uint32
	AccessFlags     Access
	Cap             QPCap
	AH              AHAttr
	PKeyIndex       uint16
	Port            uint8
	MinRNRTimer     uint8
	Timeout         uint8
	RetryCnt        uint8
	RNRRetry        uint8
	MaxRdAtomic     uint8
	MaxDestRdAtomic uint8
}

// DeviceAttr is what a device supports (struct ibv_device_attr).
type DeviceAttr struct {
	FWVer           string
	NodeGUID        uint64
	SysImageGUID    uint64
	MaxMRSize       uint64
	PageSizeCap     uint64
	VendorID        uint32
	VendorPartID    uint32
	HWVer           uint32
	MaxQP           int
	MaxQPWR         int
	DeviceCapFlags  uint32
	MaxSGE          int
	MaxSGERd        int
	MaxCQ           int
	MaxCQE          int
	MaxMR           int
	MaxPD           int
	MaxQPRdAtom     int
	MaxQPInitRdAtom int
	MaxSRQ          int
	MaxSRQWR        int
	MaxSRQSGE       int
	MaxAH           int
	MaxMW           int
	MaxInlineData   int
	AtomicCap       AtomicCap
	PhysPortCnt     uint8
	MaxPKeys        uint16
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

// PortAttr describes a port (struct ibv_port_attr).
type PortAttr struct {
	State        PortState
	MaxMTU       MTU
	ActiveMTU    MTU
	GIDTblLen    int
	PortCapFlags uint32
	MaxMsgSz     uint32
	PKeyTblLen   uint16
	LID          uint16
	SMLID        uint16
	LMC          uint8
	PhysState    uint8 // 5 = LinkUp
	LinkLayer    string
	ActiveSpeed  string
	ActiveWidth  string
}

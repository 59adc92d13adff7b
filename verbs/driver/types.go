package driver

import (
	"fmt"
	"net/netip"
)

// The data-path structs (SGE, SendWR, RecvWR, WC) and the attribute structs, shared by
// package verbs (which aliases them) and every provider (which reads and fills them in
// place: a post hands the caller's slice to the provider without a copy).

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
	// XRC_SEND: the number of the XRC SRQ at the target that receives the message
	// (wr.qp_type.xrc.remote_srqn), carried in every request's XRCETH.
	RemoteSRQN uint32
	// UD: the destination.
	AH         AHRef
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
	// The multicast limits: groups, QPs attached to one group, attachments in all.
	MaxMcastGrp           int
	MaxMcastQPAttach      int
	MaxTotalMcastQPAttach int
	MaxMW                 int
	MaxInlineData         int
	AtomicCap             AtomicCap
	PhysPortCnt           uint8
	MaxPKeys              uint16
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

// AHRef names an address handle in a work request (SendWR.AH). A *verbs.AH is one; the
// provider that created the handle gets its own AH back with DriverAH. DriverAH of a nil
// handle returns nil.
type AHRef interface{ DriverAH() AH }

// MRRef names a memory region in a binding (MWBind.MR); *verbs.MR is one.
type MRRef interface{ DriverMR() MR }

// MWRef names a memory window in a BIND_MW work request (MWBindWR.MW); *verbs.MW is one.
type MWRef interface{ DriverMW() MW }

// MWBind says what a window grants (struct ibv_mw_bind_info): Length bytes at Addr of
// MR, which must have AccessMWBind, with the remote rights in Access.
type MWBind struct {
	MR     MRRef
	Addr   uint64
	Length uint64
	Access Access
}

// MWBindWR is the payload of a BIND_MW work request (type 2 windows): the window, the
// rkey it gets (IncRKey of its current one), and the binding.
type MWBindWR struct {
	MW   MWRef
	RKey uint32
	MWBind
}

// IncRKey returns rkey with its low 8-bit key part incremented (ibv_inc_rkey): the rkey a
// type 2 window is given on its next bind.
func IncRKey(rkey uint32) uint32 { return rkey&^0xff | (rkey+1)&0xff }

// SRQAttr describes a shared receive queue (struct ibv_srq_attr).
type SRQAttr struct {
	MaxWR    uint32
	MaxSGE   uint32
	SRQLimit uint32
}

// GIDEntry is one entry of a port's GID table.
type GIDEntry struct {
	Index int
	GID   GID
	Type  string // "RoCE v2"
}

// Counter is one named statistic.
type Counter struct {
	Name  string
	Value uint64
}

// Counters is a snapshot of a device's statistics, in the spirit of `rdma statistic`:
// packets and bytes each way, retransmissions, NAKs, and every reason a packet was dropped.
type Counters []Counter

// Get returns the named counter's value (0 if there is none).
func (c Counters) Get(name string) uint64 {
	for _, x := range c {
		if x.Name == name {
			return x.Value
		}
	}
	return 0
}

// QPCounters are one QP's statistics.
type QPCounters struct {
	TxPackets, RxPackets uint64
	Retransmits          uint64
	RetryTimeouts        uint64
	RNRNakSent           uint64
	RNRNakReceived       uint64
	SeqNakSent           uint64
	SeqNakReceived       uint64
	DuplicateRequests    uint64
}

// DeviceInfo is a provider's listing of one device it can open.
type DeviceInfo struct {
	Name     string
	NodeGUID uint64
	NodeType NodeType
	// Transport of the device: "InfiniBand" for RoCE, as libibverbs reports it.
	Transport string
}

// QPInit describes a QP to create, in the provider's own objects: package verbs has
// checked that the CQs and the SRQ belong to the QP's device and PD, and that Type is
// one of RC, UC, UD and XRC_SEND (PD.CreateQP) or XRC_RECV (XRCD.CreateQP). An
// XRC_SEND QP has no RecvCQ; an XRC_RECV QP has neither CQ.
type QPInit struct {
	Type   QPType
	SendCQ CQ
	RecvCQ CQ
	SRQ    SRQ // nil without a shared receive queue
	Cap    QPCap
	SigAll bool // every send WR is signaled (sq_sig_all)
	// BlockSelfMcastLoopback: the QP does not receive the multicast packets it sent
	// itself (IBV_QP_CREATE_BLOCK_SELF_MCAST_LB); other members still do.
	BlockSelfMcastLoopback bool
}

// AsyncEvent is an asynchronous event as a provider reports it, naming its own objects;
// package verbs maps them back to the user's.
type AsyncEvent struct {
	Type EventType
	QP   QP
	CQ   CQ
	SRQ  SRQ
	Port uint8
}

// PostError says which work request of a PostSend/PostRecv batch was refused; the ones
// before it were posted.
type PostError struct {
	Index int
	Err   error
}

func (e *PostError) Error() string {
	return fmt.Sprintf("verbs: work request %d: %s", e.Index, Detail(e.Err))
}
func (e *PostError) Unwrap() error { return e.Err }

// GRHLen is the size of the GRH area at the start of every UD receive buffer
// (IBTA 11.4.1.2). For RoCEv2 over IPv4 its last 20 bytes hold the IPv4 header.
const GRHLen = 40

package verbs

import (
	"net/netip"

	"github.com/goverbs/goverbs/verbs/driver"
)

// The data-path structs and the attribute structs are defined once, in package
// verbs/driver, so that a provider reads and fills them in place; these are the same
// types under their verbs names.

// SGE is one scatter/gather element: Length bytes at address Addr inside the memory region
// whose local key is LKey (struct ibv_sge). Build them with MR.SGE.
type SGE = driver.SGE

// SendWR is a send work request (struct ibv_send_wr; the list link is a Go slice instead).
type SendWR = driver.SendWR

// RecvWR is a receive work request (struct ibv_recv_wr).
type RecvWR = driver.RecvWR

// WC is a work completion (struct ibv_wc).
type WC = driver.WC

// GID is a 128-bit global identifier. On RoCEv2 it is the port's IP address, IPv4
// addresses mapped into IPv6 (::ffff:a.b.c.d), IBTA Annex A17.8.
type GID = driver.GID

// AHAttr is an address vector (struct ibv_ah_attr with its GRH): where packets go.
// On RoCEv2 the destination GID is what matters; DLID and the like do not exist.
type AHAttr = driver.AHAttr

// QPCap is the sizes of a QP's queues (struct ibv_qp_cap).
type QPCap = driver.QPCap

// QPAttr is a QP's attributes (struct ibv_qp_attr), set with QP.Modify and read with QP.Query.
type QPAttr = driver.QPAttr

// DeviceAttr is what a device supports (struct ibv_device_attr).
type DeviceAttr = driver.DeviceAttr

// PortAttr describes a port (struct ibv_port_attr).
type PortAttr = driver.PortAttr

// MWBind says what a window grants (struct ibv_mw_bind_info): Length bytes at Addr of
// MR, which must have AccessMWBind, with the remote rights in Access.
type MWBind = driver.MWBind

// MWBindWR is the payload of a BIND_MW work request (type 2 windows): the window, the
// rkey it gets (IncRKey of its current one), and the binding.
type MWBindWR = driver.MWBindWR

// SRQAttr describes a shared receive queue (struct ibv_srq_attr).
type SRQAttr = driver.SRQAttr

// GIDEntry is one entry of a port's GID table.
type GIDEntry = driver.GIDEntry

// Counter is one named statistic.
type Counter = driver.Counter

// Counters is a snapshot of a device's statistics, in the spirit of `rdma statistic`:
// packets and bytes each way, retransmissions, NAKs, and every reason a packet was dropped.
type Counters = driver.Counters

// QPCounters are one QP's statistics.
type QPCounters = driver.QPCounters

// PostError says which work request of a PostSend/PostRecv batch was refused; the ones
// before it were posted.
type PostError = driver.PostError

// GIDFromAddr returns the RoCEv2 GID of an IP address.
func GIDFromAddr(a netip.Addr) GID { return driver.GIDFromAddr(a) }

// IncRKey returns rkey with its low 8-bit key part incremented (ibv_inc_rkey): the rkey a
// type 2 window is given on its next bind.
func IncRKey(rkey uint32) uint32 { return driver.IncRKey(rkey) }

// GRHLen is the size of the GRH area at the start of every UD receive buffer
// (IBTA 11.4.1.2). For RoCEv2 over IPv4 its last 20 bytes hold the IPv4 header.
const GRHLen = driver.GRHLen

// QPInitAttr describes a QP to create (struct ibv_qp_init_attr).
type QPInitAttr struct {
	Type   QPType
	SendCQ *CQ
	RecvCQ *CQ
	SRQ    *SRQ
	Cap    QPCap
	// SigAll makes every send WR signaled (sq_sig_all).
	SigAll bool
	// BlockSelfMcastLoopback keeps a UD QP's own multicast sends out of its receive
	// queue (IBV_QP_CREATE_BLOCK_SELF_MCAST_LB, mckey -l); other members, on this host
	// too, still receive them.
	BlockSelfMcastLoopback bool
}

// Package afxdp is a netio backend that moves RoCEv2 datagrams through an AF_XDP socket
// (Linux): the NIC's ring hands the device's packets to user space, and everything else
// stays on the kernel's path.
//
// [Open] binds an AF_XDP socket to one queue of a network interface (and, for more
// receive queues, a socket per queue sharing its memory), with a UMEM (the packet memory
// shared with the kernel) and its four rings: fill and rx for receiving, tx and
// completion for sending. It loads a small XDP program, written here with
// cilium/ebpf's asm package (no C toolchain), that redirects into the socket exactly the
// UDP datagrams to the device's address and port (4791 for RoCEv2) and passes the rest
// (ARP, ICMP, other UDP, other addresses, fragments) to the kernel, and attaches it
// through a BPF link, which the kernel removes when the process dies. Close detaches it.
//
// goverbs builds the Ethernet, IP and UDP headers itself: IPv4 with DF set and
// Identification 0 (netio's IPv4 Identification contract, which the engine's ICRC
// assumes), TTL 64, the UDP checksum computed. The destination MAC address comes from
// the kernel's neighbour table over netlink; a miss is resolved by the kernel (a
// netlink request that makes it probe, or else an ordinary UDP datagram that makes it
// resolve), never by ARP or neighbour discovery built here.
//
// Datagrams within the host (to another device here, or to the device itself) cannot
// cross a NIC: they take the local path, a kernel UDP socket on the same address and
// port, which also receives what the program passed up to the kernel.
//
// The socket runs zero-copy where the driver offers it (XDP_ZEROCOPY) and in copy mode
// otherwise (veth, and any driver without AF_XDP support); [Conn.Mode] says which.
//
// It needs CAP_NET_ADMIN and CAP_BPF (load and attach the program) and CAP_NET_RAW (the
// socket); Open fails naming the one that is missing, and never falls back to another
// backend by itself.
//
// In the default mode a blocked ReadBatch parks in Go's netpoller on an epoll instance
// that watches the socket; with Options.BusyPoll the socket stays outside the netpoller,
// the receive loop spins on the rx ring, and the socket asks the kernel for busy polling
// (SO_PREFER_BUSY_POLL, SO_BUSY_POLL, SO_BUSY_POLL_BUDGET), which the reader drives with
// non-blocking recvfrom calls as libxdp's xdpsock does.
package afxdp

import (
	"errors"
	"fmt"
	"net/netip"
)

// Options configures Open.
type Options struct {
	// Addr is the device's address and UDP port: datagrams to it are steered into the
	// socket. The address must be one of Interface's. A zero port means 4791 (RoCEv2).
	Addr netip.AddrPort
	// Interface is the network interface to bind (its name). Empty means the interface
	// that holds Addr.
	Interface string
	// Queue is the interface's receive and transmit queue to bind (0 by default). Only
	// what the NIC puts on this queue reaches the socket: on a NIC with several queues,
	// steer UDP port 4791 to it (ethtool -N ... flow-type udp4 dst-port 4791 action Q)
	// or use one queue (ethtool -L ... combined 1), or bind more (Queues); the program
	// passes what arrives on other queues to the kernel (and the local path reads it).
	Queue int
	// Queues are further receive queues to bind, each with a socket of its own sharing
	// the UMEM (XDP_SHARED_UMEM) and Frames/2 more frames: on a NIC that spreads RoCEv2
	// over several queues, every queue it uses. Sending goes through Queue's socket. At
	// most MaxQueues in all.
	Queues []int
	// BusyPoll keeps the socket out of Go's netpoller: ReadBatch spins on the rx ring and
	// drives the kernel's busy polling, and the Conn is a netio.Poller for a busy-poll
	// device. Lowest latency; burns a core.
	BusyPoll bool
	// BusyPollUsecs and BusyPollBudget are SO_BUSY_POLL and SO_BUSY_POLL_BUDGET with
	// BusyPoll (0: 20 µs and 64 packets). With SO_PREFER_BUSY_POLL they make each poll
	// of an empty ring a recvfrom that runs the driver's receive processing in the
	// polling thread. A negative BusyPollUsecs leaves the kernel's busy polling off:
	// polls then only read the ring, with no syscall (the kernel's softirq fills it).
	BusyPollUsecs, BusyPollBudget int
	// Frames is the number of UMEM frames, half for receiving and half for sending (0:
	// 4096); FrameSize their size, 2048 or 4096 (0: 4096). A frame holds one packet, so
	// FrameSize bounds the interface MTU the Conn can serve.
	Frames, FrameSize int
	// Copy forces copy mode even where the driver offers zero-copy.
	Copy bool
	// GenericXDP attaches the program in generic (SKB) mode instead of trying the
	// driver's native XDP first.
	GenericXDP bool
	// TTL is the IPv4 TTL / IPv6 hop limit of sent datagrams (0: DefaultTTL).
	TTL uint8
}

// Mode is how the socket moves packets between the NIC and the UMEM.
type Mode int

const (
	// ModeCopy: the kernel copies each packet between its buffers and the UMEM (any
	// driver, veth included).
	ModeCopy Mode = iota
	// ModeZeroCopy: the driver DMAs into and out of the UMEM itself (XDP_ZEROCOPY).
	ModeZeroCopy
)

func (m Mode) String() string {
	switch m {
	case ModeCopy:
		return "copy"
	case ModeZeroCopy:
		return "zero-copy"
	}
	return fmt.Sprintf("Mode(%d)", int(m))
}

// Info describes the socket, for a device listing or a tool's --stats.
type Info struct {
	Interface string
	Queue     int
	Queues    []int // every receive queue bound, Queue first
	MTU       int
	Mode      Mode
	// GenericXDP: the program runs in generic (SKB) mode, the driver having no native
	// XDP (or Options.GenericXDP).
	GenericXDP bool
	// BusyPoll: the Conn was opened with Options.BusyPoll; KernelBusyPoll: the kernel
	// accepted the busy-poll socket options.
	BusyPoll, KernelBusyPoll bool
	// LocalPath: datagrams to and from this host go through a kernel UDP socket on the
	// same address and port; LocalPathErr says why there is none (the address and port
	// were taken, by a kernel rxe device for one).
	LocalPath    bool
	LocalPathErr error
	// TxBudget: in copy mode, the descriptors one sendto transmits (the whole tx ring
	// where the kernel lets it be raised, else 32).
	TxBudget int
}

// Stats are a Conn's counters, and the kernel's for the socket (XDP_STATISTICS).
type Stats struct {
	RxPackets, TxPackets uint64
	// RxMalformed: frames dropped because their headers did not hold together (too
	// short, inconsistent lengths, a bad IPv4 header checksum) or because the kernel
	// handed over a descriptor outside the UMEM's receive frames.
	RxMalformed uint64
	// RxNotOurs: well-formed frames the program should not have redirected (another
	// address or port): dropped.
	RxNotOurs uint64
	// TxNoNeighbour: datagrams not sent because the destination's MAC address could not
	// be resolved in time (each is also reported by WriteBatch as a SendError).
	TxNoNeighbour uint64
	// TxTooBig: datagrams longer than the interface MTU or a frame.
	TxTooBig uint64
	// RxLocal and TxLocal: datagrams received and sent through the local path (a
	// kernel UDP socket on the same address and port, for traffic within this host and
	// what the program passed up to the kernel); counted in RxPackets and TxPackets too.
	RxLocal, TxLocal uint64
	// RxKicks and TxKicks count the syscalls the rings took: recvfrom to wake or drive
	// the receive side, sendto to make the kernel transmit (in copy mode one per batch of
	// up to the transmit budget; see Conn.Info).
	RxKicks, TxKicks uint64
	// TxLocalCalls counts the sendmmsg calls that sent TxLocal's datagrams: one per
	// WriteBatch (of up to 64 datagrams) unless the kernel refuses some.
	TxLocalCalls uint64
	// The kernel's counters (see linux/if_xdp.h).
	KernelRxDropped, KernelRxInvalid, KernelTxInvalid, KernelRxRingFull,
	KernelFillRingEmpty, KernelTxRingEmpty uint64
}

// ErrNotSupported is the error of Open where AF_XDP is not available: on every OS but
// Linux, and on a Linux kernel built without CONFIG_XDP_SOCKETS.
var ErrNotSupported = errors.New("afxdp: AF_XDP is not supported here")

// CapabilityError is the error of Open when the process lacks a capability it needs.
type CapabilityError struct {
	Missing []string // e.g. "CAP_BPF"
}

func (e *CapabilityError) Error() string {
	s := "afxdp: missing capability"
	if len(e.Missing) > 1 {
		s += "s"
	}
	for i, m := range e.Missing {
		if i > 0 {
			s += ","
		}
		s += " " + m
	}
	return s + " (AF_XDP needs CAP_NET_ADMIN, CAP_BPF and CAP_NET_RAW: run as root, or setcap cap_net_admin,cap_bpf,cap_net_raw+ep on the binary)"
}

// MaxQueues is the most receive queues one Conn binds (Queue and Queues together).
const MaxQueues = 16

const (
	defaultPort      = 4791
	defaultFrames    = 4096
	defaultFrameSize = 4096
	defaultBusyUsecs = 20
	defaultBudget    = 64
	batchSize        = 64
)

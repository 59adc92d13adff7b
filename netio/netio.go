// Package netio moves RoCEv2 datagrams between the software device and the network.
//
// One small interface, [Conn], carries batches of datagrams into and out of
// caller-owned buffers. [ListenUDP] is the real backend: a UDP socket (port
// 4791 for RoCEv2) using recvmmsg/sendmmsg and, when the kernel accepts them,
// UDP GSO on send and UDP GRO on receive. [Tee] records every datagram that
// crosses a Conn. Package simnet provides a simulated network for transport
// tests, and package netiotest an in-memory Conn for unit tests and TestConn,
// the conformance suite every backend passes.
//
// # Concurrency
//
// ReadBatch is meant for one goroutine at a time (the receive loop; a second
// concurrent caller waits on a mutex rather than corrupting anything), and
// WriteBatch by any number of goroutines; the two may run concurrently with
// each other. Each direction has its own scratch space (message headers,
// socket addresses, control buffers) held in the Conn and reused, so that a
// steady-state call allocates nothing. LocalAddr, Caps and Close may be called
// at any time.
//
// # IPv4 Identification
//
// The RoCEv2 ICRC covers the IPv4 Identification field. On Linux an
// unconnected UDP socket with IP_MTU_DISCOVER=IP_PMTUDISC_DO sends every
// datagram with DF set and Identification 0; ListenUDP sets that, and reports
// it as Caps.IPv4IDZero. Measured by capture on Linux 6.18
// (TestIPv4Identification, TestGSOSegmentIdentification):
//
//   - ListenUDP datagrams: DF set, Identification 0.
//   - A default socket (IP_PMTUDISC_WANT): DF set as well, but Identification
//     from the kernel's hashed counter, incrementing — an ICRC computed for 0
//     is wrong.
//   - A GSO send segmented in software (a device without UDP segmentation
//     offload): DF set on every segment, Identification 0, 1, 2, … counting
//     from 0 for each GSO send (see [GSOSegmentID]). Loopback passes the GSO
//     packet whole (one datagram, Identification 0) and the receiving socket
//     segments it. A NIC that segments in hardware numbers segments itself
//     (not measured here).
//
// So a sender that wants every datagram to carry Identification 0 must not
// use GSO, or must compute the ICRC of segment i of a run for
// Identification GSOSegmentID(0, i).
package netio

import (
	"errors"
	"fmt"
	"net/netip"
	"strconv"
	"strings"
	"time"
)

// Message is one datagram, or with SegSize a run of datagrams of SegSize
// bytes each (the last may be shorter) for GSO/GRO.
type Message struct {
	// Buf holds the data. Read: filled from Buf[0], up to len(Buf).
	// Write: Buf[:N] is sent.
	Buf []byte
	// N is the number of valid bytes in Buf.
	N int
	// Addr is the sender on read and the destination on write. A sender
	// may send from another port than it listens on (ListenUDP does; see
	// SourceAddr): answer at its listening port, as RoCEv2 answers 4791.
	Addr netip.AddrPort
	// SegSize on read is >0 when GRO coalesced several datagrams of this
	// size into Buf[:N] (the last may be shorter). On write, >0 asks for the
	// run Buf[:N] to be sent as datagrams of SegSize bytes: with GSO when
	// Caps().GSO, otherwise WriteBatch splits it itself.
	SegSize int
	// View, on read only, from a Conn that lends (ViewReader): when non-nil the data is
	// View[:N], lent where it lies instead of copied into Buf (which is left as it was).
	// It is memory another process can write while it is read: copy what is checked
	// before checking it. It stays valid until the reader's ReleaseViews or next read.
	View []byte
	// SameHost, on read: the data crossed shared memory from a goverbs device of this
	// host (the same-host shortcut's rings), not a wire. Nothing on that way flips a
	// bit, so a receiver need not check the ICRC, as Linux's loopback device marks its
	// packets' checksums unnecessary (CHECKSUM_UNNECESSARY) instead of computing them.
	// It vouches for nothing else: a hostile peer computes a valid ICRC as easily as it
	// skips one, so every other check stands. A Conn that has rings sets it, true or
	// false, on every message it fills; the others leave it false.
	//
	// On write, to a Conn that said the destination takes datagrams unsealed
	// (ICRCOffloader): the datagrams' ICRC fields hold nothing yet. The Conn carries
	// them through a ring as they are, and computes their ICRCs itself before it sends
	// them any other way (a pair torn down meanwhile), as a NIC completes a checksum
	// the stack left to it (CHECKSUM_PARTIAL). Each ICRC is the last 4 bytes of its
	// datagram, computed as RoCEv2 defines it for the UDP backend's IP header: the
	// Conn's SourceAddr to Addr, DF set, Identification GSOSegmentID(0, i) for the
	// run's datagram i; those 4 bytes never lie in memory the sender does not own.
	SameHost bool
	// Iov, on write only, gathers the data from several slices instead of
	// Buf: when it is non-nil the message is their concatenation, N bytes in
	// all, and Buf is not used. At most MaxIov slices. The kernel copies
	// from them during WriteBatch, so a sender can put headers in a buffer
	// of its own and point at payload where it lies, without copying it
	// first.
	Iov [][]byte
	// Loans, on write only, with Iov, say where some of the datagrams' payloads lie in
	// memory the sender can pin again later: entry i is the message's datagram i (a
	// run's segment i), nil From when that datagram has none. A Conn whose reader is in
	// this process (the same-host shortcut between two devices of one program, or a
	// device to itself) may write such a datagram's headers and a reference to its
	// payload instead of the payload, and its reader pins the memory and lends it
	// (Lent) or copies it, so that the payload is copied once, by the receiver, from the
	// sender's memory into the target's. Every other Conn ignores Loans.
	Loans []Loan
	// Lent, on read only, from a Conn that lends (ViewReader): when non-nil it is the
	// datagram's payload, pinned where it lies in the sender's memory (Loans), and
	// Buf[:N] holds the rest of the datagram, a private copy: its headers (HeaderLen
	// bytes), then its pad and ICRC. SameHost is set. Lent stays valid, and the sender's
	// memory pinned, until the reader's ReleaseViews or next read.
	Lent []byte
	// HeaderLen, on read with Lent: where in Buf the payload goes (see Lent).
	HeaderLen int
	// ECN is the Explicit Congestion Notification codepoint of the IP
	// header (RFC 3168 §5). Write: the codepoint the datagrams leave with
	// (ECNNotECT, the zero value, is what every sender got before this
	// field existed). Read: the codepoint they arrived with, CE when a
	// switch marked them on the way. A Conn honours and reports it only
	// when its Caps say ECN; otherwise it sends Not-ECT and leaves the field
	// as it found it on read. A GRO run carries one codepoint: the kernel
	// does not coalesce datagrams whose TOS or traffic class differ.
	ECN ECN
	// TrafficClass is the rest of the IP header's DS field (the IPv4 TOS byte, the IPv6
	// traffic class): the DSCP in its upper six bits; its two low bits are ECN's, and
	// ignored here. Write: the datagrams leave with it (a RoCEv2 path's traffic class,
	// which rdma_cm's TOS sets) where the backend builds the IP header or can ask the
	// kernel for it; one GSO run carries one. Read: the DSCP they arrived with, where the
	// Conn reports ECN (Caps.ECN), else as found.
	TrafficClass uint8
}

// DSField is the IP header's DS field (IPv4 TOS, IPv6 traffic class) of a datagram
// whose traffic class is tc and ECN codepoint ecn: tc's DSCP, ecn's two bits.
func DSField(tc uint8, ecn ECN) uint8 { return tc&^ECNMask | uint8(ecn&ECNMask) }

// ECN is the two-bit ECN field: the low bits of the IPv4 TOS byte or of the
// IPv6 traffic class (RFC 3168 §5). A RoCEv2 sender marks its packets ECT(0)
// so that switches mark congestion (CE) instead of dropping, and the receiver
// answers CE with a CNP (IBTA Annex A17.9). A UDP socket sets it per datagram
// with an IP_TOS or IPV6_TCLASS control message and reads it with
// IP_RECVTOS or IPV6_RECVTCLASS.
type ECN uint8

// ECN codepoints (RFC 3168 §5).
const (
	ECNNotECT ECN = 0b00 // not ECN-capable transport
	ECNECT1   ECN = 0b01 // ECN-capable transport, ECT(1)
	ECNECT0   ECN = 0b10 // ECN-capable transport, ECT(0): what RoCEv2 senders use
	ECNCE     ECN = 0b11 // congestion experienced
)

// ECNMask selects the ECN bits of a TOS or traffic class byte.
const ECNMask = 0b11

func (e ECN) String() string {
	switch e & ECNMask {
	case ECNNotECT:
		return "Not-ECT"
	case ECNECT1:
		return "ECT(1)"
	case ECNECT0:
		return "ECT(0)"
	}
	return "CE"
}

// ECT reports whether e is an ECN-capable codepoint (ECT(0), ECT(1) or CE):
// one a switch may mark CE instead of dropping.
func (e ECN) ECT() bool { return e&ECNMask != ECNNotECT }

// Lender is memory a sender can pin again after WriteBatch returned (a registered
// memory region): Pin pins it, or reports false when it is no longer registered; Slice
// returns its n bytes at off while pinned (false when they do not fit); Unpin undoes one
// successful Pin. All three must be cheap and safe from any goroutine, and Pin must
// never wait for a reader. A reader pins a Lender once for all the datagrams of one
// read whose payloads lie in it.
type Lender interface {
	Pin() bool
	Slice(off, n int) ([]byte, bool)
	Unpin()
}

// Loan is where one datagram's payload lies (Message.Loans): Iov[Iov] is the payload,
// the Iov slice right before it the datagram's headers and the one right after it the
// pad and ICRC, and the same bytes are From's off onwards.
type Loan struct {
	From Lender
	Off  int
	Iov  int
}

// MaxIov is the most slices one Message may gather (Linux's UIO_MAXIOV).
const MaxIov = 1024

// data returns m's bytes in one slice: Buf[:N], or Iov gathered into a new one.
func (m *Message) data() []byte {
	if m.View != nil {
		return m.View[:m.N]
	}
	if m.Iov == nil {
		return m.Buf[:m.N]
	}
	b := make([]byte, 0, m.N)
	for _, v := range m.Iov {
		b = append(b, v...)
	}
	return b
}

// CopyData copies bytes [off, off+len(dst)) of m's data (Buf, or the Iov slices one
// after another) into dst: a backend that copies datagrams into memory of its own (a
// frame, a ring) takes a run's segment at a time this way, gathering without an
// intermediate slice.
func (m *Message) CopyData(dst []byte, off int) {
	if m.Iov == nil {
		copy(dst, m.Buf[off:])
		return
	}
	for _, v := range m.Iov {
		if len(dst) == 0 {
			return
		}
		if off >= len(v) {
			off -= len(v)
			continue
		}
		k := copy(dst, v[off:])
		dst, off = dst[k:], 0
	}
}

// writeData copies b over bytes [off, off+len(b)) of m's data (Buf, or the Iov slices
// one after another): CopyData's inverse, for a Conn that completes a datagram's ICRC
// (sealICRC).
func (m *Message) writeData(b []byte, off int) {
	if m.Iov == nil {
		copy(m.Buf[off:], b)
		return
	}
	for _, v := range m.Iov {
		if len(b) == 0 {
			return
		}
		if off >= len(v) {
			off -= len(v)
			continue
		}
		k := copy(v[off:], b)
		b, off = b[k:], 0
	}
}

// Segments calls f for every datagram in m: Buf[:N] itself when SegSize is 0
// (or N <= SegSize), otherwise each SegSize-long piece of it. It stops early
// if f returns false. A message that gathers (Iov) is copied into one new
// slice first.
func (m *Message) Segments(f func(i int, seg []byte) bool) {
	b := m.data()
	if m.SegSize <= 0 || m.N <= m.SegSize {
		f(0, b)
		return
	}
	for i := 0; len(b) > 0; i++ {
		s := min(m.SegSize, len(b))
		if !f(i, b[:s]) {
			return
		}
		b = b[s:]
	}
}

// NumSegments is the number of datagrams m carries.
func (m *Message) NumSegments() int {
	if m.SegSize <= 0 || m.N <= m.SegSize {
		return 1
	}
	return (m.N + m.SegSize - 1) / m.SegSize
}

// Caps describes what a Conn can do and what the kernel accepted.
type Caps struct {
	// BatchSize is the number of messages per ReadBatch/WriteBatch call
	// worth passing (one syscall's worth).
	BatchSize int
	// GSO: UDP segmentation offload on send was accepted (and has not been
	// turned off since because the kernel refused a GSO send).
	GSO bool
	// GRO: UDP generic receive offload is on. ReadBatch may then return
	// several datagrams coalesced in one Message (SegSize > 0); give it
	// buffers of at least GROBufSize bytes. The UDP backend turns GRO off
	// (and this false) the first time ReadBatch gets a smaller buffer.
	GRO bool
	// GROBufSize is the read buffer size that holds any coalesced run
	// (MaxGROSize for the UDP backend); 0 without GRO.
	GROBufSize int
	// MaxSegments is the largest number of datagrams one GSO send carries,
	// and MaxGSOBytes the most bytes (UDP payload, all segments together).
	// A sender that numbers a run's segments (GSOSegmentID) must keep each
	// run within both, so that the run leaves as one GSO send; WriteBatch
	// sends a longer run as several, each numbered from 0. Without GSO they
	// are 1 and 0: every datagram is a send of its own.
	MaxSegments int
	MaxGSOBytes int
	// RecvBuf and SendBuf are the socket buffer sizes actually in force,
	// as getsockopt reports them (Linux reports twice the requested size).
	RecvBuf, SendBuf int
	// RecvBufWanted and SendBufWanted are what RecvBuf and SendBuf would be
	// had the kernel granted the sizes asked for (UDPOptions or the defaults),
	// in the same terms (on Linux twice the size asked). See BufferWarning.
	// 0 when the Conn has no such notion.
	RecvBufWanted, SendBufWanted int
	// IPv4IDZero: IPv4 datagrams leave with DF set and Identification 0
	// (what the ICRC is computed for). GSO segments after the first are
	// numbered upwards; see GSOSegmentID.
	IPv4IDZero bool
	// ECN: the Conn sends every datagram with its Message.ECN codepoint and
	// reports, in Message.ECN, the codepoint each received datagram carried.
	// Without it datagrams leave Not-ECT and Message.ECN means nothing on
	// read.
	ECN bool
	// SameHost: datagrams to goverbs devices of this user on this host go through
	// shared memory (ListenSameHost) rather than the kernel's UDP path; see
	// SameHostStatsOf for which peers do now.
	SameHost bool
	// SplitAcks: a busy-poll device sends the ACK that rides with its QP's requests in
	// a WriteBatch of its own, right after theirs, instead of in the same one. The
	// Conn's WriteBatch puts its datagrams on the wire before it returns and costs
	// less than the ACK's datagram would delay them (AF_XDP: the requests reach the
	// peer before the ACK is built, for one more kick).
	SplitAcks bool
}

// MaxGROSize is the receive buffer size that holds any GRO-coalesced run.
const MaxGROSize = 65536

// Conn is a batched datagram socket.
type Conn interface {
	// ReadBatch blocks until at least one datagram has arrived and fills
	// msgs[:n]. After Close it returns an error satisfying
	// errors.Is(err, net.ErrClosed). One goroutine at a time.
	ReadBatch(msgs []Message) (n int, err error)
	// WriteBatch sends msgs[:n]. A datagram the kernel refuses (for one
	// destination: unreachable, too big, refused) is skipped and the rest
	// are still sent; the first such failure is returned as a *SendError
	// with n == len(msgs). n < len(msgs) only when the Conn itself failed
	// (for example it was closed). Safe for concurrent use.
	WriteBatch(msgs []Message) (n int, err error)
	// LocalAddr is the bound address (with the port chosen if it was 0):
	// where datagrams are received.
	LocalAddr() netip.AddrPort
	// SourceAddr is where sent datagrams come from: LocalAddr's IP address,
	// and its port or another. RoCEv2 lets the sender choose the UDP source
	// port (IBTA Annex A17: it carries flow entropy; replies go to port
	// 4791), and the ICRC covers it, so a sender computes the ICRC with this.
	SourceAddr() netip.AddrPort
	// Caps reports the capabilities in force now.
	Caps() Caps
	// Close closes the Conn and unblocks ReadBatch.
	Close() error
}

// UDPOptions tunes ListenUDP.
type UDPOptions struct {
	// RecvBuf and SendBuf are the wanted socket buffer sizes; 0 means
	// 8 MiB for receive and 4 MiB for send. ListenUDP tries
	// SO_RCVBUFFORCE/SO_SNDBUFFORCE (needs CAP_NET_ADMIN) and falls back to
	// SO_RCVBUF/SO_SNDBUF (capped by net.core.rmem_max/wmem_max). It never
	// fails because of buffer sizes; Caps reports what is in force.
	RecvBuf, SendBuf int
	// DisableGSO and DisableGRO turn the offloads off even if available.
	DisableGSO, DisableGRO bool
	// BusyPoll opens the socket outside Go's netpoller (on Linux): ReadBatch
	// spins on non-blocking recvmmsg instead of sleeping, PollBatch and
	// WaitReadable serve pollers. Lowest latency, burns a core. Close still
	// unblocks a reader.
	BusyPoll bool
	// ReusePort sets SO_REUSEPORT before binding.
	ReusePort bool
	// ECN asks the kernel for each received datagram's ECN codepoint
	// (IP_RECVTOS, IPV6_RECVTCLASS) and sends with Message.ECN's (Caps.ECN).
	// Off, the kernel attaches no TOS control message to datagrams, which
	// costs it a cmsg per datagram (put_cmsg in every recvmmsg slot): ask for
	// it only when something reads Message.ECN, as a software device's
	// congestion control does (it answers CE with CNPs). Multicast groups
	// joined on the Conn follow it.
	ECN bool
}

// bufSizes returns the socket buffer sizes to ask for: the options', or the defaults.
func (o UDPOptions) bufSizes() (recv, send int) {
	recv, send = o.RecvBuf, o.SendBuf
	if recv <= 0 {
		recv = defaultRecvBuf
	}
	if send <= 0 {
		send = defaultSendBuf
	}
	return recv, send
}

// listenNetwork picks the socket family for addr: "udp4" for an IPv4 or
// IPv4-mapped address (returned unmapped), "udp6" for IPv6.
func listenNetwork(addr netip.AddrPort) (string, netip.AddrPort, error) {
	ip := addr.Addr()
	switch {
	case ip.Is4() || ip.Is4In6():
		return "udp4", netip.AddrPortFrom(ip.Unmap(), addr.Port()), nil
	case ip.IsValid():
		return "udp6", addr, nil
	}
	return "", addr, fmt.Errorf("netio: listen: invalid address %v", addr)
}

// BufferWarning explains, in one line for a user, when the kernel gave c's
// sockets smaller buffers than were asked for, and returns "" when it did
// not. A small receive buffer drops datagrams in bursts, which RC turns into
// retransmissions (go-back-N) and the user sees as lost bandwidth.
func BufferWarning(c Caps) string {
	var short []string
	if c.RecvBufWanted > 0 && c.RecvBuf < c.RecvBufWanted {
		short = append(short, fmt.Sprintf("receive buffer %d KiB of %d KiB wanted (net.core.rmem_max)", c.RecvBuf>>10, c.RecvBufWanted>>10))
	}
	if c.SendBufWanted > 0 && c.SendBuf < c.SendBufWanted {
		short = append(short, fmt.Sprintf("send buffer %d KiB of %d KiB wanted (net.core.wmem_max)", c.SendBuf>>10, c.SendBufWanted>>10))
	}
	if len(short) == 0 {
		return ""
	}
	return "netio: the kernel gave smaller socket buffers than asked for: " + strings.Join(short, ", ") +
		"; bursts may be dropped and retransmitted. Run with CAP_NET_ADMIN (SO_RCVBUFFORCE) or raise the sysctl limits named."
}

const (
	defaultRecvBuf = 8 << 20
	defaultSendBuf = 4 << 20
)

// SendError reports a datagram that WriteBatch skipped because the kernel
// refused it. Other datagrams of the same batch were still sent.
type SendError struct {
	Index   int            // lowest index in msgs of a message that lost a datagram
	Addr    netip.AddrPort // its destination
	Err     error          // the kernel's error, e.g. syscall.EMSGSIZE
	Skipped int            // datagrams skipped in the whole batch
}

func (e *SendError) Error() string {
	return fmt.Sprintf("netio: send to %v (message %d): %v (%d datagrams skipped)", e.Addr, e.Index, e.Err, e.Skipped)
}

func (e *SendError) Unwrap() error { return e.Err }

// ErrAddressFamily is the error for a destination the socket's address family
// cannot reach (IPv6 from an IPv4 socket or the reverse).
var ErrAddressFamily = errors.New("netio: destination address family does not match the socket")

// ErrTooManyIov is the error for a Message that gathers from more than MaxIov slices.
var ErrTooManyIov = errors.New("netio: message gathers from more than MaxIov slices")

// GSOSegmentID is the IPv4 Identification the kernel gives segment i of one
// GSO send whose first segment carries first (0 from ListenUDP): it numbers
// segments upwards, wrapping at 16 bits. Measured on Linux 6.18 by capture
// (TestGSOSegmentIdentification). A Message longer than one GSO send holds
// (64 segments, at most 65487 bytes) goes out as several sends, each numbered
// from 0 again.
func GSOSegmentID(first uint16, i int) uint16 { return first + uint16(i) }

// MaxGSOSegments is the most datagrams any netio Conn sends in one GSO send
// (Caps.MaxSegments never exceeds it; Linux's UDP_MAX_SEGMENTS on older
// kernels). A goverbs sender's IPv4 datagrams therefore carry Identification
// GSOSegmentID(0, i) for some i below it, which is what a receiver checking
// the ICRC tries first.
const MaxGSOSegments = 64

// Poller is implemented by Conns that can be read without blocking, for busy polling
// (the UDP backend on Linux, and a Tee over one). A device in busy-poll mode reads the
// socket from the application's own CQ polls, as a DPDK poll-mode driver does, and keeps
// one goroutine parked in WaitReadable for traffic nobody polls for.
type Poller interface {
	// PollBatch reads what is queued now, without waiting: 0 when nothing is.
	PollBatch(msgs []Message) (int, error)
	// WaitReadable blocks until a datagram is queued, the timeout passes (a negative
	// timeout never does) or the Conn closes, without reading anything. It reports
	// whether a datagram is queued.
	WaitReadable(timeout time.Duration) (bool, error)
}

// Unwatcher is implemented by Conns whose socket a blocked ReadBatch waits for through
// the netpoller (the UDP backend in the default mode, and a Tee over one). Unwatch
// takes the socket out of the netpoller's watch until the next ReadBatch: while a
// program reads the Conn only by polling (PollBatch), as a spinning one does, each
// datagram then wakes no runtime thread that sleeps in epoll_pwait for nothing. Unwatch
// waits for a ReadBatch in progress, and does nothing on a closed Conn.
type Unwatcher interface {
	Unwatch()
}

// AsUnwatcher returns c as an Unwatcher if it has a watch to stop, looking through Tees.
func AsUnwatcher(c Conn) (Unwatcher, bool) { return asThroughTee[Unwatcher](c) }

// ViewReader is implemented by Conns that can lend what they receive where it lies
// instead of copying it into Message.Buf: the same-host shortcut's rings, whose records
// the engine then reads in place (Message.View), a copy fewer per datagram.
//
// LendViews turns lending on, before the first read. From then on a read may return
// messages with View or Lent set; what it lent stays valid, the ring room it holds
// stays taken and the memory a Lent payload lies in stays pinned, until ReleaseViews or the next ReadBatch or PollBatch, which release it first.
// ReleaseViews is the reader's: it must not run concurrently with a read. Close waits
// for lent views to be released before it unmaps them.
type ViewReader interface {
	LendViews()
	ReleaseViews()
}

// LoanTaker is implemented by Conns whose reads can take payloads a sender of this
// process lent (Message.Lent): the receiver then copies each payload once, from the
// sender's memory, and the sender copies nothing. That pays where one thread does both
// ends' work (goverbs serve's event loop, which asks for loans with
// PreferCopies(false)), and loses where the two ends run on two threads, whose copies
// then run side by side: rdmanet's stream with both ends in one process went from 37 to
// 10 Gb/s with loans (`bench/rstream.sh a1bfe2a ef1d348`, 2026-11-28). So a Conn takes
// copies until its reader asks for loans, and PreferCopies(true) asks for copies again
// (the daemon's helper thread, reading a device apart from the loop).
type LoanTaker interface {
	PreferCopies(bool)
}

// AsLoanTaker returns c as a LoanTaker if its reads take loans.
func AsLoanTaker(c Conn) (LoanTaker, bool) {
	l, ok := c.(LoanTaker)
	return l, ok
}

// AsViewReader returns c as a ViewReader if it lends. Not through a Tee, which records
// the datagrams it passes on from Buf.
func AsViewReader(c Conn) (ViewReader, bool) {
	v, ok := c.(ViewReader)
	return v, ok
}

// ICRCOffloader is implemented by Conns that can carry datagrams to some destinations
// without their ICRC (the same-host shortcut, to a peer device that reads its ring
// without checking it): a sender that asks may leave the ICRC out of a datagram to such
// a destination and mark the message SameHost, and the Conn completes the ICRC if the
// datagram goes another way after all. Not through a Tee, which records the datagrams
// it passes on as they are.
type ICRCOffloader interface {
	// OffloadsICRC reports which datagrams to dst may now be written unsealed.
	OffloadsICRC(dst netip.AddrPort) ICRCOffload
	// ICRCOffloadGen changes whenever OffloadsICRC's answer for some destination may
	// have changed: a sender that keeps an answer asks again then. (A kept yes that no
	// longer holds costs only the Conn's sealing, never a datagram.)
	ICRCOffloadGen() uint64
}

// ICRCOffload is which datagrams to a destination may be written unsealed
// (ICRCOffloader.OffloadsICRC).
type ICRCOffload uint8

const (
	// OffloadNone: every datagram to the destination carries its ICRC.
	OffloadNone ICRCOffload = iota
	// OffloadAll: any datagram to the destination may leave it out.
	OffloadAll
	// OffloadLowQPNs: only datagrams whose BTH destination QPN has top byte 0. The
	// destination's ring takes only those (its socket is steered:
	// SameHostOptions.Steered); the rest go by UDP, sealed by their sender.
	OffloadLowQPNs
)

func (o ICRCOffload) String() string {
	switch o {
	case OffloadNone:
		return "none"
	case OffloadAll:
		return "all"
	case OffloadLowQPNs:
		return "QPNs of top byte 0"
	}
	return "ICRCOffload(" + strconv.Itoa(int(o)) + ")"
}

// Unsealed reports whether a datagram whose BTH destination QPN has top byte qpnHi may
// be written unsealed.
func (o ICRCOffload) Unsealed(qpnHi byte) bool {
	return o == OffloadAll || o == OffloadLowQPNs && qpnHi == 0
}

// AsICRCOffloader returns c as an ICRCOffloader if it offloads. Not through a Tee.
func AsICRCOffloader(c Conn) (ICRCOffloader, bool) {
	o, ok := c.(ICRCOffloader)
	return o, ok
}

// RingReader is implemented by Conns that read from shared-memory rings as well as a
// socket (the same-host shortcut). FromRings reports whether the last read took anything
// from a ring, where reading again costs no system call: a reader may poll on for the
// next batch there rather than sleep (the engine's receive spins). The reader's, after
// its read.
type RingReader interface {
	FromRings() bool
}

// AsRingReader returns c as a RingReader if it has rings. Not through a Tee.
func AsRingReader(c Conn) (RingReader, bool) {
	r, ok := c.(RingReader)
	return r, ok
}

// Watchable is implemented by Conns whose receive socket an event loop of the
// caller's may wait for in an epoll set of its own (EPOLLIN, level-triggered) and then
// read with PollBatch, instead of a goroutine blocked in ReadBatch: the UDP backend,
// and a Tee over it. goverbs serve waits for its devices' sockets and its clients'
// doorbells in one epoll_wait that way (engine.Device.DriveRx). RecvFD is the receive
// socket's descriptor, which stays the Conn's: it is valid until Close.
type Watchable interface {
	RecvFD() int
}

// AsWatchable returns c as a Watchable if its receive socket can be waited for,
// looking through Tees.
func AsWatchable(c Conn) (Watchable, bool) { return asThroughTee[Watchable](c) }

// SocketFD returns the descriptor of c's UDP socket (looking through Tees), for an
// option on the socket itself (goverbs serve attaches its SO_REUSEPORT steering): a
// Watchable's receive socket, or the socket under the same-host rings, which is not
// Watchable (a wait for it alone would miss the rings). It stays c's.
func SocketFD(c Conn) (int, bool) {
	if w, ok := AsWatchable(c); ok {
		return w.RecvFD(), true
	}
	if s, ok := asThroughTee[interface{ SocketFD() int }](c); ok {
		return s.SocketFD(), true
	}
	return -1, false
}

// RingDriver is implemented by Conns that read same-host rings as well as a socket (the
// same-host shortcut in the default mode), for an event loop of the caller's that drives
// the receive path (engine.Device.DriveRx), as Watchable is for a socket alone. The
// loop waits for two descriptors, the socket and the rings' eventfd, and reads both with
// PollBatch; the rings' producers write the eventfd only when the reader said it waits
// (RingsSleep), so between waits the loop polls the rings, which costs no system call.
type RingDriver interface {
	// DriveFDs hands the Conn's receive wait over: neither descriptor stays in the
	// Conn's own wait (the netpoller's), and a blocking ReadBatch no longer waits in
	// the netpoller. Both stay the Conn's, valid until Close.
	DriveFDs() (sock, rings int)
	// RingsSleep tells every ring's producer that the reader is about to wait, then
	// looks once more: false (the word taken back) when a ring holds a datagram.
	RingsSleep() bool
	// RingsAwake takes the word back after a wait, and drains the eventfd when the
	// caller saw it readable (drain): producers write no eventfd while the reader polls.
	RingsAwake(drain bool)
	// SocketReadable says the socket is readable: the next poll reads it, whatever the
	// rings hold (a poll otherwise reads it only now and then while rings carry traffic).
	SocketReadable()
}

// AsRingDriver returns c as a RingDriver if it has rings an event loop can drive. Not
// through a Tee.
func AsRingDriver(c Conn) (RingDriver, bool) {
	r, ok := c.(RingDriver)
	return r, ok
}

// Counting is implemented by Conns with counters of their own (a backend's mode, its
// drops, its system calls): a device lists them after its own (--stats, goverbs stat),
// so that a run says which path its datagrams took. Names are lower_snake_case with the
// backend's prefix.
type Counting interface {
	EachCounter(f func(name string, value uint64))
}

// AsCounting returns c as a Counting if it has counters of its own, looking through Tees.
func AsCounting(c Conn) (Counting, bool) { return asThroughTee[Counting](c) }

// Multicaster is implemented by Conns that can receive IP multicast (the UDP backend on
// Linux, and a Tee over one). RoCEv2 carries a multicast GID's traffic as IP multicast
// to the group's address at the RoCEv2 port (IBTA Annex A17.4.5.2): sending needs
// nothing more than WriteBatch to that address, receiving needs the group joined.
type Multicaster interface {
	// JoinGroup joins the IP multicast group on the interface of the Conn's address
	// and returns a Conn that reads what is sent to the group at the Conn's port: its
	// LocalAddr is group:port, its WriteBatch and SourceAddr are the joining Conn's.
	// Closing it leaves the group. The joining Conn keeps receiving its own traffic;
	// closing it does not close the group's Conn.
	JoinGroup(group netip.Addr) (Conn, error)
}

// AsMulticaster returns c as a Multicaster if it can join groups, looking through Tees.
func AsMulticaster(c Conn) (Multicaster, bool) { return asThroughTee[Multicaster](c) }

// Interrupter is implemented by Conns whose blocked ReadBatch another goroutine can end
// without closing the Conn: the UDP backend in the default mode (its socket is in Go's
// netpoller) and a Tee over one. A device lets the goroutine that waits for a completion
// read the socket itself (leader/follower), and a completion that arrives by another
// path (a retry timer's error, a flush, a cancelled wait) must reach that goroutine.
type Interrupter interface {
	// Interrupt makes the ReadBatch blocked now, or else the next one, return at once
	// with an error satisfying errors.Is(err, ErrInterrupted), having read nothing.
	// Safe for concurrent use.
	Interrupt()
}

// ErrInterrupted is the error of a ReadBatch that Interrupter.Interrupt ended.
var ErrInterrupted = errors.New("netio: read interrupted")

// AsInterrupter returns c as an Interrupter if its reads can be interrupted, looking
// through Tees.
func AsInterrupter(c Conn) (Interrupter, bool) {
	if t, ok := c.(*teeConn); ok {
		return AsInterrupter(t.Conn)
	}
	if u, ok := c.(interruptible); ok && u.interruptible() {
		return u, true
	}
	if u, ok := c.(InterruptibleConn); ok && u.CanInterrupt() {
		return u, true
	}
	return nil, false
}

// InterruptibleConn is implemented by Conns of other packages (backends outside netio)
// whose values may or may not support Interrupt: AsInterrupter finds one an Interrupter
// only when CanInterrupt reports true (for example, not in a busy-poll mode that reads
// outside the netpoller).
type InterruptibleConn interface {
	Interrupter
	CanInterrupt() bool
}

// interruptible is a Conn type whose values may or may not support Interrupt (the UDP
// backend does only outside busy-poll mode).
type interruptible interface {
	Interrupter
	interruptible() bool
}

// Recorder receives a copy of every datagram crossing a Tee'd Conn.
// pcap.Writer implements it. ipID is the IPv4 Identification the datagram
// carries (0 on IPv6).
type Recorder interface {
	Record(t time.Time, src, dst netip.AddrPort, ipID uint16, udpPayload []byte) error
}

// DSRecorder is a Recorder that takes each datagram's DS field too (DSField: its traffic
// class's DSCP and its ECN codepoint, the IPv4 TOS byte or IPv6 traffic class), which a
// Tee then gives it through RecordDS instead of Record: for a write what the datagram
// left with, for a read what the Conn reported (0 where it reports no ECN, Caps.ECN).
// pcap.Writer implements it.
type DSRecorder interface {
	Recorder
	RecordDS(t time.Time, src, dst netip.AddrPort, ipID uint16, ds uint8, udpPayload []byte) error
}

// maxGSOBytes is the most UDP payload one GSO send of the UDP backend
// carries (Caps.MaxGSOBytes): it fits the IPv4 and IPv6 length limits with
// room for headers.
const maxGSOBytes = 65535 - 48

// gsoRunSegments is how many segments of size segSize one GSO send carries
// at most, given a Conn's limits (Caps.MaxSegments, Caps.MaxGSOBytes); a
// longer run is sent as several GSO sends, each numbered from 0.
func gsoRunSegments(segSize, maxSegments, maxBytes int) int {
	return max(1, min(maxSegments, maxBytes/segSize))
}

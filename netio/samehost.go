package netio

import (
	"errors"
	"fmt"
	"net/netip"
)

// SameHostOptions tunes ListenSameHost.
type SameHostOptions struct {
	// Dir is the rendezvous directory; "" means $XDG_RUNTIME_DIR/goverbs, or
	// $TMPDIR/goverbs-UID without it.
	Dir string
	// RingSize is the bytes of each direction's ring (a power of two); 0 means
	// DefaultRingSize.
	RingSize int
	// Steered says the Conn's socket heads a SO_REUSEPORT group that steers datagrams
	// by the top byte of the BTH destination QPN (goverbs serve's device, whose Go
	// clients run engines of their own on its address): only datagrams whose
	// destination QPN's top byte is 0 are this Conn's engine's, so only those may reach
	// it through a ring; the others must cross the kernel, which steers them. The Conn
	// applies it to its ring to itself and tells every peer at the rendezvous, and the
	// peer's sender applies it too (a one-byte test per datagram).
	Steered bool
}

// DefaultRingSize is a same-host ring's size per direction: room for the windows of many
// QPs' streams at once (a full ring drops, as a full socket buffer does, and RC then
// retransmits), of the order of the UDP backend's receive buffer.
const DefaultRingSize = 4 << 20

// SameHostStats says what a same-host Conn's shortcut carries.
type SameHostStats struct {
	Peers     int    // peer devices reached through shared memory now
	TxPackets uint64 // datagrams written into rings
	RxPackets uint64 // datagrams read from rings
	Corrupt   uint64 // times a peer's ring was found inconsistent (its datagrams dropped)
	RingFull  uint64 // datagrams dropped because a peer's ring stayed full
	Fallbacks uint64 // peers that answered at the rendezvous and refused, or failed the handshake
	// Datagrams whose payload crossed a ring as a reference to the sender's memory
	// (between two devices of this process: Message.Loans), written and read, and those
	// dropped because that memory was deregistered before the reader copied it.
	LentTx, LentRx, Unlent uint64
}

// String is the one-line summary tools print.
func (s SameHostStats) String() string {
	return fmt.Sprintf("same-host peers %d, ring tx %d rx %d (payloads lent tx %d rx %d, unlent %d), corrupt %d, ring-full drops %d, refused %d",
		s.Peers, s.TxPackets, s.RxPackets, s.LentTx, s.LentRx, s.Unlent, s.Corrupt, s.RingFull, s.Fallbacks)
}

// ErrSameHostUnsupported is ListenSameHost's error for a Conn it cannot wrap (not the
// UDP backend, or not Linux).
var ErrSameHostUnsupported = errors.New("netio: same-host shortcut unavailable for this Conn")

// sameHoster is a Conn with a same-host shortcut.
type sameHoster interface {
	SameHostStats() SameHostStats
}

// SameHostStatsOf returns the shortcut's counters of c (looking through Tees), and false
// when c has no shortcut.
func SameHostStatsOf(c Conn) (SameHostStats, bool) {
	if t, ok := c.(*teeConn); ok {
		return SameHostStatsOf(t.Conn)
	}
	if s, ok := c.(sameHoster); ok {
		return s.SameHostStats(), true
	}
	return SameHostStats{}, false
}

// Resolver is implemented by Conns that can prepare the path to a destination before
// traffic flows, as a kernel RNIC resolves a neighbour when a QP is given its address: a
// same-host Conn makes its rendezvous with a local peer device then, so that a
// connection's first packet already takes the ring and none is reordered by a switch
// from UDP mid-stream. Resolve blocks for at most a rendezvous's timeout; a destination
// that is not a same-host device costs one failed connect(2).
type Resolver interface {
	Resolve(dest netip.AddrPort)
}

// AsResolver returns c as a Resolver if it has paths to prepare, looking through Tees.
func AsResolver(c Conn) (Resolver, bool) { return asThroughTee[Resolver](c) }

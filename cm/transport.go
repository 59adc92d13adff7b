package cm

import (
	"net/netip"
)

// madPort is what the CM needs of a device: 256-byte MADs to and from QP1
// of other devices, addressed by IP (a RoCEv2 GID is an IP address). The
// software device provides one; a test can wire agents to each other.
type madPort interface {
	// SendMAD sends one MAD to QP1 at to. It must not block for long and
	// must not call the handler in the caller's goroutine.
	SendMAD(to netip.Addr, mad []byte) error
	// SetMADHandler installs the function called for every MAD received
	// on QP1, with the sender's address; mad is valid during the call.
	SetMADHandler(h func(from netip.Addr, mad []byte))
	Close() error
}

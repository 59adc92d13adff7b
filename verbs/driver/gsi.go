package driver

import (
	"net/netip"
	"os"
)

// GSI is an optional capability of a Device: management datagrams (MADs) to and
// from QP1, the General Services Interface (IBTA 13.5.1), through which the
// connection manager (package cm) speaks. A provider whose devices can reach QP1
// implements it on its Device; one whose QP1 belongs to a kernel (a hardware RNIC,
// whose kernel runs its own rdma_cm) does not, and verbs.Device.OpenGSI reports
// verbs.ErrNoGSI.
type GSI interface {
	// SendMAD sends one 256-byte MAD from QP1 to QP1 of the device at to (on
	// RoCEv2 a GID is an IP address). It must not block for long.
	SendMAD(to netip.Addr, mad []byte) error
	// SetMADHandler installs the function that receives every valid MAD sent to
	// this device's QP1, with the sender's address; mad is valid during the call
	// only, and h must not block. nil removes it.
	SetMADHandler(h func(from netip.Addr, mad []byte))
}

// Commander is an optional capability of a Device whose control operations are
// commands to a daemon (verbs/attach's, `goverbs serve`): services above verbs that the
// daemon runs for the device (package cm's rdma_cm, whose QP1 is the daemon's) take
// their commands through it. op is the attach protocol's; req is the request's
// payload, reply the reply's, with the descriptors it carried; a refusal is an error
// that wraps the errno.
type Commander interface {
	Command(op uint16, req []byte) (reply []byte, files []*os.File, err error)
}

package cm

import (
	"errors"
	"fmt"
	"net/netip"

	"github.com/goverbs/goverbs/cm/mad"
	"github.com/goverbs/goverbs/verbs"
)

// madPort is what the CM needs of a device: 256-byte MADs to and from QP1
// of other devices, addressed by IP (a RoCEv2 GID is an IP address). A
// device's verbs.GSI is one; a test can wire agents to each other.
type madPort interface {
	// SendMAD sends one MAD to QP1 at to. It must not block for long and
	// must not call the handler in the caller's goroutine.
	SendMAD(to netip.Addr, mad []byte) error
	// SetMADHandler installs the function called for every MAD received
	// on QP1, with the sender's address; mad is valid during the call.
	SetMADHandler(h func(from netip.Addr, mad []byte))
	Close() error
}

// gsiPort is a device's QP1 as a madPort.
type gsiPort struct{ g *verbs.GSI }

func (p gsiPort) SendMAD(to netip.Addr, mad []byte) error           { return p.g.Send(to, mad) }
func (p gsiPort) SetMADHandler(h func(from netip.Addr, mad []byte)) { p.g.SetHandler(h) }
func (p gsiPort) Close() error                                      { return p.g.Close() }

// NewAgent starts the connection manager of dev on its QP1, for the CM
// class only (0x07, version 2), so that other management classes' users
// (goverbs ibping's responder) can share QP1. A device has at most one
// agent at a time; the device must stay open while the agent is. cfg may
// be nil.
//
// On a kernel RDMA device (the ibverbs provider's, in builds with the ibverbs
// tag) the agent is a client of the kernel's rdma_cm through librdmacm instead:
// see kernel.go and docs/guide/cm-kernel.md. On an attached device (verbs/attach, a
// `goverbs serve` daemon's) it is a client of the daemon's rdma_cm the same way
// (kernel_attach.go).
func NewAgent(dev *verbs.Device, cfg *Config) (*Agent, error) {
	if a, ok, err := newKernel(dev, cfg); ok {
		return a, err
	}
	if a, ok, err := newAttached(dev, cfg); ok {
		return a, err
	}
	g, err := dev.OpenGSIClass(mad.ClassCM, mad.ClassVersionCM)
	if errors.Is(err, verbs.ErrNoGSI) {
		return nil, fmt.Errorf("%w: %v", ErrNoGSI, dev.Name())
	}
	if err != nil {
		return nil, err
	}
	a, err := newAgent(dev, gsiPort{g}, cfg)
	if err != nil {
		g.Close()
		return nil, err
	}
	return a, nil
}

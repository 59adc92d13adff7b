package verbs

import (
	"errors"
	"net/netip"
	"sync"
)

// ErrNoGSI: the device's provider gives no access to QP1 (a hardware RNIC's QP1
// belongs to the kernel, whose own rdma_cm serves it).
var ErrNoGSI = errors.New("verbs: device has no GSI (QP1) access")

// ErrGSIBusy: another user holds the device's GSI.
var ErrGSIBusy = errors.New("verbs: GSI already open on this device")

// gsiImpl is an optional capability of a provider's device: management datagrams
// (MADs) to and from QP1, the General Services Interface (IBTA 13.5.1). The software
// device has it; a provider that lacks it simply does not implement it.
type gsiImpl interface {
	sendMAD(to netip.Addr, mad []byte) error
	setMADHandler(h func(from netip.Addr, mad []byte))
}

// GSI is exclusive access to a device's QP1: 256-byte MADs to and from QP1 of other
// devices, addressed by IP address (on RoCEv2 the GID is the address). Package cm speaks
// the connection manager protocol through it; other management classes could too.
type GSI struct {
	dev  *Device
	impl gsiImpl
	once sync.Once
}

var gsiOpen sync.Map // *Device → struct{}: one GSI per device at a time

// OpenGSI returns the device's GSI, ErrNoGSI if its provider has none, ErrGSIBusy if it
// is open already.
func (d *Device) OpenGSI() (*GSI, error) {
	impl, ok := d.impl.(gsiImpl)
	if !ok {
		return nil, ErrNoGSI
	}
	if _, busy := gsiOpen.LoadOrStore(d, struct{}{}); busy {
		return nil, ErrGSIBusy
	}
	return &GSI{dev: d, impl: impl}, nil
}

// Send sends one MAD (256 bytes) to QP1 of the device at to.
func (g *GSI) Send(to netip.Addr, mad []byte) error { return g.impl.sendMAD(to, mad) }

// SetHandler installs the function that receives every MAD sent to this device's QP1,
// with the sender's address; mad is valid during the call only. It runs on the
// device's receive path and must not block.
func (g *GSI) SetHandler(h func(from netip.Addr, mad []byte)) { g.impl.setMADHandler(h) }

// Close removes the handler and releases the GSI.
func (g *GSI) Close() error {
	g.once.Do(func() {
		g.impl.setMADHandler(nil)
		gsiOpen.Delete(g.dev)
	})
	return nil
}

func (s *softDevice) sendMAD(to netip.Addr, mad []byte) error { return s.d.SendGSI(to, mad) }

func (s *softDevice) setMADHandler(h func(from netip.Addr, mad []byte)) {
	if h == nil {
		s.d.SetGSIHandler(nil)
		return
	}
	s.d.SetGSIHandler(h)
}

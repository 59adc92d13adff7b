package verbs

import (
	"errors"
	"net/netip"
	"sync"

	"github.com/goverbs/goverbs/verbs/driver"
)

// ErrNoGSI: the device's provider gives no access to QP1 (a hardware RNIC's QP1
// belongs to the kernel, whose own rdma_cm serves it).
var ErrNoGSI = errors.New("verbs: device has no GSI (QP1) access")

// ErrGSIBusy: another user holds the device's GSI.
var ErrGSIBusy = errors.New("verbs: GSI already open on this device")

// GSI is exclusive access to a device's QP1: 256-byte MADs to and from QP1 of other
// devices, addressed by IP address (on RoCEv2 the GID is the address). Package cm speaks
// the connection manager protocol through it; other management classes could too.
type GSI struct {
	dev  *Device
	impl driver.GSI
	once sync.Once
}

var gsiOpen sync.Map // *Device → struct{}: one GSI per device at a time

// OpenGSI returns the device's GSI, ErrNoGSI if its provider has none, ErrGSIBusy if it
// is open already.
func (d *Device) OpenGSI() (*GSI, error) {
	impl, ok := d.impl.(driver.GSI)
	if !ok {
		return nil, ErrNoGSI
	}
	if _, busy := gsiOpen.LoadOrStore(d, struct{}{}); busy {
		return nil, ErrGSIBusy
	}
	return &GSI{dev: d, impl: impl}, nil
}

// Send sends one MAD (256 bytes) to QP1 of the device at to.
func (g *GSI) Send(to netip.Addr, mad []byte) error { return g.impl.SendMAD(to, mad) }

// SetHandler installs the function that receives every MAD sent to this device's QP1,
// with the sender's address; mad is valid during the call only. It runs on the
// device's receive path and must not block.
func (g *GSI) SetHandler(h func(from netip.Addr, mad []byte)) { g.impl.SetMADHandler(h) }

// Close removes the handler and releases the GSI.
func (g *GSI) Close() error {
	g.once.Do(func() {
		g.impl.SetMADHandler(nil)
		gsiOpen.Delete(g.dev)
	})
	return nil
}

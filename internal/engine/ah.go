// The address handle: where a UD work request's packets go. The engine's other
// data-path types (work requests, completions, attributes, enums) are verbs/driver's,
// used as they are, so the caller's requests and completions need no conversion.

package engine

import (
	"net/netip"
	"sync/atomic"

	"github.com/goverbs/goverbs/verbs/driver"
)

// AH is an address vector: where a QP's packets go (IBTA 10.2.1, RoCEv2 Annex A17.4).
type AH struct {
	DGID         [16]byte
	Addr         netip.Addr // DGID as an IP address (IPv4 unmapped)
	HopLimit     uint8
	TrafficClass uint8
	FlowLabel    uint32
	SL           uint8
	SGIDIndex    uint8
	Port         uint8

	closed atomic.Bool // a UD request naming a closed handle is refused
}

// CreateAH makes an address handle (driver.PD). It holds no resource of the device.
func (pd *PD) CreateAH(attr *driver.AHAttr) (driver.AH, error) {
	pd.dev.resolve(netip.AddrPortFrom(attr.DGID.Addr().Unmap(), pd.dev.peerPort))
	return &AH{
		DGID: attr.DGID, Addr: attr.DGID.Addr(), HopLimit: attr.HopLimit, TrafficClass: attr.TrafficClass,
		FlowLabel: attr.FlowLabel, SL: attr.SL, SGIDIndex: attr.SGIDIndex, Port: attr.Port,
	}, nil
}

// ErrAHClosed: a UD request named an address handle that was closed.
var ErrAHClosed = driver.NewError(driver.ErrClosed, "address handle is closed")

// Close releases the address handle: UD requests posted after it may not name it
// (ibv_destroy_ah), those posted before still go where it said.
func (ah *AH) Close() error {
	ah.closed.Store(true)
	return nil
}

// DriverAH returns the handle as the driver reference a UD request names.
func (ah *AH) DriverAH() driver.AH {
	if ah == nil {
		return nil
	}
	return ah
}

// addr is the destination's IP address: Addr, or the DGID's when Addr is unset.
func (ah *AH) addr() netip.Addr {
	if ah.Addr.IsValid() {
		return ah.Addr
	}
	return GIDToAddr(ah.DGID)
}

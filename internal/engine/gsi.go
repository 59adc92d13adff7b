// The GSI: QP1, the General Services Interface (IBTA 13.5.1), through which the
// connection manager's MADs travel. QP1 is a UD QP with a well-known Q_Key; the engine
// does not run it as a QP with queues, it hands each well-formed MAD to one handler and
// sends MADs for it, so the CM can live outside the engine.

package engine

import (
	"errors"
	"net/netip"

	"github.com/goverbs/goverbs/verbs/driver"
	"github.com/goverbs/goverbs/wire"
)

// GSI constants (IBTA 13.5.1 and 13.4.2).
const (
	GSIQPN  = 1
	GSIQKey = 0x80010000
	MADLen  = 256 // the GSI classes' MADs are exactly 256 bytes
)

// ErrMADLength: SendMAD was given a MAD that is not MADLen bytes.
var ErrMADLength = errors.New("engine: a MAD is 256 bytes")

// The device's QP1 is driver.GSI.
var _ driver.GSI = (*Device)(nil)

// SetMADHandler installs h as QP1's receiver (driver.GSI): it gets the sender's IP
// address (its GID) and the 256 bytes, valid during the call, on the receive path (the
// device's receive goroutine or a busy poller), and must not block. nil removes it,
// after which packets for QP1 are dropped as "no QP", as before any handler was set.
func (d *Device) SetMADHandler(h func(from netip.Addr, mad []byte)) {
	if h == nil {
		d.gsi.Store(nil)
		return
	}
	d.gsi.Store(&h)
}

// inputGSI delivers a packet for QP1 that passed the port's checks (ICRC, P_Key). Only a
// UD SEND_ONLY of one MAD with QP1's Q_Key is one; anything else is dropped and counted.
func (d *Device) inputGSI(p *wire.Packet, from netip.AddrPort) {
	h := d.gsi.Load()
	if h == nil {
		d.counters.NoQP.Add(1)
		return
	}
	if p.BTH.Opcode() != wire.UDSendOnly || len(p.Payload) != MADLen {
		d.counters.Malformed.Add(1)
		return
	}
	if p.DETH.QKey() != GSIQKey {
		d.counters.BadQKey.Add(1) // Linux rxe drops these the same way
		return
	}
	(*h)(from.Addr().Unmap(), p.Payload)
}

// SendMAD sends mad from QP1 to QP1 of the device at to: a UD SEND_ONLY with QP1's
// Q_Key and the default P_Key, its PSN from QP1's own sequence, as rxe sends MADs.
func (d *Device) SendMAD(to netip.Addr, mad []byte) error {
	if len(mad) != MADLen {
		return ErrMADLength
	}
	h := wire.Headers{
		BTH:  wire.BTHFields{Opcode: wire.UDSendOnly, PKey: 0xffff, DestQP: GSIQPN, PSN: wire.PSN(d.gsiPSN.Add(1) - 1)},
		DETH: wire.DETHFields{QKey: GSIQKey, SrcQP: GSIQPN},
	}
	tx := d.getTx()
	pl := bytesPayload(mad)
	d.emit(tx, netip.AddrPortFrom(to.Unmap(), d.peerPort), 0, &h, &pl, false)
	d.putTx(tx)
	return nil
}

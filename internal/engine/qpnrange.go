package engine

import (
	"cmp"
	"errors"
	"fmt"
	"maps"
	"slices"

	"github.com/goverbs/goverbs/netio"
)

// SetQPNs confines the numbers of the device's QPs from now on to [first, last], in a
// random place of which numbering starts (randomQPN's reason holds within a range too).
// goverbs serve splits one address's QPN space this way between its own engine and the
// engines of Go clients that run their own on its address, whose datagrams the kernel
// steers by the destination QPN's top byte (docs/DESIGN.md, "Shared devices"). Call it
// before the device has QPs other than QP1.
func (d *Device) SetQPNs(first, last uint32) error {
	if first < firstQPN || last > lastQPN || first > last {
		return fmt.Errorf("engine: QPN range %#x-%#x outside %#x-%#x", first, last, uint32(firstQPN), uint32(lastQPN))
	}
	d.qpMu.Lock()
	defer d.qpMu.Unlock()
	for n := range d.qps {
		if n > 1 {
			return errors.New("engine: SetQPNs on a device that has QPs")
		}
	}
	d.qpnFirst, d.qpnLast = first, last
	d.nextQPN = randomQPN(first, last)
	return nil
}

// QPNs is the range SetQPNs set (the whole space by default).
func (d *Device) QPNs() (first, last uint32) {
	d.qpMu.RLock()
	defer d.qpMu.RUnlock()
	return d.qpnFirst, d.qpnLast
}

// RecvFD is the UDP socket of a device on the UDP backend, with or without the
// same-host rings (netio.SocketFD), for goverbs serve's SO_REUSEPORT group; ok is false
// on any other Conn (AF_XDP, a simulated network). The descriptor stays the device's.
func (d *Device) RecvFD() (fd int, ok bool) { return netio.SocketFD(d.conn) }

// QPs is a snapshot of the device's QPs, ordered by QPN (goverbs stat of a client's
// own engine).
func (d *Device) QPs() []*QP {
	d.qpMu.RLock()
	qps := slices.Collect(maps.Values(d.qps))
	d.qpMu.RUnlock()
	slices.SortFunc(qps, func(a, b *QP) int { return cmp.Compare(a.qpn, b.qpn) })
	return qps
}

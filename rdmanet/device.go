package rdmanet

import (
	"errors"
	"net/netip"
	"sync"

	"github.com/goverbs/goverbs/cm"
	"github.com/goverbs/goverbs/verbs"
)

// device is an RDMA device shared by every listener and connection of the process on
// its address, with its connection manager and one protection domain. It is opened by
// the first user and closed when the last one is done.
type device struct {
	addr  netip.Addr
	dev   *verbs.Device
	agent *cm.Agent
	pd    *verbs.PD
	refs  int // under devices.mu
}

var devices struct {
	mu sync.Mutex
	m  map[netip.Addr]*device
}

// acquireDevice returns the device on addr, opening it if nobody has: the configured
// device bound to addr (GOVERBS_DEVICES) or else a software device on addr.
func acquireDevice(addr netip.Addr) (*device, error) {
	addr = addr.Unmap()
	devices.mu.Lock()
	defer devices.mu.Unlock()
	if d := devices.m[addr]; d != nil {
		d.refs++
		return d, nil
	}
	var dev *verbs.Device
	var err error
	if info, ok := cm.DeviceFor(addr); ok {
		dev, err = verbs.Open(info.Name)
	} else {
		dev, err = verbs.OpenSoft(verbs.SoftConfig{Addr: addr})
	}
	if err != nil {
		return nil, err
	}
	d := &device{addr: addr, dev: dev, refs: 1}
	if d.agent, err = cm.NewAgent(dev, nil); err != nil {
		dev.Close()
		return nil, err
	}
	if d.pd, err = dev.AllocPD(); err != nil {
		d.agent.Close()
		dev.Close()
		return nil, err
	}
	if devices.m == nil {
		devices.m = make(map[netip.Addr]*device)
	}
	devices.m[addr] = d
	return d, nil
}

// isLocal says whether addr is the address of a device this process has open: a
// connection to it has its peer in this process.
func isLocal(addr netip.Addr) bool {
	devices.mu.Lock()
	defer devices.mu.Unlock()
	return devices.m[addr.Unmap()] != nil
}

// release gives back one reference; the last closes the device.
func (d *device) release() error {
	devices.mu.Lock()
	defer devices.mu.Unlock()
	if d.refs--; d.refs > 0 {
		return nil
	}
	delete(devices.m, d.addr)
	return errors.Join(d.pd.Close(), d.agent.Close(), d.dev.Close())
}

// retain takes one more reference on a device already held.
func (d *device) retain() {
	devices.mu.Lock()
	d.refs++
	devices.mu.Unlock()
}

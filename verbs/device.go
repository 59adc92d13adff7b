package verbs

import (
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/goverbs/goverbs/verbs/driver"
)

// DeviceInfo names a device that can be opened (struct ibv_device).
type DeviceInfo struct {
	Name     string
	NodeGUID uint64
	NodeType NodeType
	// Transport of the device: "InfiniBand" for RoCE, as libibverbs reports it.
	Transport string
	// Provider is the name the device's provider registered under (see package
	// verbs/driver): "soft" for the software RoCEv2 device.
	Provider string
}

// Device is an opened device (struct ibv_context). It is safe for concurrent use.
type Device struct {
	info  DeviceInfo
	impl  driver.Device
	ports uint8
	gsi   *gsiMux // QP1's classes, when the provider gives QP1 access (gsi.go)

	// closed is set once, by Close under mu; the maps hold what Close marks closed with
	// it (see lifecycle.go).
	closed atomic.Bool
	mu     sync.Mutex
	qps    map[driver.QP]*QP
	cqs    map[driver.CQ]*CQ
	srqs   map[driver.SRQ]*SRQ
	chans  map[*CompChannel]struct{}
	evOnce sync.Once
	evs    chan AsyncEvent
	done   chan struct{} // closed by Close
}

// Devices lists the devices that can be opened (ibv_get_device_list): those of every
// registered provider, in the order of the providers' names. Without any configuration
// there is one software RoCEv2 device on loopback; see SoftConfig and the
// GOVERBS_DEVICES environment variable.
func Devices() ([]DeviceInfo, error) {
	var out []DeviceInfo
	for _, name := range driver.Providers() {
		p, _ := driver.Lookup(name)
		list, err := p.Devices()
		if err != nil {
			return nil, err
		}
		for _, d := range list {
			out = append(out, DeviceInfo{Name: d.Name, NodeGUID: d.NodeGUID, NodeType: d.NodeType,
				Transport: d.Transport, Provider: name})
		}
	}
	return out, nil
}

// Open opens the named device; "" opens the first one (ibv_open_device).
func Open(name string) (*Device, error) {
	list, err := Devices()
	if err != nil {
		return nil, err
	}
	for _, info := range list {
		if name == "" || info.Name == name {
			p, _ := driver.Lookup(info.Provider)
			impl, err := p.Open(info.Name)
			if err != nil {
				return nil, err
			}
			return newDevice(info, impl), nil
		}
	}
	return nil, fmt.Errorf("%w: %q", ErrNoDevice, name)
}

// newDevice wraps a provider's opened device.
func newDevice(info DeviceInfo, impl driver.Device) *Device {
	d := &Device{
		info: info, impl: impl, ports: impl.Query().PhysPortCnt, done: make(chan struct{}),
		qps: make(map[driver.QP]*QP), cqs: make(map[driver.CQ]*CQ), srqs: make(map[driver.SRQ]*SRQ),
		chans: make(map[*CompChannel]struct{}),
	}
	d.gsi = newGSIMux(impl)
	return d
}

// Name returns the device's name.
func (d *Device) Name() string { return d.info.Name }

// Info returns the device's listing entry.
func (d *Device) Info() DeviceInfo { return d.info }

// Close closes the device and everything created on it (ibv_close_device): QPs stop,
// sockets close, blocked CompChannel.Wait calls return, and every later call on the
// device or on an object made from it returns an error matching ErrClosed. Closing a
// closed device returns such an error too.
func (d *Device) Close() error {
	d.mu.Lock()
	if d.closed.Load() {
		d.mu.Unlock()
		return errDeviceClosed
	}
	d.closed.Store(true)
	// The data-path objects check only their own flag: set it for them.
	for _, qp := range d.qps {
		qp.life.closed.Store(true)
	}
	for _, cq := range d.cqs {
		cq.life.closed.Store(true)
	}
	for _, s := range d.srqs {
		s.life.closed.Store(true)
	}
	for c := range d.chans {
		c.shut()
	}
	close(d.done)
	d.mu.Unlock()
	return d.impl.Close()
}

// Query returns the device's attributes (ibv_query_device); a closed device's are those
// it had.
func (d *Device) Query() DeviceAttr { return d.impl.Query() }

func (d *Device) checkPort(port uint8) error {
	if d.closed.Load() {
		return errDeviceClosed
	}
	if port < 1 || port > d.ports {
		return fmt.Errorf("%w: %d (the device has %d)", ErrInvalidPort, port, d.ports)
	}
	return nil
}

// QueryPort returns a port's attributes; ports are numbered from 1 (ibv_query_port).
func (d *Device) QueryPort(port uint8) (PortAttr, error) {
	if err := d.checkPort(port); err != nil {
		return PortAttr{}, err
	}
	return d.impl.QueryPort(port), nil
}

// GIDTable returns a port's GID table.
func (d *Device) GIDTable(port uint8) ([]GIDEntry, error) {
	if err := d.checkPort(port); err != nil {
		return nil, err
	}
	return d.impl.GIDTable(port), nil
}

// QueryGID returns one GID (ibv_query_gid).
func (d *Device) QueryGID(port uint8, index int) (GID, error) {
	t, err := d.GIDTable(port)
	if err != nil {
		return GID{}, err
	}
	if index < 0 || index >= len(t) {
		return GID{}, fmt.Errorf("%w: %d (the table has %d)", ErrInvalidGID, index, len(t))
	}
	return t[index].GID, nil
}

// Progress drives a software device's receive path once: it reads and processes what the
// socket holds. A program that waits for remote writes by watching memory, instead of
// polling a CQ, calls it in its wait loop, as a DPDK application calls its poll-mode
// driver. On a busy-poll device that is how the device is driven. In the default mode
// the device has a receive goroutine of its own and Progress reads only while nothing
// else does; a program that calls it in a loop finds its packets on its own thread
// instead of waiting for that goroutine's wake-up (CQ.Poll does the same when the CQ is
// empty). On other devices (kernel RNICs), and on a closed one, it does nothing. It
// reports whether it drove the device.
func (d *Device) Progress() bool {
	if d.closed.Load() {
		return false
	}
	return d.impl.Progress()
}

// Counters returns the device's statistics.
func (d *Device) Counters() Counters { return d.impl.Counters() }

// AllocPD allocates a protection domain (ibv_alloc_pd).
func (d *Device) AllocPD() (*PD, error) {
	if d.closed.Load() {
		return nil, errDeviceClosed
	}
	impl, err := d.impl.AllocPD()
	if err != nil {
		return nil, err
	}
	return &PD{dev: d, impl: impl}, nil
}

// AsyncEvent is an asynchronous event (struct ibv_async_event). The object it concerns
// is set according to Type.
type AsyncEvent struct {
	Type EventType
	QP   *QP
	CQ   *CQ
	SRQ  *SRQ
	Port uint8
}

func (e AsyncEvent) String() string { return e.Type.String() }

// Events returns the device's asynchronous events (ibv_get_async_event). Events are
// acknowledged by receiving them. The channel closes when the device closes.
func (d *Device) Events() <-chan AsyncEvent {
	d.evOnce.Do(func() {
		d.evs = make(chan AsyncEvent, 64)
		if d.closed.Load() { // the provider's events are gone with its device
			close(d.evs)
			return
		}
		go func() {
			defer close(d.evs)
			for ev := range d.impl.Events() {
				out, ok := d.mapEvent(ev)
				if !ok {
					continue
				}
				select {
				case d.evs <- out:
				case <-d.done: // nobody is reading; do not outlive the device
					return
				}
			}
		}()
	})
	return d.evs
}

// mapEvent gives the provider's event the program's objects; false: the event is dropped.
func (d *Device) mapEvent(ev driver.AsyncEvent) (AsyncEvent, bool) {
	out := AsyncEvent{Type: ev.Type, Port: ev.Port}
	d.mu.Lock()
	defer d.mu.Unlock()
	if ev.QP != nil {
		out.QP = d.qps[ev.QP]
	}
	if ev.CQ != nil {
		out.CQ = d.cqs[ev.CQ]
	}
	if ev.SRQ != nil {
		out.SRQ = d.srqs[ev.SRQ]
	}
	// An event about an object the program has closed meanwhile is dropped, as a
	// kernel device reports nothing for a QP, CQ or SRQ once its destroy returned: the
	// provider may have raised it just before (a QP moved to the error state raises
	// "last WQE reached" as it is destroyed). Delivered, it would name no object with
	// a type that promises one; the C library turned that into a NULL element that
	// UCX's async thread dereferenced at teardown.
	gone := (ev.QP != nil && out.QP == nil) || (ev.CQ != nil && out.CQ == nil) || (ev.SRQ != nil && out.SRQ == nil)
	return out, !gone
}

// track records a QP, CQ or SRQ made on the device (add) or forgets a closed one. An
// addition to a device that closed meanwhile fails with ErrClosed: Close did not see the
// object to mark it.
func (d *Device) track(qp *QP, cq *CQ, srq *SRQ, add bool) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if add && d.closed.Load() {
		return errDeviceClosed
	}
	switch {
	case qp != nil && add:
		d.qps[qp.impl] = qp
	case qp != nil:
		delete(d.qps, qp.impl)
	case cq != nil && add:
		d.cqs[cq.impl] = cq
	case cq != nil:
		delete(d.cqs, cq.impl)
	case srq != nil && add:
		d.srqs[srq.impl] = srq
	case srq != nil:
		delete(d.srqs, srq.impl)
	}
	return nil
}

// Commander is the command channel to the daemon that runs the device, for services
// above verbs that the daemon provides for it (package cm's rdma_cm on an attached
// device); nil for a device of a provider without one.
func (d *Device) Commander() driver.Commander {
	c, _ := d.impl.(driver.Commander)
	return c
}

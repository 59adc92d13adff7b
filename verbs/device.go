package verbs

import (
	"errors"
	"fmt"
	"sync"
)

// Errors of the verbs API. Data-path failures are not errors but completion statuses.
var (
	ErrNoDevice     = errors.New("verbs: no such device")
	ErrClosed       = errors.New("verbs: object is closed")
	ErrInvalidPort  = errors.New("verbs: invalid port number")
	ErrInvalidGID   = errors.New("verbs: invalid GID index")
	ErrInvalidState = errors.New("verbs: invalid QP state transition")
	ErrMissingAttr  = errors.New("verbs: required QP attribute missing")
	ErrExtraAttr    = errors.New("verbs: QP attribute not allowed in this transition")
	ErrInvalidAttr  = errors.New("verbs: invalid attribute value")
	ErrWrongDevice  = errors.New("verbs: objects belong to different devices or PDs")
)

// NodeType is what kind of node a device is (ibv_node_type).
type NodeType uint8

const (
	NodeCA   NodeType = 1
	NodeRNIC NodeType = 4
)

func (n NodeType) String() string {
	if n == NodeCA {
		return "InfiniBand channel adapter"
	}
	return "iWARP NIC"
}

// DeviceInfo names a device that can be opened (struct ibv_device).
type DeviceInfo struct {
	Name     string
	NodeGUID uint64
	NodeType NodeType
	// Transport of the device: "InfiniBand" for RoCE, as libibverbs reports it.
	Transport string
	provider  provider
	soft      *SoftConfig // for the software provider
}

// SoftConfig returns the configuration of a software device, so that a program can open
// a listed device with options of its own (a Recorder, busy polling) through OpenSoft.
func (i DeviceInfo) SoftConfig() (SoftConfig, bool) {
	if i.soft == nil {
		return SoftConfig{}, false
	}
	return *i.soft, true
}

// GIDEntry is one entry of a port's GID table.
type GIDEntry struct {
	Index int
	GID   GID
	Type  string // "RoCE v2"
}

// Device is an opened device (struct ibv_context). It is safe for concurrent use.
type Device struct {
	info DeviceInfo
	impl deviceImpl

	mu     sync.Mutex
	closed bool
	qps    map[qpImpl]*QP
	cqs    map[cqImpl]*CQ
	srqs   map[srqImpl]*SRQ
	evOnce sync.Once
	evs    chan AsyncEvent
	done   chan struct{} // closed by Close
}

// Devices lists the devices that can be opened (ibv_get_device_list). Without any
// configuration there is one software RoCEv2 device on loopback; see SoftConfig and the
// GOVERBS_DEVICES environment variable.
func Devices() ([]DeviceInfo, error) {
	return softProvider{}.devices()
}

// Open opens the named device; "" opens the first one (ibv_open_device).
func Open(name string) (*Device, error) {
	list, err := Devices()
	if err != nil {
		return nil, err
	}
	for _, info := range list {
		if name == "" || info.Name == name {
			return openInfo(info)
		}
	}
	return nil, fmt.Errorf("%w: %q", ErrNoDevice, name)
}

func openInfo(info DeviceInfo) (*Device, error) {
	impl, err := info.provider.open(info)
	if err != nil {
		return nil, err
	}
	return &Device{
		info: info, impl: impl, done: make(chan struct{}),
		qps: make(map[qpImpl]*QP), cqs: make(map[cqImpl]*CQ), srqs: make(map[srqImpl]*SRQ),
	}, nil
}

// Name returns the device's name.
func (d *Device) Name() string { return d.info.Name }

// Info returns the device's listing entry.
func (d *Device) Info() DeviceInfo { return d.info }

// Close closes the device and everything created on it: QPs stop, sockets close.
func (d *Device) Close() error {
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		return nil
	}
	d.closed = true
	close(d.done)
	d.mu.Unlock()
	return d.impl.close()
}

// Query returns the device's attributes (ibv_query_device).
func (d *Device) Query() DeviceAttr { return d.impl.query() }

// QueryPort returns a port's attributes; ports are numbered from 1 (ibv_query_port).
func (d *Device) QueryPort(port uint8) (PortAttr, error) {
	if port != 1 {
		return PortAttr{}, ErrInvalidPort
	}
	return d.impl.queryPort(port), nil
}

// GIDTable returns a port's GID table.
func (d *Device) GIDTable(port uint8) ([]GIDEntry, error) {
	if port != 1 {
		return nil, ErrInvalidPort
	}
	return d.impl.gids(port), nil
}

// QueryGID returns one GID (ibv_query_gid).
func (d *Device) QueryGID(port uint8, index int) (GID, error) {
	t, err := d.GIDTable(port)
	if err != nil {
		return GID{}, err
	}
	if index < 0 || index >= len(t) {
		return GID{}, ErrInvalidGID
	}
	return t[index].GID, nil
}

// Progress drives a busy-poll device's receive path once: it reads and processes what the
// socket holds. A program that waits for remote writes by watching memory, instead of
// polling a CQ, calls it in its wait loop, as a DPDK application calls its poll-mode
// driver. On other devices it does nothing. It reports whether the device is busy-poll.
func (d *Device) Progress() bool { return d.impl.progress() }

// Counters returns the device's statistics.
func (d *Device) Counters() Counters { return d.impl.counters() }

// AllocPD allocates a protection domain (ibv_alloc_pd).
func (d *Device) AllocPD() (*PD, error) {
	impl, err := d.impl.allocPD()
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
		go func() {
			defer close(d.evs)
			for ev := range d.impl.events() {
				select {
				case d.evs <- d.mapEvent(ev):
				case <-d.done: // nobody is reading; do not outlive the device
					return
				}
			}
		}()
	})
	return d.evs
}

func (d *Device) mapEvent(ev asyncEvent) AsyncEvent {
	out := AsyncEvent{Type: ev.typ, Port: ev.port}
	d.mu.Lock()
	if ev.qp != nil {
		out.QP = d.qps[ev.qp]
	}
	if ev.cq != nil {
		out.CQ = d.cqs[ev.cq]
	}
	if ev.srq != nil {
		out.SRQ = d.srqs[ev.srq]
	}
	d.mu.Unlock()
	return out
}

func (d *Device) track(qp *QP, cq *CQ, srq *SRQ, add bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
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
}

package verbs

import (
	"encoding/binary"
	"errors"
	"net/netip"
	"sync"
	"sync/atomic"

	"github.com/goverbs/goverbs/verbs/driver"
)

// ErrNoGSI: the device's provider gives no access to QP1 (a hardware RNIC's QP1
// belongs to the kernel, whose own rdma_cm serves it).
var ErrNoGSI = errors.New("verbs: device has no GSI (QP1) access")

// ErrGSIBusy: another user holds the device's GSI for that management class (or
// holds all of QP1).
var ErrGSIBusy = errors.New("verbs: GSI already open on this device")

// GSI is access to a device's QP1: 256-byte MADs to and from QP1 of other devices,
// addressed by IP address (on RoCEv2 the GID is the address). QP1 is shared by
// management class, as the kernel's MAD layer registers one agent per class and class
// version (IBTA Vol. 1 13.5.1: the GSI serves every GS class): OpenGSIClass gives one
// class to one user, so that the connection manager (package cm, class 0x07) and, say,
// an ibping responder (vendor class 0x32) share a device. OpenGSI takes every class.
type GSI struct {
	mux   *gsiMux
	key   gsiKey
	h     atomic.Pointer[func(from netip.Addr, mad []byte)]
	once  sync.Once
	whole bool // OpenGSI: every class
}

// GSICounters count what a device's QP1 did with the MADs it received.
type GSICounters struct {
	// Delivered MADs went to the handler of their class.
	Delivered uint64
	// Malformed MADs were not 256 bytes or not base version 1 (13.4.2): dropped.
	Malformed uint64
	// UnknownClass MADs had a class and class version nobody has opened (or whose
	// holder had no handler yet): dropped, and requests among them answered.
	UnknownClass uint64
	// Unsupported counts the answers to those requests: a Get or Set of a class
	// nobody serves is answered with a GetResp whose status says the class is not
	// supported (13.4.7, status code 1: bad version), so that the requester stops
	// at once instead of timing out. Responses and sends are never answered (an
	// answer to an answer could loop between two devices).
	Unsupported uint64
}

// gsiKey is a management class and class version (bytes 1 and 2 of the header).
type gsiKey struct{ class, version uint8 }

// gsiMux is one device's QP1: the provider's single handler, installed when the device
// opens (a CA's GSI always answers, 13.5.1), fanning MADs out by class. The receive
// path reads table without a lock; opens and closes replace it under mu.
type gsiMux struct {
	impl  driver.GSI
	mu    sync.Mutex
	users map[gsiKey]*GSI
	whole *GSI
	table atomic.Pointer[gsiTable]

	delivered, malformed, unknown, unsupported atomic.Uint64
}

// gsiTable is a snapshot of who holds what, for the receive path.
type gsiTable struct {
	whole   *GSI
	classes map[gsiKey]*GSI
}

// newGSIMux installs the QP1 dispatcher of a provider's device, or returns nil if the
// provider gives no QP1 access.
func newGSIMux(dev driver.Device) *gsiMux {
	impl, ok := dev.(driver.GSI)
	if !ok {
		return nil
	}
	m := &gsiMux{impl: impl, users: map[gsiKey]*GSI{}}
	m.publish()
	impl.SetMADHandler(m.input)
	return m
}

// Status and method values used in answering a class nobody serves (13.4.5, 13.4.7).
const (
	madMethodGet     = 0x01
	madMethodSet     = 0x02
	madMethodGetResp = 0x81
	madStatusBadVer  = 0x0004 // code 1 in bits 2-4: class or class version not supported
	madLen           = 256
	madBaseVersion   = 1
)

// OpenGSI returns the whole of the device's QP1, every management class: ErrNoGSI if
// its provider has none, ErrGSIBusy if any class of it is open already.
func (d *Device) OpenGSI() (*GSI, error) { return d.openGSI(gsiKey{}, true) }

// OpenGSIClass returns the device's QP1 for one management class and class version
// (for example 0x07 and 2 for the connection manager): its handler receives those
// MADs only. ErrNoGSI if the provider has no QP1 access, ErrGSIBusy if that class and
// version, or the whole QP1, is open already.
func (d *Device) OpenGSIClass(class, version uint8) (*GSI, error) {
	return d.openGSI(gsiKey{class, version}, false)
}

func (d *Device) openGSI(k gsiKey, whole bool) (*GSI, error) {
	m := d.gsi
	if m == nil {
		return nil, ErrNoGSI
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.whole != nil || (whole && len(m.users) > 0) || (!whole && m.users[k] != nil) {
		return nil, ErrGSIBusy
	}
	g := &GSI{mux: m, key: k, whole: whole}
	if whole {
		m.whole = g
	} else {
		m.users[k] = g
	}
	m.publish()
	return g, nil
}

// publish replaces the receive path's snapshot; the caller holds mu (or owns m).
func (m *gsiMux) publish() {
	t := &gsiTable{whole: m.whole, classes: make(map[gsiKey]*GSI, len(m.users))}
	for k, g := range m.users {
		t.classes[k] = g
	}
	m.table.Store(t)
}

// input is the provider's QP1 handler: each MAD goes to the holder of its class.
func (m *gsiMux) input(from netip.Addr, mad []byte) {
	t := m.table.Load()
	if t.whole != nil {
		if !m.deliver(t.whole, from, mad) {
			m.unknown.Add(1)
		}
		return
	}
	if len(mad) != madLen || mad[0] != madBaseVersion {
		m.malformed.Add(1)
		return
	}
	if g := t.classes[gsiKey{mad[1], mad[2]}]; g != nil && m.deliver(g, from, mad) {
		return
	}
	m.unknown.Add(1)
	if method := mad[3]; method == madMethodGet || method == madMethodSet {
		var resp [madLen]byte
		copy(resp[:], mad)
		resp[3] = madMethodGetResp
		binary.BigEndian.PutUint16(resp[4:], madStatusBadVer)
		if m.impl.SendMAD(from, resp[:]) == nil {
			m.unsupported.Add(1)
		}
	}
}

// deliver calls g's handler, reporting false if it has none yet.
func (m *gsiMux) deliver(g *GSI, from netip.Addr, mad []byte) bool {
	h := g.h.Load()
	if h == nil {
		return false
	}
	m.delivered.Add(1)
	(*h)(from, mad)
	return true
}

// GSICounters returns the counters of the device's QP1 (zeros for a device whose
// provider gives no QP1 access).
func (d *Device) GSICounters() GSICounters {
	m := d.gsi
	if m == nil {
		return GSICounters{}
	}
	return GSICounters{Delivered: m.delivered.Load(), Malformed: m.malformed.Load(),
		UnknownClass: m.unknown.Load(), Unsupported: m.unsupported.Load()}
}

// Send sends one MAD (256 bytes) to QP1 of the device at to. Any class may be sent:
// the class a GSI was opened for only selects what it receives.
func (g *GSI) Send(to netip.Addr, mad []byte) error { return g.mux.impl.SendMAD(to, mad) }

// SetHandler installs the function that receives the MADs of this GSI's class (every
// MAD for OpenGSI's) sent to this device's QP1, with the sender's address; mad is
// valid during the call only. It runs on the device's receive path and must not
// block. Until it is set, the class's MADs are handled as a class nobody serves.
func (g *GSI) SetHandler(h func(from netip.Addr, mad []byte)) {
	if h == nil {
		g.h.Store(nil)
		return
	}
	g.h.Store(&h)
}

// Close removes the handler and releases the class (or the whole QP1).
func (g *GSI) Close() error {
	g.once.Do(func() {
		g.h.Store(nil)
		m := g.mux
		m.mu.Lock()
		defer m.mu.Unlock()
		if g.whole {
			m.whole = nil
		} else {
			delete(m.users, g.key)
		}
		m.publish()
	})
	return nil
}

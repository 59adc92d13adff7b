// Package driver is what a verbs provider implements, as database/sql/driver is for
// database/sql: the interfaces of a device and its objects, the registry that package
// verbs consults, and the types both sides share.
//
// Programs use package verbs, not this one. A provider — the software RoCEv2 device
// (package verbs/soft), or a package that reaches RNICs through libibverbs — calls
// Register from an init function; verbs.Devices lists the devices of every registered
// provider and verbs.Open opens one, so a program that imports a provider's package (for
// its side effect, `import _ ".../verbs/ibverbs"`) gets its devices without other change.
//
// The data-path types (SGE, SendWR, RecvWR, WC) and the enums are defined here once;
// package verbs aliases them. A provider reads the caller's work requests and fills the
// caller's completions in place, so a post or a poll costs no copy and no allocation in
// between.
//
// Package verbs does what is common to every provider before it calls one: argument
// checks, the QP state-transition table (IBTA 11.2.4.2), object lifetimes and the mapping
// of a provider's objects back to the user's in async events. A provider does only what
// its device does. Its methods may be called from many goroutines at once.
package driver

import (
	"fmt"
	"slices"
	"sync"
)

// Provider lists and opens the devices of one kind.
type Provider interface {
	// Devices lists the devices that can be opened now.
	Devices() ([]DeviceInfo, error)
	// Open opens the named device, one that Devices listed. An unknown name is an error
	// that wraps ErrNoDevice.
	Open(name string) (Device, error)
}

// Device is an opened device (struct ibv_context).
type Device interface {
	Close() error
	Query() DeviceAttr
	// QueryPort and GIDTable are called with a port from 1 to Query().PhysPortCnt.
	QueryPort(port uint8) PortAttr
	GIDTable(port uint8) []GIDEntry
	AllocPD() (PD, error)
	// CreateCQ creates a CQ; notify, when not nil, is called (without blocking, from any
	// goroutine) each time an armed CQ fires (see CQ.RequestNotify).
	CreateCQ(depth int, notify func()) (CQ, error)
	// Events delivers the device's asynchronous events; it is called once and the
	// channel closes when the device closes.
	Events() <-chan AsyncEvent
	Counters() Counters
	// Progress drives the device's receive path once where the application's thread
	// can do that work (busy polling; a software device's idle socket), and reports
	// whether it did; otherwise it does nothing and returns false.
	Progress() bool
}

// Leader is implemented by a Device whose receive path the goroutine that waits on a
// completion channel can run itself (leader/follower): the software provider in the
// default mode, where the socket's arrival then wakes the goroutine that wants the
// completion instead of the device's receive goroutine, which would have to hand it on.
type Leader interface {
	// NewWaiter returns the Waiter of one completion channel, or nil when the device
	// cannot be served by its waiters.
	NewWaiter() Waiter
}

// Waiter is a completion channel's hold on its device's receive path (Leader).
type Waiter interface {
	// Serve reads and processes the device's traffic in the calling goroutine until
	// Wake is called (or was, since the last Serve returned), and reports true; it
	// reports false at once when another goroutine is doing that work, and the caller
	// then blocks on its channel and on Turn.
	Serve() bool
	// Wake ends the Serve running now, or else the next one. Any goroutine, any time.
	Wake()
	// Turn is signalled when the goroutine doing the device's work stops: a caller
	// whose Serve reported false may try again.
	Turn() <-chan struct{}
}

// PD is a protection domain.
type PD interface {
	Close() error
	RegMR(buf []byte, access Access) (MR, error)
	CreateQP(init *QPInit) (QP, error)
	CreateSRQ(attr SRQAttr) (SRQ, error)
	CreateAH(attr *AHAttr) (AH, error)
	AllocMW(t MWType) (MW, error)
}

// MR is a registered memory region.
type MR interface {
	Close() error
	LKey() uint32
	RKey() uint32
	Addr() uint64
}

// MW is a memory window.
type MW interface {
	Close() error
	RKey() uint32
}

// AH is an address handle.
type AH interface {
	Close() error
}

// CQ is a completion queue.
type CQ interface {
	Close() error
	// Poll fills wcs and returns how many completions it wrote, or ErrCQOverflow (with
	// 0) once an overrun CQ is empty. wcs may live on the caller's stack: the rule of
	// QP.PostSend applies.
	Poll(wcs []WC) (int, error)
	Resize(depth int) error
	Depth() int
	RequestNotify(solicitedOnly bool) error
}

// QP is a queue pair. Package verbs has checked a Modify's transition and attributes
// against IBTA table 91 before the provider sees it.
type QP interface {
	Close() error
	QPN() uint32
	State() QPState
	Modify(attr *QPAttr, mask QPAttrMask) error
	Query() QPAttr
	// PostSend and PostRecv queue the work requests in order and return a *PostError
	// for the first one refused. wrs, their SGLs and what they point to may live on
	// the caller's stack: a provider copies what it needs (as an RNIC copies a WR into
	// its WQE) and stores no pointer into any of it outside its own stack frames, not
	// even until it returns (Go moves stacks, and nothing in the heap may point into
	// one).
	PostSend(wrs []SendWR) error
	PostRecv(wrs []RecvWR) error
	// BindMW binds a type 1 window (ibv_bind_mw) and returns the rkey it will have.
	BindMW(mw MW, id uint64, flags SendFlags, b MWBind) (uint32, error)
	// AttachMcast and DetachMcast attach a UD QP to a multicast group and detach it
	// (ibv_attach_mcast, ibv_detach_mcast); package verbs has checked the QP's type and
	// that gid is a multicast GID. On RoCE lid is unused.
	AttachMcast(gid GID, lid uint16) error
	DetachMcast(gid GID, lid uint16) error
	Counters() QPCounters
}

// SRQ is a shared receive queue.
type SRQ interface {
	Close() error
	// PostRecv follows QP.PostRecv's rules.
	PostRecv(wrs []RecvWR) error
	Arm(limit uint32) error
	Query() SRQAttr
}

// XRCDevice is a Device with XRC (IBTA Vol. 1 Annex A14; DeviceXRC in its
// capabilities).
type XRCDevice interface {
	// OpenXRCD opens an XRC domain as ibv_open_xrcd does: fd -1 makes a domain of its
	// own; otherwise every open of the same file (the same inode) on the device shares
	// one domain, made by an open whose oflags have O_CREAT (without it, a file with no
	// domain is EAGAIN; with O_EXCL, a file that has one is EINVAL: the kernel's errnos).
	// The domain lives until its last opener closes it.
	OpenXRCD(fd int, oflags int) (XRCD, error)
}

// XRCD is an XRC domain: the XRC SRQs and XRC_RECV QPs that may serve one another.
type XRCD interface {
	// Close drops one opener's reference; it fails with ErrBusy while SRQs or QPs
	// made through this opener exist.
	Close() error
	// CreateQP creates an XRC_RECV QP in the domain.
	CreateQP(init *QPInit) (QP, error)
}

// XRCPD is a PD that creates XRC SRQs: receive WQEs in the PD's memory for XRC
// requests to xrcd's targets, completing in cq.
type XRCPD interface {
	CreateXRCSRQ(xrcd XRCD, cq CQ, attr SRQAttr) (SRQ, error)
}

// NumberedSRQ is an SRQ with the number an XRCETH names (ibv_get_srq_num).
type NumberedSRQ interface {
	Num() uint32
}

var (
	registryMu sync.RWMutex
	registry   = map[string]Provider{}
)

// Register makes a provider available under name. It panics if name is taken or p is
// nil, as database/sql.Register does: both are programming errors found at start-up.
func Register(name string, p Provider) {
	registryMu.Lock()
	defer registryMu.Unlock()
	if p == nil {
		panic("verbs/driver: Register of a nil provider")
	}
	if _, dup := registry[name]; dup {
		panic(fmt.Sprintf("verbs/driver: Register called twice for provider %q", name))
	}
	registry[name] = p
}

// Providers returns the names of the registered providers, sorted.
func Providers() []string {
	registryMu.RLock()
	defer registryMu.RUnlock()
	names := make([]string, 0, len(registry))
	for n := range registry {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

// Lookup returns the provider registered under name.
func Lookup(name string) (Provider, bool) {
	registryMu.RLock()
	defer registryMu.RUnlock()
	p, ok := registry[name]
	return p, ok
}

// The device: one software RNIC on one UDP address. Its configuration and limits,
// start (New) and Close, the QP table, and async event delivery.

package engine

import (
	"context"
	"errors"
	"log/slog"
	"maps"
	"math/rand/v2"
	"net"
	"net/netip"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/goverbs/goverbs/internal/congestion"
	"github.com/goverbs/goverbs/netio"
	"github.com/goverbs/goverbs/verbs/driver"
	"github.com/goverbs/goverbs/wire"
)

var (
	ErrDeviceClosed = driver.NewError(driver.ErrClosed, "device is closed")
	ErrNoConn       = driver.NewError(driver.ErrInvalidAttr, "device needs a bound datagram connection")
)

// Limits the software device advertises and enforces. They follow Linux rxe's defaults
// (see shared FACTS.md) so that programs tuned for rxe behave the same here.
const (
	MaxQP          = 1 << 16
	MaxQPWR        = 1 << 14
	MaxSGE         = 32
	MaxInline      = 512
	MaxRdAtomic    = 128
	MaxMsgSize     = 1 << 23 // 8 MiB, port max_msg_sz
	MaxUnackedPSNs = 128     // requester window at the largest MTU, as rxe (see QP.window)
	firstQPN       = 0x11    // QP0/QP1 are special (IBTA 10.2.4.1); rxe starts at 17 too
	lastQPN        = McastQPN - 1
)

// randomQPN is where a new device starts numbering its QPs: anywhere in
// [firstQPN, lastQPN]. A device lives as long as its process, so a device that
// always started at firstQPN would give a restarted process the QPNs its previous
// run used, and a peer that still holds the old connection (the process was
// killed, nothing said goodbye) takes the new REQ for a stale one and rejects it
// (IBA 12.9.8.3.1; Linux's rdma_cm does so during its timewait too). rxe and
// hardware keep counting for the life of the kernel, so a restarted program gets
// new numbers there; a random start gives a restarted goverbs process the same.
func randomQPN(first, last uint32) uint32 {
	return first + rand.Uint32N(last-first+1)
}

// Config describes a software device.
type Config struct {
	Name string
	// Conn is the bound datagram socket the device sends and receives on. The device owns
	// it from now on and closes it in Close.
	Conn netio.Conn
	// PeerPort is the UDP destination port of RoCEv2 peers (wire.UDPPort if zero).
	PeerPort uint16
	// MTU is the port's active MTU (wire.ActiveMTU of the interface).
	MTU    wire.MTU
	Logger *slog.Logger
	// NodeGUID is the GUID the device reports (Query).
	NodeGUID uint64
	// BusyPoll makes CQ polls read the socket themselves when the CQ is empty (the
	// Conn must be a netio.Poller; otherwise the device stays in the default mode).
	BusyPoll bool
	// Congestion is DCQCN's configuration (internal/congestion); the zero Config is off,
	// and a Config that fails Validate runs as off. On, requests and responses leave
	// ECT(0) when the Conn carries ECN (Caps.ECN), CE-marked packets are answered with
	// CNPs and each QP's requester is paced to its rate (congestion.go).
	Congestion congestion.Config
	// SelectiveRepeat makes RC QPs keep out-of-order requests and SACK them, and resend
	// only what a peer's SACKs say is missing (selective.go). A connection runs it only
	// when both ends have it on; with any other peer it is go-back-N, as without.
	SelectiveRepeat bool
}

// Device is one software RDMA device bound to one IP address.
type Device struct {
	name     string
	conn     netio.Conn
	icrcOff  netio.ICRCOffloader // the Conn takes some datagrams unsealed (txBatch.unsealedTo)
	local    netip.AddrPort      // where packets arrive (port 4791)
	src      netip.AddrPort      // where they leave from: the ICRC covers its port
	gid      [16]byte
	peerPort uint16
	mtu      wire.MTU
	log      *slog.Logger
	debug    bool // log protocol events (checked before building a log record)
	guid     uint64
	cc       congestion.Config // DCQCN's parameters; off unless Enabled (congestion.go)
	ect      bool              // requests and responses leave ECT(0)
	rxECN    netio.ECN         // the ECN codepoint of the datagram being input
	// rxIntact: the datagram being input crossed a same-host ring (netio.Message.SameHost),
	// where nothing corrupts it: its ICRC is not checked (input, inputView).
	rxIntact bool

	// splitAcks: an ACK riding with requests leaves in a send of its own after
	// theirs (busy poll on a Conn with Caps.SplitAcks; see runRequester).
	splitAcks bool

	selectiveRepeat bool      // RC QPs run selective repeat with peers that do (selective.go)
	srBufs          sync.Pool // *[]byte of srBufSize: packets kept beyond a gap

	closed    atomic.Bool
	pdHandles atomic.Uint32
	keys      keyTable

	// XRC (xrc.go): the domains shared through files, and SRQs by number.
	xrcdMu   sync.Mutex
	xrcds    map[xrcdKey]*xrcDomain
	srqMu    sync.RWMutex
	srqs     map[uint32]*SRQ
	nextSRQN uint32

	qpMu    sync.RWMutex
	qps     map[uint32]*QP
	qpGone  atomic.Uint64 // QPs removed from qps so far: invalidates rxQP
	nextQPN uint32
	// The numbers QPs get, [qpnFirst, qpnLast] (SetQPNs; all of them by default).
	qpnFirst, qpnLast uint32

	evMu     sync.Mutex // raise against Close's closing of events
	evClosed bool
	events   chan driver.AsyncEvent

	gsi    atomic.Pointer[func(from netip.Addr, mad []byte)] // QP1's receiver (gsi.go)
	gsiPSN atomic.Uint32

	mcast    mcastTable
	counters Counters
	txPool   sync.Pool
	sender   sender
	doorbell doorbell // streamed posts waiting for a poll (busy-poll, or pollDriven)
	rxDone   chan struct{}
	done     chan struct{}

	// Receive state: owned by the receive goroutine, or in busy-poll mode by whoever
	// holds rxMu.
	rxMu   sync.Mutex
	poller netio.Poller // busy-poll mode
	// Default mode, when the Conn can be interrupted: goroutines waiting for completions
	// read the socket (waiter.go). leads counts their Serve calls and batches, parked is
	// the one blocked in the socket's read, rxFree is signalled when a reader lets go,
	// rxStop closed when the device closes.
	intr   netio.Interrupter
	leads  atomic.Uint32
	parked atomic.Pointer[Waiter]
	rxFree chan struct{}
	rxStop chan struct{}
	polls  atomic.Uint32 // CQ-driven polls so far (busyLoop and, in the default mode, rxLoop watch it)
	// busyWaits counts busyLoop's waits for traffic nobody polls for (tests count them).
	busyWaits atomic.Uint64
	// noRxSpin keeps rxLoop from spinning between batches (NoReceiveSpin).
	noRxSpin atomic.Bool
	// external is set when an event loop of the caller's drives the receive path
	// (DriveRx): rxLoop reads no more.
	external atomic.Bool
	// idlePoller is the default mode's non-blocking read: a CQ poll that finds the CQ
	// empty reads the socket itself when no goroutine is reading it (PollRx).
	idlePoller netio.Poller
	// unwatch takes the socket out of the netpoller's watch once a program polls tightly
	// (drainLocked): pollsSinceRead counts the polls since the last blocking read, under
	// rxMu. A program that polls once or twice between channel waits (perftest -e) keeps
	// the watch, and no epoll_ctl per turn.
	unwatch        netio.Unwatcher
	pollsSinceRead int
	// rings is the Conn's word on whether a read came from the same-host rings, where a
	// poll makes no system call: after such a batch a serving waiter polls before it
	// blocks when traffic is dense (serveRead), and rxLoop spins after bulk batches as
	// after small ones (spinnable). nil for other Conns. serveRings and serveGap are the
	// waiter's last batch: from the rings, and how long its wait took (under rxMu).
	rings      netio.RingReader
	serveRings bool
	serveGap   int64
	// ringDrv is the Conn's rings as an event loop of the caller's drives them
	// (DriveRx, RingFD); nil for other Conns.
	ringDrv netio.RingDriver
	// pollDriven is set while a program spinning on its CQ drives the device (from the
	// tightPolls-th poll since the last blocking read until the next one): its streamed
	// posts then wait for its next poll, as a busy poller's do (doorbell), instead of
	// waking the sender goroutine for every burst.
	pollDriven atomic.Bool
	// woke is set when a completion wakes a CQ's event handler (a completion channel's
	// waiter) during a receive batch; the default-mode drive then lets that waiter run
	// before it sends the batch's ACKs (processRx).
	woke   atomic.Bool
	rxMsgs []netio.Message
	rxPkt  wire.Packet
	// views is the Conn's lending of received datagrams in place (the same-host rings),
	// released after each batch (inputBatch); nil for a Conn that copies.
	views netio.ViewReader
	acks  deviceAcks
	// The QP the last packet was for, valid while qpGone is rxQPGone: a lookup that
	// takes neither qpMu nor the map when traffic stays on one QP.
	rxQP     *QP
	rxQPGone uint64
	// A GRO run's packets for one QP are handled under one hold of its lock (rxRun:
	// inside a run; rxHeld: the QP whose mu is held until the run ends or a packet for
	// anything else comes), and a WRITE's packets under one pin of its region
	// (responder.pinned). Owned by the receive path; see holdRx.
	rxRun  bool
	rxHeld *QP
	// srRuns lists the QPs whose requester a SACK left to run at the end of the receive
	// batch (srRunLater). Owned by the receive path.
	srRuns []*QP
}

// New starts a device on cfg.Conn.
func New(cfg Config) (*Device, error) {
	if cfg.Conn == nil {
		return nil, ErrNoConn
	}
	d := &Device{
		name:     cfg.Name,
		conn:     cfg.Conn,
		local:    cfg.Conn.LocalAddr(),
		src:      cfg.Conn.SourceAddr(),
		peerPort: cfg.PeerPort,
		mtu:      cfg.MTU,
		log:      cfg.Logger,
		guid:     cfg.NodeGUID,
		qps:      make(map[uint32]*QP),
		mcast:    mcastTable{groups: make(map[[16]byte]*mcastGroup)},
		nextQPN:  randomQPN(firstQPN, lastQPN),
		qpnFirst: firstQPN,
		qpnLast:  lastQPN,
		events:   make(chan driver.AsyncEvent, 256),
		rxDone:   make(chan struct{}),
		done:     make(chan struct{}),
		rxFree:   make(chan struct{}, 1),
		rxStop:   make(chan struct{}),
	}
	if d.peerPort == 0 {
		d.peerPort = wire.UDPPort
	}
	if !d.mtu.Valid() {
		d.mtu = wire.MTU1024
	}
	if d.log == nil {
		d.log = slog.New(slog.DiscardHandler)
	}
	d.debug = d.log.Enabled(context.Background(), slog.LevelDebug)
	if cfg.Congestion.Validate() == nil {
		d.cc = cfg.Congestion
	}
	d.ect = d.cc.Enabled && d.conn.Caps().ECN
	d.selectiveRepeat = cfg.SelectiveRepeat
	d.icrcOff, _ = netio.AsICRCOffloader(d.conn)
	if p, ok := netio.AsPoller(d.conn); ok && cfg.BusyPoll {
		d.poller = p
		d.splitAcks = d.conn.Caps().SplitAcks
	} else if i, ok := netio.AsInterrupter(d.conn); ok {
		d.intr = i
		d.idlePoller, _ = netio.AsPoller(d.conn)
		d.unwatch, _ = netio.AsUnwatcher(d.conn)
		if r, ok := netio.AsRingReader(d.conn); ok && d.idlePoller != nil {
			d.rings = r
			d.ringDrv, _ = netio.AsRingDriver(d.conn)
		}
	}
	d.rxMsgs = newRxMsgs(d.conn.Caps())
	if v, ok := netio.AsViewReader(d.conn); ok && len(d.rxMsgs[0].Buf) >= wire.MaxHeaderLen+viewWhole {
		d.views = v
		v.LendViews()
	}
	d.gid = AddrToGID(d.local.Addr())
	d.txPool.New = func() any { return newTxBatch(d.conn.Caps()) }
	d.sender.init()
	go d.sender.run(&d.doorbell)
	go d.rxLoop()
	d.raise(driver.AsyncEvent{Type: driver.EventPortActive, Port: 1})
	if testHookNew != nil {
		testHookNew(d)
	}
	return d, nil
}

// testHookNew, when set (by export_test.go), sees every new device: the tests that drive
// the engine through package verbs find a QP's transport state that way.
var testHookNew func(*Device)

// Name returns the device name.
func (d *Device) Name() string { return d.name }

// resolve prepares the path to a peer before traffic flows (netio.Resolver): a
// same-host Conn makes its shared-memory rendezvous now, as an RNIC resolves a
// neighbour when a QP or an AH is given its address, so that a connection's first
// packets do not switch paths mid-stream. The packets and their semantics are the same
// on either path.
func (d *Device) resolve(dest netip.AddrPort) {
	if r, ok := netio.AsResolver(d.conn); ok && dest.Addr().IsValid() {
		r.Resolve(dest)
	}
}

// GID returns the device's RoCEv2 GID (index 0): its IP address, IPv4 mapped into IPv6.
func (d *Device) GID() [16]byte { return d.gid }

// LocalAddr returns the UDP address the device is bound to.
func (d *Device) LocalAddr() netip.AddrPort { return d.local }

// ActiveMTU returns the port's active MTU.
func (d *Device) ActiveMTU() wire.MTU { return d.mtu }

// BusyPoll reports whether the device is in busy-poll mode.
func (d *Device) BusyPoll() bool { return d.poller != nil }

// Events returns the channel of asynchronous events (ibv_get_async_event). It is
// buffered; events that find it full are counted in Counters.EventsLost. It closes when
// the device closes. An event names
// the engine's own QP, CQ or SRQ, which are the driver objects.
func (d *Device) Events() <-chan driver.AsyncEvent { return d.events }

// Query returns the device's attributes: the limits it enforces.
func (d *Device) Query() driver.DeviceAttr {
	return driver.DeviceAttr{
		FWVer: "0.1.0", NodeGUID: d.guid, SysImageGUID: d.guid, MaxMRSize: 1<<64 - 1,
		PageSizeCap: 0xfffff000, VendorID: 0xffffff, VendorPartID: 0, HWVer: 0,
		MaxQP: MaxQP, MaxQPWR: MaxQPWR, MaxSGE: MaxSGE, MaxSGERd: MaxSGE,
		MaxCQ: 1 << 14, MaxCQE: MaxCQE, MaxMR: 1<<16 - 2, MaxPD: 1 << 16,
		MaxQPRdAtom: MaxRdAtomic, MaxQPInitRdAtom: MaxRdAtomic,
		MaxSRQ: 1 << 14, MaxSRQWR: MaxQPWR, MaxSRQSGE: MaxSGE, MaxAH: 1 << 15, MaxMW: 1 << 16,
		MaxMcastGrp: MaxMcastGroups, MaxMcastQPAttach: MaxMcastQPAttach,
		MaxTotalMcastQPAttach: MaxTotalMcastQPAttach,
		MaxInlineData:         MaxInline,
		DeviceCapFlags:        driver.DeviceXRC,
		AtomicCap:             driver.AtomicHCA, PhysPortCnt: 1, MaxPKeys: 64,
	}
}

// QueryPort returns the attributes of the device's one port.
func (d *Device) QueryPort(uint8) driver.PortAttr {
	return driver.PortAttr{
		State: driver.PortActive, MaxMTU: driver.MTU4096, ActiveMTU: d.mtu, GIDTblLen: 1,
		MaxMsgSz: MaxMsgSize, PKeyTblLen: 1, PhysState: 5, LinkLayer: "Ethernet",
		ActiveSpeed: "software", ActiveWidth: "1X",
	}
}

// GIDTable returns the port's GID table: one RoCE v2 GID, the device's address.
func (d *Device) GIDTable(uint8) []driver.GIDEntry {
	return []driver.GIDEntry{{Index: 0, GID: d.gid, Type: "RoCE v2"}}
}

// Close stops the device: every QP goes to the error state (flushing its work), the socket
// is closed and the receive loop ends.
func (d *Device) Close() error {
	if d.closed.Swap(true) {
		return nil
	}
	d.qpMu.RLock()
	qps := slices.Collect(maps.Values(d.qps))
	d.qpMu.RUnlock()
	for _, qp := range qps {
		qp.Close()
	}
	d.closeMcast()
	d.doorbell.close()
	close(d.rxStop)
	err := d.conn.Close()
	<-d.rxDone
	close(d.sender.stop)
	<-d.sender.done
	d.evMu.Lock()
	d.evClosed = true
	close(d.events) // what is buffered is still read
	d.evMu.Unlock()
	close(d.done)
	return err
}

// Done is closed when the device has closed.
func (d *Device) Done() <-chan struct{} { return d.done }

// AddrToGID returns the RoCEv2 GID of an IP address (Annex A17.8: IPv4-mapped for IPv4).
func AddrToGID(a netip.Addr) [16]byte {
	if a.Is4() {
		a = netip.AddrFrom16(a.As16())
	}
	return a.As16()
}

// GIDToAddr returns the IP address a GID stands for (IPv4 unmapped).
func GIDToAddr(g [16]byte) netip.Addr {
	return netip.AddrFrom16(g).Unmap()
}

func (d *Device) lookupQP(qpn uint32) *QP {
	d.qpMu.RLock()
	qp := d.qps[qpn]
	d.qpMu.RUnlock()
	return qp
}

func (d *Device) raise(ev driver.AsyncEvent) {
	d.evMu.Lock()
	defer d.evMu.Unlock()
	if d.evClosed { // a retry timer may fire after Close
		return
	}
	select {
	case d.events <- ev:
	default:
		d.counters.EventsLost.Add(1)
	}
}

func isClosed(err error) bool { return errors.Is(err, net.ErrClosed) }

// The engine's objects are the software provider's driver objects (verbs/soft).
var (
	_ driver.Device = (*Device)(nil)
	_ driver.Leader = (*Device)(nil)
	_ driver.PD     = (*PD)(nil)
	_ driver.QP     = (*QP)(nil)
	_ driver.SRQ    = (*SRQ)(nil)
	_ driver.CQ     = (*CQ)(nil)
	_ driver.MR     = (*MR)(nil)
	_ driver.MW     = (*MW)(nil)
	_ driver.AH     = (*AH)(nil)
)

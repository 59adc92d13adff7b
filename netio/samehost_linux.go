//go:build linux

// The same-host shortcut: a Conn over the UDP backend that carries datagrams to other
// goverbs devices of this user on this host through rings in shared memory, and
// everything else through the UDP Conn it wraps.

package netio

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"github.com/goverbs/goverbs/internal/shm"
	"golang.org/x/sys/unix"
)

// sameHostConn is the shortcut. Each peer device pair has one ring pair in a memfd that
// the device which first wanted to send created and passed over the peer's rendezvous
// socket (a unix socket named after the peer's address, in shm.Dir). The socket
// connection stays open as the pair's lifeline: when either process dies or closes its
// device, the kernel closes it, the other side sees it end, drops the pair and unmaps
// its memory, and its datagrams go by UDP again.
//
// Receiving: every peer signals one eventfd of this Conn's (rxEv), and only when the
// reader said it would sleep (shm's sleeping flag); the rings are drained before the UDP
// socket is read. In the default mode a blocked ReadBatch waits in the netpoller on an
// epoll instance of this Conn's that holds the UDP receive socket and rxEv; in busy-poll
// mode PollBatch reads the rings with no syscall at all, and looks at the UDP socket
// only now and then while the rings carry the traffic (udpEvery).
type sameHostConn struct {
	inner *udpConn
	busy  bool
	// steered: only datagrams for destination QPNs with top byte 0 may reach this Conn
	// by ring (SameHostOptions.Steered); its peers learn it at the rendezvous.
	steered bool
	dir     string
	netns   string // the network namespace the device was opened in (sockPath)
	ring    int    // bytes per direction

	rxEv *shm.Eventfd
	// The default mode's wait: an epoll instance in the netpoller holding rxEv and,
	// while armed, the UDP receive socket (level-triggered both).
	ep       *os.File
	eprc     syscall.RawConn
	udpArmed bool // guarded by rmu
	// intr: Interrupt was called and no ReadBatch has returned ErrInterrupted for it yet;
	// ringWake: a ring was attached while a read may be blocked in the UDP backend's own
	// wait (ReadBatch's direct wait), which then looks again instead of returning.
	intr, ringWake atomic.Bool
	direct         atomic.Bool // a ReadBatch waits in the socket's own wait (readDirect)
	waitFn         func(fd uintptr) bool
	evs            [4]unix.EpollEvent
	udpFD          int

	rmu       sync.Mutex
	udpFirst  bool  // the rings filled the last batch: the UDP socket goes first next time
	idlePolls int   // polls since the UDP socket was last read
	ringIdle  int   // polls since a ring last gave a datagram, up to udpEvery (ringQuiet)
	udpPolls  int   // reads of the UDP socket by polls (tests count them)
	udpHot    bool  // the last UDP poll found something
	lentRead  bool  // the last poll read a record of lent datagrams (readLent)
	loans     bool  // under mu: the reader asks for loans, not bytes (PreferCopies(false))
	intrErr   error // a wait's ErrInterrupted, made at the first (waitNetpoller)
	// selfPub counts publications to the device's ring to itself (publish); selfRead is
	// its value when a read last found that ring empty (readSelf).
	selfPub  atomic.Uint64
	selfRead uint64
	// driven: an event loop of the caller's waits for the socket and rxEv (RingDriver);
	// neither is in ep any more. udpKick: the loop saw the socket readable, so the next
	// poll reads it.
	driven  bool
	udpKick atomic.Bool

	closeMu sync.RWMutex // WaitReadable's poll holds it shared; Close exclusively
	closed  atomic.Bool

	mu    sync.Mutex // guards changes to peers and rx, and pairs' installation
	peers atomic.Pointer[map[netip.AddrPort]*shPeer]
	// hint is the entry of the last destination WriteBatch looked up in peers (whose
	// entries are never replaced): a ping-pong's sends, one message a call to one
	// address, find it with a compare instead of hashing the address into the map,
	// a per-message cost of the wrapper to a remote peer.
	hint   atomic.Pointer[shPeer]
	rx     atomic.Pointer[[]*shPair]
	l      *shm.Listener
	dialCh chan *shPeer
	done   chan struct{}

	self *shPair // the ring of datagrams the device sends to its own address (installSelf)

	// Views (ViewReader): records lent to the reader in place. viewMu is held from a
	// read that lends until ReleaseViews, and by whatever unmaps a ring (finalize), so
	// that no ring is unmapped under the reader. lent and lentBytes are the reader's.
	fromRings atomic.Bool // the last read took something from a ring (RingReader)
	views     atomic.Bool
	lending   atomic.Bool
	viewMu    sync.Mutex
	lent      []*shPair
	lentBytes int

	// graves: pairs finalize took off the read list and left to the reader to unmap
	// (reapLocked), under mu; graved says there are some.
	graves []*shPair
	graved atomic.Bool

	// offloadGen changes when a pair is installed or torn down (ICRCOffloadGen).
	offloadGen atomic.Uint64

	txPackets, rxPackets, corrupt, ringFull, fallbacks atomic.Uint64
	lentTx, lentRx, unlent                             atomic.Uint64 // Message.Loans: samehost_lend_linux.go
	loansOut                                           []Lender      // pins lent by the last read (readLent), under the lease
	corruptSeen                                        uint64        // under rmu: the rings' counts already added
}

// shPeer is what WriteBatch knows of one destination address.
type shPeer struct {
	addr    netip.AddrPort
	pair    atomic.Pointer[shPair]
	dialing atomic.Bool
	holding atomic.Bool // no rendezvous until dialRetry after the last failure (holdOff)
}

// shPair is one peer device's ring pair.
type shPair struct {
	peerLocal netip.AddrPort // where the peer listens: the destination datagrams name
	peerSrc   netip.AddrPort // where its datagrams come from (its SourceAddr)
	initiator netip.AddrPort // LocalAddr of the side that created it (simultaneous dials)
	region    *shm.Region
	uc        *net.UnixConn
	peerEv    *shm.Eventfd
	// lowOnly: the far end's socket is Steered, so only datagrams whose BTH destination
	// QPN has top byte 0 go into tx; the others go by UDP for the kernel to steer.
	lowOnly bool
	// unsealed: the far end reads tx without checking ICRCs (helloFlagUnsealed), so
	// datagrams may go into it unsealed (OffloadsICRC).
	unsealed bool
	// txq, rxq: the loan queues of tx and rx when both ends of the pair are in this
	// process (samePeerProcess; the device's ring to itself), nil otherwise: only then
	// may a record name a payload in the sender's memory (Message.Loans). token names
	// the queues in localRegions while this side, their creator, has the pair.
	txq, rxq *loanQueue
	token    uint64
	lentNext int // the entry of rx's next record of lent datagrams a read goes on from (readLent)

	txMu sync.Mutex
	tx   *shm.RecordProducer
	rxMu sync.Mutex
	rx   *shm.RecordConsumer
	// closing: the pair takes no more datagrams (its lifeline ended, or it lost to
	// another pair); what its ring holds is still read. dead: its memory is unmapped
	// (under the reader's rmu, txMu and rxMu: a read holds rmu, a write txMu, a wait
	// rxMu; reapLocked).
	closing atomic.Bool
	dead    atomic.Bool
	// gone is this side's word in the region's header, peerGone the far end's: a side
	// stores 1 in its own as it drops the pair (teardown), before its device's UDP
	// socket closes, and a writer that finds the far end's set sends by UDP instead.
	// The lifeline's end says the same, but through a goroutine of the far end's that
	// may run late: a device opened at once on the address of one just closed (rdmanet
	// opens one per connection) sent a CM request whose reply went into the closed
	// device's ring, and a lost REP costs the CM's retry timeout, seconds
	// (TestCloseReleasesDevices, once in about 30 runs under load). A peer that sets
	// ours only sends itself to UDP.
	gone, peerGone *uint32
	goneSeen       atomic.Bool // the writer has handed the pair to teardown for peerGone
	// live: both ends have the pair (the dialer heard yes, the acceptor said it), so a
	// lifeline message reaches a side that reads it (watch).
	live atomic.Bool
	// replaced: the pair lost to another between the same two devices (simultaneous
	// dials: install), and both ends know it: the end that dropped it said so on the
	// lifeline (lifelineReplaced, replace), the other read it (watch). Its teardown
	// then leaves the gone word alone: the end that was told keeps writing into the
	// pair until it installs the winner, and the other still reads it while it drains.
	replaced atomic.Bool
}

// goneWords points p's gone flags into the region's header, mem: one word per side, on
// cache lines of their own (the writer reads the far end's at every write), the side
// that reads ring i (0 the acceptor, 1 the initiator) at goneOff+64*i.
func (p *shPair) goneWords(mem []byte, rxRing int) {
	word := func(i int) *uint32 { return (*uint32)(unsafe.Pointer(&mem[goneOff+64*i])) }
	p.gone, p.peerGone = word(rxRing), word(1-rxRing)
}

// Region layout: a header page, then ring 0 (initiator to acceptor), then ring 1.
const (
	regionHdr   = 4096
	goneOff     = 64 // shPair.goneWords: two words, 64 bytes apart, zero in a new region
	regionMagic = "GVSHMR01"
	// A hello or reply of version 01 carries no flags; version 02 has a flags word
	// (helloFlagSteered), sent only by a Steered Conn, so that a build that knows only
	// 01 refuses it and the pair falls back to UDP instead of ignoring the restriction.
	helloMagic  = "GVSHMH01"
	replyMagic  = "GVSHMA01"
	helloMagic2 = "GVSHMH02"
	replyMagic2 = "GVSHMA02"
	helloLen    = 56
	minRing     = 64 << 10
	maxRing     = 64 << 20
)

// regionSize is the region's size, rounded up to pages as shm.Create rounds it.
func regionSize(ring int) int {
	page := os.Getpagesize()
	return (regionHdr + 2*shm.RecordRingSize(ring) + page - 1) &^ (page - 1)
}

func ringMem(mem []byte, ring, i int) []byte {
	off := regionHdr + i*shm.RecordRingSize(ring)
	return mem[off : off+shm.RecordRingSize(ring)]
}

// dialRetry is how long after a failed rendezvous a destination is tried again, so that
// a peer device opened later is found, at the price of one failed connect(2) a second
// (in the background) per destination that is not one.
const dialRetry = time.Second

// handshakeTimeout bounds a rendezvous.
const handshakeTimeout = 2 * time.Second

// resolveWait is how long Resolve waits for a rendezvous it started or found under way.
// A live peer's answer takes microseconds, tens of milliseconds on a machine loaded
// with race-detector tests; a peer that takes longer is reached by UDP until it
// answers. Generous, since a connection's first packets on UDP and the rest through
// the rings can arrive out of order (recovered, at a retransmission's price), and tests
// that a run took the rings throughout (capitest's TestSameHostByDefault) would flake.
const resolveWait = 500 * time.Millisecond

// ListenSameHost wraps inner, a UDP Conn (ListenUDP, either mode), with the same-host
// shortcut: it serves a rendezvous socket for inner's LocalAddr, and from then on
// datagrams to a peer address that another goverbs device of this user serves on this
// host go through shared memory, everything else (and anything the peer refuses)
// through inner. The returned Conn owns inner. ErrSameHostUnsupported: inner is not the
// UDP backend; other errors: the rendezvous socket could not be made (the caller goes on
// with inner).
func ListenSameHost(inner Conn, opts SameHostOptions) (Conn, error) {
	u, ok := inner.(*udpConn)
	if !ok {
		return nil, ErrSameHostUnsupported
	}
	ring := opts.RingSize
	if ring == 0 {
		ring = DefaultRingSize
	}
	if ring < minRing || ring > maxRing || ring&(ring-1) != 0 {
		return nil, fmt.Errorf("netio: same-host ring size %d: want a power of two in %d..%d", ring, minRing, maxRing)
	}
	dir := opts.Dir
	if dir == "" {
		dir = shm.Dir()
	}
	c := &sameHostConn{inner: u, busy: u.rfd != nil, steered: opts.Steered, dir: dir, netns: netnsTag(), ring: ring,
		dialCh: make(chan *shPeer, 64), done: make(chan struct{}), udpFD: -1, ringIdle: udpEvery}
	peers := map[netip.AddrPort]*shPeer{}
	c.peers.Store(&peers)
	c.rx.Store(new([]*shPair))
	var err error
	// Out of Go's netpoller: it is waited for in ep (itself in the netpoller), in
	// poll(2), or in an event loop's epoll set (RingDriver), never by Eventfd.Wait, and
	// a descriptor in the netpoller's set would wake a runtime thread asleep in
	// epoll_pwait at every producer's write, for nobody.
	if c.rxEv, err = shm.NewUnwatchedEventfd(); err != nil {
		return nil, err
	}
	_ = u.rc.Control(func(fd uintptr) { c.udpFD = int(fd) })
	if !c.busy {
		if err := c.initEpoll(); err != nil {
			c.rxEv.Close()
			return nil, err
		}
		// The UDP Conn's own epoll instance is not read any more: leave it disarmed, so
		// that its datagrams wake no netpoller thread for nothing (Unwatcher).
		u.Unwatch()
	}
	if err := c.installSelf(); err != nil {
		c.closeWaiters()
		return nil, err
	}
	if c.l, err = shm.Listen(c.sockPath(u.LocalAddr())); err != nil {
		c.teardown(c.self, false)
		c.closeWaiters()
		return nil, err
	}
	go c.acceptLoop()
	go c.dialLoop()
	if _, swept := sweptDirs.LoadOrStore(c.dir, true); !swept {
		go shm.SweepStale(c.dir, "shm-", staleAge)
	}
	return c, nil
}

// sweptDirs holds the rendezvous directories this process swept: once each, at its
// first device's opening, in the background (a directory of a thousand files takes a
// few milliseconds of connect(2) calls).
var sweptDirs sync.Map

// staleAge is how old a rendezvous file must be before a sweep may judge it stale.
const staleAge = time.Minute

func (c *sameHostConn) initEpoll() error {
	epfd, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	if err != nil {
		return fmt.Errorf("netio: epoll_create1: %w", err)
	}
	unix.SetNonblock(epfd, true)
	ev := unix.EpollEvent{Events: unix.EPOLLIN, Fd: int32(c.rxEv.FD())}
	if err := unix.EpollCtl(epfd, unix.EPOLL_CTL_ADD, c.rxEv.FD(), &ev); err != nil {
		unix.Close(epfd)
		return fmt.Errorf("netio: epoll_ctl: %w", err)
	}
	c.ep = os.NewFile(uintptr(epfd), "netio-samehost-epoll")
	if c.eprc, err = c.ep.SyscallConn(); err != nil {
		c.ep.Close()
		return err
	}
	c.waitFn = c.waitOnce
	return nil
}

// sockPath is the rendezvous socket of the device listening on a. It names the network
// namespace too: devices in two namespaces of one host (joined by a veth pair, say) are
// on two hosts as far as their user is concerned, whose path between them (its MTU, its
// loss, its firewall) is the point, so they never take the shortcut to each other.
func (c *sameHostConn) sockPath(a netip.AddrPort) string {
	a = netip.AddrPortFrom(a.Addr().Unmap(), a.Port())
	return filepath.Join(c.dir, "shm-"+c.netns+"-"+a.String()+".sock")
}

// netnsTag names the calling thread's network namespace by its inode (namespaces(7)): a
// program may open a device from a thread it moved into another namespace. "0" where it
// cannot be read, which only ever pairs with another device that could not read its own.
func netnsTag() string {
	var st unix.Stat_t
	if err := unix.Stat("/proc/thread-self/ns/net", &st); err != nil {
		return "0"
	}
	return strconv.FormatUint(st.Ino, 10)
}

func (c *sameHostConn) LocalAddr() netip.AddrPort  { return c.inner.LocalAddr() }
func (c *sameHostConn) SourceAddr() netip.AddrPort { return c.inner.SourceAddr() }

// SocketFD is the UDP socket's descriptor (netio.SocketFD): goverbs serve attaches its
// SO_REUSEPORT steering to it. It stays the Conn's.
func (c *sameHostConn) SocketFD() int { return c.inner.RecvFD() }

func (c *sameHostConn) Caps() Caps {
	caps := c.inner.Caps()
	caps.SameHost = true
	return caps
}

// SameHostStats reports the shortcut's counters (sameHoster).
func (c *sameHostConn) SameHostStats() SameHostStats {
	peers := 0
	for _, p := range *c.rx.Load() {
		if p != c.self { // not the device's ring to itself (installSelf)
			peers++
		}
	}
	return SameHostStats{
		Peers:     peers,
		TxPackets: c.txPackets.Load(),
		RxPackets: c.rxPackets.Load(),
		Corrupt:   c.corrupt.Load(),
		RingFull:  c.ringFull.Load(),
		Fallbacks: c.fallbacks.Load(),
		LentTx:    c.lentTx.Load(),
		LentRx:    c.lentRx.Load(),
		Unlent:    c.unlent.Load(),
	}
}

// ---- sending ----

// WriteBatch sends each message through its destination's ring when the destination
// has one, and runs of the others through the UDP Conn.
func (c *sameHostConn) WriteBatch(msgs []Message) (int, error) {
	if c.closed.Load() {
		return 0, fmt.Errorf("netio: write: %w", net.ErrClosed)
	}
	peers := *c.peers.Load()
	var first *SendError
	var last *shPair // the pair whose ring has records not yet published
	var ringed uint64
	start := 0 // of the current run of UDP messages
	flushUDP := func(end int) (bool, error) {
		if start == end {
			return true, nil
		}
		n, err := c.inner.WriteBatch(msgs[start:end])
		if err != nil {
			var se *SendError
			if errors.As(err, &se) && n == end-start {
				if first == nil {
					e := *se
					e.Index += start
					first = &e
				} else {
					first.Skipped += se.Skipped
				}
				return true, nil
			}
			return false, err
		}
		return true, nil
	}
	// A batch mostly goes to one destination: its entry is looked up once per run of
	// messages to the same address, not per message (the map's hash of a netip.AddrPort
	// was a per-datagram cost of the remote UDP path too).
	var lastAddr netip.AddrPort
	var lastE *shPeer
	looked := false
	for i := range msgs {
		m := &msgs[i]
		var p *shPair
		e := lastE
		if !looked || m.Addr != lastAddr {
			if h := c.hint.Load(); h != nil && h.addr == m.Addr {
				e = h
			} else if e = peers[m.Addr]; e != nil {
				c.hint.Store(e)
			}
			if e == nil && c.wantsRing(m.Addr) {
				// Once per run: peers is a snapshot and would not show the new entry to
				// the run's other messages either; they go by UDP, as before.
				c.learn(m.Addr)
			}
			lastAddr, lastE, looked = m.Addr, e, true
		}
		if e != nil {
			p = e.pair.Load()
			if p == nil {
				c.maybeDial(e)
			}
		}
		if p == nil || p.closing.Load() || p.lowOnly && qpnSteered(m) {
			if m.SameHost {
				sealICRC(m, c.inner.SourceAddr()) // offloaded, but its pair is gone
			}
			continue // part of a UDP run
		}
		if m.SameHost && !p.unsealed {
			sealICRC(m, c.inner.SourceAddr()) // the peer checks ICRCs (a build before helloFlagUnsealed)
		}
		if ok, err := flushUDP(i); !ok {
			if last != nil {
				c.publish(last)
			}
			return start, err
		}
		start = i + 1
		if last != p {
			if last != nil {
				c.publish(last)
			}
			last = p
			p.txMu.Lock()
		}
		if !c.ringWrite(p, m) {
			// The pair died under us: this message goes by UDP.
			c.publish(last)
			last = nil
			if m.SameHost {
				sealICRC(m, c.inner.SourceAddr())
			}
			if _, err := c.inner.WriteBatch(msgs[i : i+1]); err != nil && !errors.As(err, new(*SendError)) {
				return i, err
			}
			continue
		}
		ringed += uint64(m.NumSegments())
	}
	if last != nil {
		c.publish(last)
	}
	if ringed > 0 {
		c.txPackets.Add(ringed)
	}
	if ok, err := flushUDP(len(msgs)); !ok {
		return start, err
	}
	if first != nil {
		return len(msgs), first
	}
	return len(msgs), nil
}

// OffloadsICRC reports which datagrams to dst go through a ring whose reader takes them
// unsealed (netio.ICRCOffloader): all of them, or, to a Steered peer, those for QPNs of
// top byte 0, its engine's; the others go by UDP (WriteBatch), and their sender seals
// them, so that no copy is summed here.
func (c *sameHostConn) OffloadsICRC(dst netip.AddrPort) ICRCOffload {
	e := c.hint.Load()
	if e == nil || e.addr != dst {
		if e = (*c.peers.Load())[dst]; e == nil {
			return OffloadNone
		}
	}
	p := e.pair.Load()
	switch {
	case p == nil || !p.unsealed || p.closing.Load() || p.peerGone != nil && atomic.LoadUint32(p.peerGone) != 0:
		return OffloadNone
	case p.lowOnly:
		return OffloadLowQPNs
	}
	return OffloadAll
}

// ICRCOffloadGen changes when a pair is installed or torn down (netio.ICRCOffloader).
func (c *sameHostConn) ICRCOffloadGen() uint64 { return c.offloadGen.Load() }

// bthQPNHi is the offset of the BTH destination QPN's top byte in a RoCEv2 datagram
// (the UDP payload): opcode, flags, P_Key (2), a reserved byte, then the 24-bit QPN.
const bthQPNHi = 5

// qpnSteered reports whether m's datagrams are for a QPN with a nonzero top byte, which a
// Steered peer's engine does not serve. One byte of the first datagram's header: the
// engine never joins datagrams for QPNs of different top bytes in one GSO run
// (engine.Device.emit), and its header starts Buf, or Iov[0] when the message gathers.
// A datagram too short to have a BTH is left to the ring (it is nobody's anyway).
func qpnSteered(m *Message) bool {
	b := m.Buf
	if m.Iov != nil {
		b = m.Iov[0]
	}
	return len(b) > bthQPNHi && b[bthQPNHi] != 0
}

// publish makes what was written to p's ring visible, wakes the peer if it sleeps, and
// lets go of p.txMu.
func (c *sameHostConn) publish(p *shPair) {
	if p.dead.Load() {
		p.txMu.Unlock()
		return
	}
	sleeping := p.tx.Publish()
	if p == c.self {
		c.selfPub.Add(1) // after the records are visible: the reader looks (readSelf)
	}
	if sleeping {
		p.peerEv.Signal()
		if p == c.self && c.direct.Load() {
			// this Conn's own reader, waiting for the socket alone (readDirect)
			c.ringWake.Store(true)
			c.inner.Interrupt()
		}
	}
	p.txMu.Unlock()
}

// ringFullWait bounds how long a sender waits for a peer to make room in its ring
// before it drops the datagram, as a full socket buffer drops it (RC retransmits it).
// It must stay short: the sender may be the device's receive path sending an ACK, and
// two devices whose receive paths both wait on each other's full ring would each stall
// the other for the whole wait, datagram after datagram (seen in rdmanet's soak with a
// wait of milliseconds).
const ringFullWait = 50 * time.Microsecond

// ringHdr is the netio header before each ring record's datagrams: the run's segment
// size (uint32, 0 for a single datagram), the datagrams' ECN codepoint (one byte, the IP
// header's two bits, which the ring carries as the socket's TOS/traffic class would),
// their traffic class's DSCP (one byte, Message.TrafficClass) and 2 reserved bytes. A GSO run crosses the
// ring as one record and arrives as UDP GRO would deliver it, one Message with SegSize,
// so that the receiver (and a pcap Tee) numbers its segments as over the socket.
const ringHdr = 8

// ringWrite writes m's datagrams into p's ring; p.txMu is held. It reports false if the
// pair is closing (nothing was written).
func (c *sameHostConn) ringWrite(p *shPair, m *Message) bool {
	if p.closing.Load() || p.dead.Load() {
		return false
	}
	if p.peerGone != nil && atomic.LoadUint32(p.peerGone) != 0 {
		// The far end dropped the pair (its device is closing): nobody reads this ring.
		if !p.goneSeen.Swap(true) {
			go c.teardown(p, true)
		}
		return false
	}
	if lendable(p, m) {
		c.ringWriteLent(p, m)
		return true
	}
	chunk, seg := m.N, 0
	if m.SegSize > 0 && m.N > m.SegSize {
		// As many segments as one GSO send carries (each chunk numbered from 0, as the
		// UDP backend's sends are), and as a record holds.
		seg = m.SegSize
		k := min(gsoRunSegments(seg, MaxGSOSegments, maxGSOBytes), (shm.MaxRecord(c.ring)-ringHdr)/seg)
		chunk = max(k, 1) * seg
	}
	for off := 0; ; off += chunk {
		n := min(chunk, m.N-off)
		s := seg
		if n <= seg {
			s = 0 // a run's last chunk of one segment is a single datagram
		}
		if !c.ringRecord(p, m, off, n, s) || off+n >= m.N {
			return true
		}
	}
}

// ringRecord writes bytes [off, off+n) of m's data into p's ring as one record: a
// datagram, or with seg a run of datagrams of seg bytes. It reports false when the ring
// is found corrupt (the pair is being torn down; nothing more goes into it). p.txMu is
// held.
func (c *sameHostConn) ringRecord(p *shPair, m *Message, off, n, seg int) bool {
	buf, ok := c.reserve(p, ringHdr+n)
	if buf != nil {
		binary.LittleEndian.PutUint32(buf, uint32(seg))
		buf[4], buf[5], buf[6], buf[7] = byte(m.ECN&0b11), m.TrafficClass&^ECNMask, 0, 0
		m.CopyData(buf[ringHdr:ringHdr+n], off)
		p.tx.Commit()
	}
	return ok
}

// reserve returns room for a record of size bytes in p's ring, waiting for it up to
// ringFullWait, or nil when the ring stayed full (the datagram is dropped and counted,
// as a full socket buffer drops it). ok is false when the ring is corrupt: the peer
// scribbled on its tail, and the pair is torn down. p.txMu is held.
func (c *sameHostConn) reserve(p *shPair, size int) (buf []byte, ok bool) {
	buf, ok, err := p.tx.Reserve(size)
	if err != nil {
		c.corrupt.Add(1)
		go c.teardown(p, false)
		return nil, false
	}
	if !ok && c.waitRoom(p, size) {
		buf, ok, _ = p.tx.Reserve(size)
	}
	if !ok {
		c.ringFull.Add(1)
		return nil, true
	}
	return buf, true
}

// waitRoom publishes what is written (waking the peer) and yields until p's ring has
// room for n bytes, at most ringFullWait; false if it never had.
func (c *sameHostConn) waitRoom(p *shPair, n int) bool {
	if p.tx.Publish() {
		p.peerEv.Signal()
	}
	if p == c.self {
		c.selfPub.Add(1) // the reader must look, or the room never comes (readSelf)
	}
	deadline := time.Now().Add(ringFullWait)
	for i := 0; ; i++ {
		if p.closing.Load() || c.closed.Load() {
			return false
		}
		_, ok, err := p.tx.Reserve(n)
		if err != nil {
			return false
		}
		if ok {
			return true // the caller's Reserve writes the same header at the same place
		}
		if i%8 == 7 && time.Now().After(deadline) {
			return false
		}
		runtime.Gosched()
	}
}

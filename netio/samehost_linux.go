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
	dir   string
	netns string // the network namespace the device was opened in (sockPath)
	ring  int    // bytes per direction

	rxEv *shm.Eventfd
	// The default mode's wait: an epoll instance in the netpoller holding rxEv and,
	// while armed, the UDP receive socket (level-triggered both).
	ep       *os.File
	eprc     syscall.RawConn
	udpArmed bool // guarded by rmu
	waitFn   func(fd uintptr) bool
	evs      [4]unix.EpollEvent
	udpFD    int

	rmu       sync.Mutex
	udpFirst  bool // the rings filled the last batch: the UDP socket goes first next time
	idlePolls int  // polls since the UDP socket was last read
	udpHot    bool // the last UDP poll found something

	closeMu sync.RWMutex // WaitReadable's poll holds it shared; Close exclusively
	closed  atomic.Bool

	mu     sync.Mutex // guards changes to peers and rx, and pairs' installation
	peers  atomic.Pointer[map[netip.AddrPort]*shPeer]
	rx     atomic.Pointer[[]*shPair]
	l      *shm.Listener
	dialCh chan *shPeer
	done   chan struct{}

	txPackets, rxPackets, corrupt, ringFull, fallbacks atomic.Uint64
	corruptSeen                                        uint64 // under rmu: the rings' counts already added
}

// shPeer is what WriteBatch knows of one destination address.
type shPeer struct {
	addr    netip.AddrPort
	pair    atomic.Pointer[shPair]
	dialing atomic.Bool
	retryAt atomic.Int64 // unix nanoseconds: no rendezvous before
}

// shPair is one peer device's ring pair.
type shPair struct {
	peerLocal netip.AddrPort // where the peer listens: the destination datagrams name
	peerSrc   netip.AddrPort // where its datagrams come from (its SourceAddr)
	initiator netip.AddrPort // LocalAddr of the side that created it (simultaneous dials)
	region    *shm.Region
	uc        *net.UnixConn
	peerEv    *shm.Eventfd

	txMu sync.Mutex
	tx   *shm.RecordProducer
	rxMu sync.Mutex
	rx   *shm.RecordConsumer
	// closing: the pair takes no more datagrams (its lifeline ended, or it lost to
	// another pair); what its ring holds is still read. dead: its memory is unmapped
	// (under txMu and rxMu, which every access holds).
	closing atomic.Bool
	dead    atomic.Bool
}

// Region layout: a header page, then ring 0 (initiator to acceptor), then ring 1.
const (
	regionHdr   = 4096
	regionMagic = "GVSHMR01"
	helloMagic  = "GVSHMH01"
	replyMagic  = "GVSHMA01"
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
	c := &sameHostConn{inner: u, busy: u.rfd != nil, dir: dir, netns: netnsTag(), ring: ring,
		dialCh: make(chan *shPeer, 64), done: make(chan struct{}), udpFD: -1}
	peers := map[netip.AddrPort]*shPeer{}
	c.peers.Store(&peers)
	c.rx.Store(new([]*shPair))
	var err error
	if c.rxEv, err = shm.NewEventfd(); err != nil {
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
	if c.l, err = shm.Listen(c.sockPath(u.LocalAddr())); err != nil {
		c.closeWaiters()
		return nil, err
	}
	go c.acceptLoop()
	go c.dialLoop()
	return c, nil
}

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

func (c *sameHostConn) Caps() Caps {
	caps := c.inner.Caps()
	caps.SameHost = true
	return caps
}

// SameHostStats reports the shortcut's counters (sameHoster).
func (c *sameHostConn) SameHostStats() SameHostStats {
	return SameHostStats{
		Peers:     len(*c.rx.Load()),
		TxPackets: c.txPackets.Load(),
		RxPackets: c.rxPackets.Load(),
		Corrupt:   c.corrupt.Load(),
		RingFull:  c.ringFull.Load(),
		Fallbacks: c.fallbacks.Load(),
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
	var now int64
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
	for i := range msgs {
		m := &msgs[i]
		var p *shPair
		if e := peers[m.Addr]; e != nil {
			p = e.pair.Load()
			if p == nil {
				if now == 0 {
					now = time.Now().UnixNano()
				}
				c.maybeDial(e, now)
			}
		} else if c.wantsRing(m.Addr) {
			c.learn(m.Addr)
		}
		if p == nil || p.closing.Load() {
			continue // part of a UDP run
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

// publish makes what was written to p's ring visible, wakes the peer if it sleeps, and
// lets go of p.txMu.
func (c *sameHostConn) publish(p *shPair) {
	if !p.dead.Load() && p.tx.Publish() {
		p.peerEv.Signal()
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
// and 3 reserved bytes. A GSO run crosses the
// ring as one record and arrives as UDP GRO would deliver it, one Message with SegSize,
// so that the receiver (and a pcap Tee) numbers its segments as over the socket.
const ringHdr = 8

// ringWrite writes m's datagrams into p's ring; p.txMu is held. It reports false if the
// pair is closing (nothing was written).
func (c *sameHostConn) ringWrite(p *shPair, m *Message) bool {
	if p.closing.Load() || p.dead.Load() {
		return false
	}
	chunk, seg := m.N, 0
	if m.SegSize > 0 && m.N > m.SegSize {
		// As many segments as one GSO send carries (each chunk numbered from 0, as the
		// UDP backend's sends are), and as a record holds.
		seg = m.SegSize
		k := min(gsoRunSegments(seg, MaxGSOSegments, maxGSOBytes), (shm.MaxRecord(c.ring)-ringHdr)/seg)
		chunk = max(k, 1) * seg
	}
	for off := 0; ; {
		n := min(chunk, m.N-off)
		s := seg
		if n <= seg {
			s = 0 // a run's last chunk of one segment is a single datagram
		}
		buf, ok, err := p.tx.Reserve(ringHdr + n)
		if err != nil {
			c.corrupt.Add(1)
			go c.teardown(p, false) // the peer scribbled on its tail: no more of its ring
			return true
		}
		if !ok && c.waitRoom(p, ringHdr+n) {
			buf, ok, _ = p.tx.Reserve(ringHdr + n)
		}
		if ok {
			binary.LittleEndian.PutUint32(buf, uint32(s))
			buf[4], buf[5], buf[6], buf[7] = byte(m.ECN&0b11), 0, 0, 0
			if m.Iov == nil {
				copy(buf[ringHdr:], m.Buf[off:off+n])
			} else {
				gather(buf[ringHdr:], m.Iov, off)
			}
			p.tx.Commit()
		} else {
			c.ringFull.Add(1)
		}
		if off += n; off >= m.N {
			break
		}
	}
	return true
}

// waitRoom publishes what is written (waking the peer) and yields until p's ring has
// room for n bytes, at most ringFullWait; false if it never had.
func (c *sameHostConn) waitRoom(p *shPair, n int) bool {
	if p.tx.Publish() {
		p.peerEv.Signal()
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

// gather copies into dst the bytes of the concatenation of iov from offset off.
func gather(dst []byte, iov [][]byte, off int) {
	for _, v := range iov {
		if off >= len(v) {
			off -= len(v)
			continue
		}
		k := copy(dst, v[off:])
		dst, off = dst[k:], 0
		if len(dst) == 0 {
			return
		}
	}
}

// wantsRing reports whether a destination may be a same-host device: a unicast
// address other than this Conn's own.
func (c *sameHostConn) wantsRing(a netip.AddrPort) bool {
	ip := a.Addr()
	return ip.IsValid() && !ip.IsMulticast() && a != c.inner.LocalAddr() && !c.closed.Load()
}

// learn adds a destination WriteBatch has not seen and starts a rendezvous with it.
// Once per destination: the map is copied on write so that lookups take no lock.
func (c *sameHostConn) learn(a netip.AddrPort) {
	c.maybeDial(c.entry(a), time.Now().UnixNano())
}

// entry returns a's entry, adding it if it is new.
func (c *sameHostConn) entry(a netip.AddrPort) *shPeer {
	c.mu.Lock()
	old := *c.peers.Load()
	e := old[a]
	if e == nil {
		m := make(map[netip.AddrPort]*shPeer, len(old)+1)
		for k, v := range old {
			m[k] = v
		}
		e = &shPeer{addr: a}
		m[a] = e
		c.peers.Store(&m)
	}
	c.mu.Unlock()
	return e
}

// Resolve makes the rendezvous with dest now, if dest may be a same-host device and
// none is made or failed recently (Resolver).
func (c *sameHostConn) Resolve(dest netip.AddrPort) {
	if !c.wantsRing(dest) {
		return
	}
	e := c.entry(dest)
	deadline := time.Now().Add(handshakeTimeout)
	for {
		if e.pair.Load() != nil || time.Now().UnixNano() < e.retryAt.Load() {
			return
		}
		if e.dialing.CompareAndSwap(false, true) {
			break
		}
		if time.Now().After(deadline) {
			return
		}
		time.Sleep(100 * time.Microsecond) // the dialer is at it: wait for its outcome
	}
	if e.pair.Load() == nil {
		if err := c.dial(e); err != nil {
			e.retryAt.Store(time.Now().Add(dialRetry).UnixNano())
		}
	}
	e.dialing.Store(false)
}

// maybeDial hands e to the dialer unless a rendezvous is under way or failed recently.
func (c *sameHostConn) maybeDial(e *shPeer, now int64) {
	if now < e.retryAt.Load() || e.dialing.Load() || !e.dialing.CompareAndSwap(false, true) {
		return
	}
	select {
	case c.dialCh <- e:
	default:
		e.dialing.Store(false)
	}
}

// ---- receiving ----

// udpEvery is how many polls of the rings come between two reads of the UDP socket
// while peers reach this Conn through rings and the socket has been quiet: a poll of
// the rings costs no syscall, a recvmmsg one, and a spinning ping-pong or a stream over
// the rings would otherwise pay it on every poll.
const udpEvery = 32

// ReadBatch reads from the rings, then the UDP socket, and waits for either when both
// are empty.
func (c *sameHostConn) ReadBatch(msgs []Message) (int, error) {
	if len(msgs) == 0 {
		return 0, nil
	}
	c.rmu.Lock()
	defer c.rmu.Unlock()
	for {
		n, err := c.pollLocked(msgs, true)
		if n > 0 || err != nil {
			return n, err
		}
		if c.closed.Load() {
			return 0, c.inner.readErr(net.ErrClosed)
		}
		rx := *c.rx.Load()
		if !c.sleep(rx) {
			continue
		}
		if c.busy {
			_, err = c.waitPoll(-1)
		} else {
			err = c.waitNetpoller()
		}
		awake(rx)
		if err != nil {
			return 0, err
		}
	}
}

// PollBatch reads what the rings and the socket hold now (Poller).
func (c *sameHostConn) PollBatch(msgs []Message) (int, error) {
	if len(msgs) == 0 {
		return 0, nil
	}
	c.rmu.Lock()
	n, err := c.pollLocked(msgs, false)
	c.rmu.Unlock()
	return n, err
}

// pollLocked fills msgs from the rings and, when room is left, the UDP socket; c.rmu is
// held. always: read the socket every time (a blocking read about to sleep), not only
// every udpEvery empty polls.
func (c *sameHostConn) pollLocked(msgs []Message, always bool) (int, error) {
	n := 0
	rx := *c.rx.Load()
	if c.udpFirst || len(rx) == 0 {
		k, err := c.pollUDP(msgs)
		if err != nil {
			return 0, err
		}
		n = k
		c.udpFirst = false
	}
	ringed := 0
	for _, p := range rx {
		if n == len(msgs) {
			break
		}
		k, pkts := c.readRing(p, msgs[n:])
		n += k
		ringed += k
		if pkts > 0 {
			c.rxPackets.Add(uint64(pkts))
		}
	}
	if n == len(msgs) {
		c.udpFirst = ringed > 0 // the rings had more than a batch: the socket goes first next
		return n, nil
	}
	// The socket is read when it had traffic last time, when a blocking read found the
	// rings empty and is about to sleep, and otherwise every udpEvery polls, so that a
	// stream through the rings neither pays a syscall per poll nor starves the socket.
	c.idlePolls++
	if len(rx) > 0 && (c.udpHot || always && ringed == 0 || c.idlePolls >= udpEvery) {
		c.idlePolls = 0
		k, err := c.pollUDP(msgs[n:])
		if err != nil {
			if n > 0 {
				return n, nil
			}
			return 0, err
		}
		n += k
	}
	return n, nil
}

func (c *sameHostConn) pollUDP(msgs []Message) (int, error) {
	k, err := c.inner.PollBatch(msgs)
	c.udpHot = k > 0
	return k, err
}

// readRing copies up to len(msgs) messages out of p's ring and returns how many, and
// how many datagrams they hold.
func (c *sameHostConn) readRing(p *shPair, msgs []Message) (n, pkts int) {
	if !p.rxMu.TryLock() {
		return 0, 0 // being torn down
	}
	defer p.rxMu.Unlock()
	if p.dead.Load() {
		return 0, 0
	}
	gro := c.inner.gro.Load()
	defer p.rx.Publish()
	for n < len(msgs) {
		rec, err := p.rx.Next()
		if err != nil {
			c.corrupt.Add(1)
			break // what was published is dropped; a later poll reads what comes after
		}
		if rec == nil {
			break
		}
		if len(rec) < ringHdr {
			c.corrupt.Add(1)
			p.rx.Release()
			continue
		}
		seg := int(binary.LittleEndian.Uint32(rec)) // read once: the peer may change it
		ecn := ECN(rec[4] & 0b11)
		data := rec[ringHdr:]
		m := &msgs[n]
		switch {
		case seg <= 0 || seg >= len(data):
			m.N = copy(m.Buf, data) // a datagram longer than the buffer is cut, as recvmmsg cuts it
			m.SegSize = 0
			pkts++
		case gro && len(m.Buf) >= len(data):
			m.N = copy(m.Buf, data)
			m.SegSize = seg
			pkts += (len(data) + seg - 1) / seg
		default: // a run, to a reader without GRO: its datagrams one by one
			if (len(data)+seg-1)/seg > len(msgs)-n && n > 0 {
				return n, pkts // the next call takes it whole
			}
			for off := 0; off < len(data) && n < len(msgs); off += seg {
				m = &msgs[n]
				m.N = copy(m.Buf, data[off:min(off+seg, len(data))])
				m.Addr, m.SegSize, m.Iov, m.ECN = p.peerSrc, 0, nil, ecn
				n++
				pkts++
			}
			p.rx.Release()
			continue
		}
		m.Addr, m.Iov, m.ECN = p.peerSrc, nil, ecn
		p.rx.Release()
		n++
	}
	return n, pkts
}

// sleep tells every ring's producer that the reader may wait, then looks once more: it
// reports false (and takes the word back) when a ring got something meanwhile.
func (c *sameHostConn) sleep(rx []*shPair) bool {
	for _, p := range rx {
		p.rxMu.Lock()
		if !p.dead.Load() {
			p.rx.Sleep()
		}
		p.rxMu.Unlock()
	}
	if !ringsEmpty(rx) {
		awake(rx)
		return false
	}
	return true
}

func awake(rx []*shPair) {
	for _, p := range rx {
		p.rxMu.Lock()
		if !p.dead.Load() {
			p.rx.Awake()
		}
		p.rxMu.Unlock()
	}
}

// ringsEmpty reports whether no ring of rx holds a datagram.
func ringsEmpty(rx []*shPair) bool {
	for _, p := range rx {
		p.rxMu.Lock()
		empty := p.dead.Load() || p.rx.Empty()
		p.rxMu.Unlock()
		if !empty {
			return false
		}
	}
	return true
}

// waitNetpoller parks in the netpoller until the UDP socket or a ring's eventfd is
// readable (default mode). An Interrupt ends it with ErrInterrupted.
func (c *sameHostConn) waitNetpoller() error {
	if !c.udpArmed {
		ev := unix.EpollEvent{Events: unix.EPOLLIN, Fd: int32(c.udpFD)}
		if err := c.epollCtl(unix.EPOLL_CTL_ADD, &ev); err == nil {
			c.udpArmed = true
		}
	}
	err := c.eprc.Read(c.waitFn)
	if err != nil {
		if errors.Is(err, os.ErrDeadlineExceeded) {
			c.ep.SetReadDeadline(time.Time{})
			return fmt.Errorf("netio: read %v: %w", c.inner.LocalAddr(), ErrInterrupted)
		}
		return c.inner.readErr(net.ErrClosed)
	}
	return nil
}

// waitOnce is the netpoller's test of the epoll instance: ready when epoll_wait finds
// anything, and a ring's eventfd is drained on the way (level-triggered, it would stay
// ready).
func (c *sameHostConn) waitOnce(fd uintptr) bool {
	n, err := unix.EpollWait(int(fd), c.evs[:], 0)
	if err != nil || n <= 0 {
		return err != nil && err != unix.EINTR && err != unix.EAGAIN
	}
	for _, ev := range c.evs[:n] {
		if int(ev.Fd) == c.rxEv.FD() {
			c.rxEv.Drain()
		}
	}
	return true
}

func (c *sameHostConn) epollCtl(op int, ev *unix.EpollEvent) error {
	var err error
	if cerr := c.eprc.Control(func(fd uintptr) { err = unix.EpollCtl(int(fd), op, c.udpFD, ev) }); cerr != nil {
		return cerr
	}
	return err
}

// Unwatch takes the UDP socket out of the wait's epoll instance until the next blocking
// ReadBatch (Unwatcher): a program that spins on PollBatch wants no netpoller wake-up
// per datagram.
func (c *sameHostConn) Unwatch() {
	if c.busy {
		return
	}
	c.rmu.Lock()
	if c.udpArmed && !c.closed.Load() && c.epollCtl(unix.EPOLL_CTL_DEL, nil) == nil {
		c.udpArmed = false
	}
	c.rmu.Unlock()
}

// Interrupt ends a blocked ReadBatch, or the next one, with ErrInterrupted (Interrupter).
func (c *sameHostConn) Interrupt() {
	if !c.busy {
		c.ep.SetReadDeadline(longAgo)
	}
}

func (c *sameHostConn) interruptible() bool { return !c.busy }

// WaitReadable waits until a ring or the UDP socket has a datagram, or the timeout
// passes (Poller), in poll(2) on the socket and the rings' eventfd.
func (c *sameHostConn) WaitReadable(timeout time.Duration) (bool, error) {
	var deadline time.Time
	if timeout >= 0 {
		deadline = time.Now().Add(timeout)
	}
	for {
		rx := *c.rx.Load()
		if !c.sleep(rx) {
			return true, nil
		}
		ready, err := c.waitPoll(timeout)
		awake(rx)
		if err != nil {
			return false, err
		}
		if ready || !ringsEmpty(rx) {
			return true, nil
		}
		// The eventfd woke us for nothing readable now (a pair installed, a wake-up
		// meant for a blocked ReadBatch): wait on for what is left of the timeout.
		if timeout >= 0 {
			if timeout = time.Until(deadline); timeout <= 0 {
				return false, nil
			}
		}
	}
}

// waitPoll waits in poll(2) for the UDP socket or the eventfd; it reports whether the
// socket is readable.
func (c *sameHostConn) waitPoll(timeout time.Duration) (bool, error) {
	c.closeMu.RLock()
	defer c.closeMu.RUnlock()
	if c.closed.Load() {
		return false, c.inner.readErr(net.ErrClosed)
	}
	ms := -1
	if timeout >= 0 {
		ms = int((timeout + time.Millisecond - 1) / time.Millisecond)
	}
	for {
		fds := [2]unix.PollFd{{Fd: int32(c.udpFD), Events: unix.POLLIN}, {Fd: int32(c.rxEv.FD()), Events: unix.POLLIN}}
		n, err := unix.Poll(fds[:], ms)
		if c.closed.Load() {
			return false, c.inner.readErr(net.ErrClosed)
		}
		switch {
		case err == unix.EINTR:
			continue
		case err != nil:
			return false, c.inner.readErr(err)
		}
		if fds[1].Revents != 0 {
			c.rxEv.Drain()
		}
		return n > 0 && fds[0].Revents != 0, nil
	}
}

// ---- rendezvous ----

// hello is the initiator's message, reply the acceptor's: magic, a field (the ring size
// in a hello, the status in a reply), the sender's LocalAddr and SourceAddr (16-byte
// address and port each). A hello carries the region's memfd and the initiator's
// eventfd, an accepting reply the acceptor's eventfd.
func putAddr(b []byte, a netip.AddrPort) {
	ip := a.Addr().As16()
	copy(b, ip[:])
	binary.BigEndian.PutUint16(b[16:], a.Port())
}

func getAddr(b []byte) netip.AddrPort {
	return netip.AddrPortFrom(netip.AddrFrom16([16]byte(b[:16])).Unmap(), binary.BigEndian.Uint16(b[16:]))
}

func (c *sameHostConn) message(magic string, field uint32) []byte {
	b := make([]byte, helloLen)
	copy(b, magic)
	binary.BigEndian.PutUint32(b[8:], field)
	putAddr(b[16:], c.inner.LocalAddr())
	putAddr(b[34:], c.inner.SourceAddr())
	return b
}

const (
	replyOK      = 0
	replyRefused = 1
)

func (c *sameHostConn) dialLoop() {
	for {
		select {
		case <-c.done:
			return
		case e := <-c.dialCh:
			if err := c.dial(e); err != nil {
				e.retryAt.Store(time.Now().Add(dialRetry).UnixNano())
			}
			e.dialing.Store(false)
		}
	}
}

// dial makes a ring pair with the device at e.addr, if one of this user's serves it.
func (c *sameHostConn) dial(e *shPeer) error {
	uc, err := shm.Dial(c.sockPath(e.addr), handshakeTimeout)
	if err != nil {
		return err
	}
	region, err := shm.Create("goverbs-samehost", regionSize(c.ring))
	if err != nil {
		uc.Close()
		return err
	}
	fail := func(err error) error {
		uc.Close()
		region.Close()
		return err
	}
	mem := region.Bytes()
	copy(mem, regionMagic)
	binary.LittleEndian.PutUint32(mem[8:], uint32(c.ring))
	for i := range 2 {
		if err := shm.InitRecordRing(ringMem(mem, c.ring, i), c.ring); err != nil {
			return fail(err)
		}
	}
	uc.SetDeadline(time.Now().Add(handshakeTimeout))
	memfd := int(region.File().Fd()) // a memfd needs no netpoller: Fd's switch to blocking is harmless
	if err := shm.Send(uc, c.message(helloMagic, uint32(c.ring)), memfd, c.rxEv.FD()); err != nil {
		return fail(err)
	}
	buf := make([]byte, helloLen+8)
	n, fds, err := shm.Recv(uc, buf)
	if err != nil {
		return fail(err)
	}
	if n != helloLen || string(buf[:8]) != replyMagic || binary.BigEndian.Uint32(buf[8:]) != replyOK || len(fds) != 1 {
		shm.CloseFDs(fds)
		c.fallbacks.Add(1)
		return fail(errors.New("netio: same-host peer refused"))
	}
	peerEv, err := shm.EventfdFrom(fds[0])
	if err != nil {
		return fail(err)
	}
	uc.SetDeadline(time.Time{})
	p := &shPair{peerLocal: getAddr(buf[16:]), peerSrc: getAddr(buf[34:]), initiator: c.inner.LocalAddr(),
		region: region, uc: uc, peerEv: peerEv}
	if p.peerLocal != e.addr {
		peerEv.Close()
		c.fallbacks.Add(1)
		return fail(errors.New("netio: same-host peer answers for another address"))
	}
	if p.tx, err = shm.NewRecordProducer(ringMem(mem, c.ring, 0), c.ring); err == nil {
		p.rx, err = shm.NewRecordConsumer(ringMem(mem, c.ring, 1), c.ring)
	}
	if err != nil {
		peerEv.Close()
		return fail(err)
	}
	c.install(p)
	return nil
}

func (c *sameHostConn) acceptLoop() {
	for {
		uc, err := c.l.Accept()
		if err != nil {
			return
		}
		go c.accept(uc)
	}
}

// accept answers one initiator: it maps the region it sent (checked: sealed, of the
// size its header and hello say) and replies with this Conn's eventfd, or refuses.
func (c *sameHostConn) accept(uc *net.UnixConn) {
	uc.SetDeadline(time.Now().Add(handshakeTimeout))
	buf := make([]byte, helloLen+8)
	n, fds, err := shm.Recv(uc, buf)
	refuse := func() {
		shm.CloseFDs(fds)
		shm.Send(uc, c.message(replyMagic, replyRefused))
		uc.Close()
	}
	if err != nil {
		uc.Close()
		return
	}
	ring := int(binary.BigEndian.Uint32(buf[8:]))
	if n != helloLen || string(buf[:8]) != helloMagic || len(fds) != 2 || ring < minRing || ring > maxRing || ring&(ring-1) != 0 || c.closed.Load() {
		refuse()
		return
	}
	peerLocal, peerSrc := getAddr(buf[16:]), getAddr(buf[34:])
	if peerLocal.Addr().Is4() != c.inner.LocalAddr().Addr().Is4() || !peerLocal.IsValid() {
		refuse()
		return
	}
	region, err := shm.Map(os.NewFile(uintptr(fds[0]), "goverbs-samehost"), regionSize(ring), regionSize(ring))
	fds = fds[1:]
	if err != nil {
		refuse()
		return
	}
	mem := region.Bytes()
	if string(mem[:8]) != regionMagic || int(binary.LittleEndian.Uint32(mem[8:])) != ring {
		region.Close()
		refuse()
		return
	}
	peerEv, err := shm.EventfdFrom(fds[0])
	fds = nil
	if err != nil {
		region.Close()
		refuse()
		return
	}
	p := &shPair{peerLocal: peerLocal, peerSrc: peerSrc, initiator: peerLocal, region: region, uc: uc, peerEv: peerEv}
	if p.rx, err = shm.NewRecordConsumer(ringMem(mem, ring, 0), ring); err == nil {
		p.tx, err = shm.NewRecordProducer(ringMem(mem, ring, 1), ring)
	}
	if err != nil {
		peerEv.Close()
		region.Close()
		refuse()
		return
	}
	if err := shm.Send(uc, c.message(replyMagic, replyOK), c.rxEv.FD()); err != nil {
		peerEv.Close()
		region.Close()
		uc.Close()
		return
	}
	uc.SetDeadline(time.Time{})
	c.install(p)
}

// install makes p the ring pair of its peer, unless the peer already has one: when both
// devices dialled at once, both keep the pair the lower LocalAddr created and close the
// other, so that they agree without another message.
func (c *sameHostConn) install(p *shPair) {
	c.mu.Lock()
	if c.closed.Load() {
		c.mu.Unlock()
		c.teardown(p, false)
		return
	}
	old := *c.peers.Load()
	e := old[p.peerLocal]
	if e == nil {
		m := make(map[netip.AddrPort]*shPeer, len(old)+1)
		for k, v := range old {
			m[k] = v
		}
		e = &shPeer{addr: p.peerLocal}
		m[p.peerLocal] = e
		c.peers.Store(&m)
	}
	var loser *shPair
	if cur := e.pair.Load(); cur != nil && !cur.closing.Load() {
		if p.initiator.Compare(cur.initiator) < 0 {
			loser = cur
		} else {
			loser = p
		}
	}
	if loser != p {
		e.pair.Store(p)
	}
	// Read even a pair that lost: the peer may have written into it before it learnt.
	rx := append(append([]*shPair(nil), *c.rx.Load()...), p)
	c.rx.Store(&rx)
	// The peer may have written into p's ring before p was on the list, and its first
	// write took the ring's initial sleeping flag with it: a reader asleep since before
	// must wake, take the new list, and look. (Under c.mu: Close closes rxEv under it.)
	c.rxEv.Signal()
	c.mu.Unlock()
	if loser != nil {
		c.teardown(loser, true)
	}
	if loser != p {
		go c.watch(p)
	}
}

// watch waits for the pair's lifeline to end (the peer closed its device or died),
// then drops the pair.
func (c *sameHostConn) watch(p *shPair) {
	var b [64]byte
	for {
		if _, err := p.uc.Read(b[:]); err != nil {
			break
		}
	}
	c.teardown(p, true)
}

// drainTime is how long a closing pair's ring stays mapped for its last datagrams to be
// read: a peer that closed its device may have left some (an ACK it owed, sent as it
// closed), which a socket would have kept in its buffer, and a peer whose pair lost to
// another may write a few more before it learns.
const drainTime = time.Second

// teardown stops sending through p: its destination goes by UDP again (after
// dialRetry). With drain, what p's ring holds is still read, and its memory unmapped
// after drainTime; without, at once.
func (c *sameHostConn) teardown(p *shPair, drain bool) {
	if p.closing.Swap(true) {
		if !drain {
			c.finalize(p)
		}
		return
	}
	p.uc.Close()
	c.mu.Lock()
	if e := (*c.peers.Load())[p.peerLocal]; e != nil && e.pair.CompareAndSwap(p, nil) {
		e.retryAt.Store(time.Now().Add(dialRetry).UnixNano())
	}
	c.mu.Unlock()
	if drain && !c.closed.Load() {
		time.AfterFunc(drainTime, func() { c.finalize(p) })
		return
	}
	c.finalize(p)
}

// finalize takes p out of the read list and unmaps its memory once no reader or writer
// is inside it.
func (c *sameHostConn) finalize(p *shPair) {
	if p.dead.Load() {
		return
	}
	c.mu.Lock()
	old := *c.rx.Load()
	rx := make([]*shPair, 0, len(old))
	for _, q := range old {
		if q != p {
			rx = append(rx, q)
		}
	}
	c.rx.Store(&rx)
	c.mu.Unlock()
	p.txMu.Lock()
	p.rxMu.Lock()
	if !p.dead.Swap(true) {
		p.region.Close()
		p.peerEv.Close()
	}
	p.rxMu.Unlock()
	p.txMu.Unlock()
}

// ---- closing ----

func (c *sameHostConn) Close() error {
	if c.closed.Swap(true) {
		return net.ErrClosed
	}
	close(c.done)
	c.l.Close()
	c.rxEv.Signal() // a wait in poll(2) wakes and sees closed
	if c.ep != nil {
		c.ep.Close() // a ReadBatch parked in the netpoller returns
	}
	// The waits in poll(2) must end: the eventfd is shared with ReadBatch's wait, which
	// may drain a single signal before a poll(2) saw it, so signal until they are out.
	for !c.closeMu.TryLock() {
		c.rxEv.Signal()
		time.Sleep(100 * time.Microsecond)
	}
	c.rmu.Lock() // and the reads
	err := c.inner.Close()
	c.mu.Lock()
	rx := *c.rx.Load()
	c.mu.Unlock()
	for _, p := range rx {
		c.teardown(p, false)
	}
	c.mu.Lock()
	c.rxEv.Close()
	c.mu.Unlock()
	c.rmu.Unlock()
	c.closeMu.Unlock()
	return err
}

// closeWaiters releases what ListenSameHost made before it failed.
func (c *sameHostConn) closeWaiters() {
	if c.ep != nil {
		c.ep.Close()
	}
	c.rxEv.Close()
}

// JoinGroup joins a multicast group on the UDP Conn (Multicaster): multicast is
// delivered by the kernel to every member, so it never takes a ring.
func (c *sameHostConn) JoinGroup(group netip.Addr) (Conn, error) { return c.inner.JoinGroup(group) }

// Package simnet is a deterministic in-memory network for transport tests.
//
// Conns from one Network exchange datagrams through a single scheduler:
// every datagram's fate (loss, duplication, extra delay, a flipped bit) is
// drawn from a PCG generator seeded by New, in the order datagrams are sent,
// so the same seed and the same traffic give the same fate. Delivery is timed
// with one time.AfterFunc timer, so under testing/synctest fake time advances
// straight to the next delivery. Create the Network inside the synctest
// bubble that uses it.
//
// Each listener has a bounded receive queue; a datagram arriving at a full
// queue is dropped and counted, as a socket buffer would.
//
// Datagrams carry an ECN codepoint (netio.Message.ECN) from sender to
// receiver. Without a fabric a datagram goes straight to its destination after
// the Faults' delay. With one (see [Network.AddSwitch], [Network.Attach],
// [Network.Connect]) a datagram between two attached hosts crosses links with
// a bandwidth and a propagation delay and switches with a byte-limited output
// queue per egress port, RED-style ECN marking and tail drop, as a datacenter
// fabric does: enough to show incast, congestion marking and its control.
//
// A Network made by [NewManual] runs on a virtual clock that only
// [Network.Advance] moves, with no timer and no goroutine: one test goroutine
// drives it (and reads its Conns with PollBatch), so a second of traffic
// through a fabric of many hosts runs in a fraction of that and the same way
// every time.
package simnet

import (
	"container/heap"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"net"
	"net/netip"
	"slices"
	"sync"
	"time"

	"github.com/goverbs/goverbs/netio"
	"github.com/goverbs/goverbs/netio/internal/waitq"
)

// Faults are per-datagram probabilities and delays.
type Faults struct {
	// Loss, Duplicate, Reorder and Corrupt are probabilities per datagram.
	// Corrupt flips one random bit of the payload. Reorder holds a datagram
	// back by an extra random delay of up to ReorderDelay (or 1ms if that is
	// 0), so later datagrams overtake it.
	Loss, Duplicate, Reorder, Corrupt float64
	// Delay is the base one-way delay; Jitter adds a uniform [0, Jitter).
	// Jitter alone can reorder datagrams too; Reordered counts only the
	// ones held back on purpose.
	Delay, Jitter time.Duration
	ReorderDelay  time.Duration
}

// Stats counts datagrams (one per segment of a SegSize run).
type Stats struct {
	Sent       uint64 // datagrams handed to WriteBatch
	Delivered  uint64 // put in a listener's queue (duplicates included)
	Dropped    uint64 // lost to Faults.Loss
	Filtered   uint64 // dropped by the filter
	Duplicated uint64 // extra copies made
	Reordered  uint64 // held back by Faults.Reorder
	Corrupted  uint64 // had a bit flipped
	NoListener uint64 // nobody listening at the destination on arrival
	QueueFull  uint64 // dropped at a full receive queue
	// Fabric counters (see Network.AddSwitch): datagrams dropped at a full
	// switch output queue (tail drop), lost on a link (Link.Loss), marked
	// CE by a switch, and sent between attached hosts with no path.
	TailDrop uint64
	LinkLoss uint64
	Marked   uint64
	NoRoute  uint64
}

// Verdict is a filter's decision about one datagram.
type Verdict int

const (
	Pass Verdict = iota // let the datagram go on (faults still apply)
	Drop                // drop it (counted as Filtered)
)

func (v Verdict) String() string {
	switch v {
	case Pass:
		return "pass"
	case Drop:
		return "drop"
	}
	return fmt.Sprintf("Verdict(%d)", int(v))
}

// Filter sees every datagram at send time, before faults are applied. It
// runs with the Network's lock held: it must not call the Network.
type Filter func(src, dst netip.AddrPort, b []byte) Verdict

// DefaultQueueLimit is each listener's receive queue length in datagrams.
const DefaultQueueLimit = 1024

// BatchSize is what Caps().BatchSize reports for simnet Conns.
const BatchSize = 32

// Network is a simulated network. Its methods are safe for concurrent use.
type Network struct {
	mu   sync.Mutex
	rng  *rand.Rand
	seed uint64
	// perSource: each source's datagrams draw their fates from a generator of their own
	// (RandomPerSource), made at its first datagram.
	perSource  map[netip.AddrPort]*rand.Rand
	faults     Faults
	filter     Filter
	stats      Stats
	conns      map[netip.AddrPort]*conn
	queueLimit int
	pending    pending // datagrams in flight, by arrival time then send order
	seq        uint64
	timer      *time.Timer
	timerAt    time.Time

	manual bool      // the clock is virtual: only Advance moves it (NewManual)
	clock  time.Time // the virtual clock's time when manual
	fabric fabric    // switches and links, when any were added
}

// New returns a Network whose fates are drawn from a PCG generator seeded
// with seed.
func New(seed uint64, f Faults) *Network {
	return &Network{
		rng:        rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)),
		seed:       seed,
		faults:     f,
		conns:      make(map[netip.AddrPort]*conn),
		queueLimit: DefaultQueueLimit,
	}
}

// NewManual returns a Network like New's on a virtual clock that starts at
// start and moves only when Advance moves it: no timer fires and nothing
// waits for real or synctest time. Conns of a manual Network are read with
// PollBatch by the goroutine that drives the clock (a ReadBatch blocks until
// a datagram has been delivered, which only Advance or a zero-delay write
// does).
func NewManual(seed uint64, f Faults, start time.Time) *Network {
	n := New(seed, f)
	n.manual, n.clock = true, start
	return n
}

// Now is the Network's time: the virtual clock of a manual Network, the
// (possibly synctest) wall clock otherwise.
func (n *Network) Now() time.Time {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.now()
}

// now is Now with n.mu held.
func (n *Network) now() time.Time {
	if n.manual {
		return n.clock
	}
	return time.Now()
}

// NextEvent returns when the next datagram in flight arrives somewhere (at a
// switch, at the end of a link or at its destination), and false when none is
// in flight.
func (n *Network) NextEvent() (time.Time, bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if len(n.pending) == 0 {
		return time.Time{}, false
	}
	return n.pending[0].at, true
}

// Advance moves a manual Network's clock to t, first carrying out, in time
// order, every event due by then. It does nothing if t is before the clock,
// or on a Network that is not manual.
func (n *Network) Advance(t time.Time) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if !n.manual || t.Before(n.clock) {
		return
	}
	for len(n.pending) > 0 && !n.pending[0].at.After(t) {
		p := heap.Pop(&n.pending).(*packet)
		n.clock = p.at
		n.step(p)
	}
	n.clock = t
}

// SetFaults replaces the faults for datagrams sent from now on.
func (n *Network) SetFaults(f Faults) {
	n.mu.Lock()
	n.faults = f
	n.mu.Unlock()
}

// RandomPerSource makes each source address draw its datagrams' fates (Faults: loss,
// duplication, reordering, corruption, delay) from a generator of its own, seeded from
// the Network's seed and the address, instead of from the one generator every sender
// shares. With the shared one a datagram's fate depends on how many datagrams other
// hosts sent before it, and under testing/synctest two hosts whose goroutines send at
// the same instant (each answering a datagram that arrived then) reach the Network in
// either order: the same seed then gave a test different results from run to run
// (internal/engine's TestSelectiveRepeatMixedInterop, issue 31). Per source, a
// datagram's fate depends only on what its own host sent before it. The fabric's draws
// (marking, link loss) stay on the shared generator. Call it before the first datagram;
// the fates differ from those New's seed gives without it.
func (n *Network) RandomPerSource() {
	n.mu.Lock()
	if n.perSource == nil {
		n.perSource = make(map[netip.AddrPort]*rand.Rand)
	}
	n.mu.Unlock()
}

// sourceRand is the generator src's datagrams draw their fates from. n.mu held.
func (n *Network) sourceRand(src netip.AddrPort) *rand.Rand {
	if n.perSource == nil {
		return n.rng
	}
	r := n.perSource[src]
	if r == nil {
		a := src.Addr().As16()
		h := uint64(14695981039346656037) // FNV-1a over the address and port
		for _, b := range append(a[:], byte(src.Port()>>8), byte(src.Port())) {
			h = (h ^ uint64(b)) * 1099511628211
		}
		r = rand.New(rand.NewPCG(n.seed, h))
		n.perSource[src] = r
	}
	return r
}

// SetFilter installs f (nil removes it).
func (n *Network) SetFilter(f Filter) {
	n.mu.Lock()
	n.filter = f
	n.mu.Unlock()
}

// SetQueueLimit sets every listener's receive queue length (datagrams).
func (n *Network) SetQueueLimit(limit int) {
	n.mu.Lock()
	n.queueLimit = max(1, limit)
	n.mu.Unlock()
}

// Stats returns the counters so far.
func (n *Network) Stats() Stats {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.stats
}

// ErrAddrInUse is returned by Listen for an address already bound.
var ErrAddrInUse = errors.New("simnet: address already in use")

// Listen binds addr. Port 0 picks a free port from 49152 upwards.
func (n *Network) Listen(addr netip.AddrPort) (netio.Conn, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if !addr.Addr().IsValid() {
		return nil, fmt.Errorf("simnet: listen %v: invalid address", addr)
	}
	addr = netip.AddrPortFrom(addr.Addr().Unmap(), addr.Port())
	if addr.Port() == 0 {
		for p := 49152; p < 65536; p++ {
			a := netip.AddrPortFrom(addr.Addr(), uint16(p))
			if n.conns[a] == nil {
				addr = a
				break
			}
		}
		if addr.Port() == 0 {
			return nil, fmt.Errorf("simnet: listen %v: no free port", addr)
		}
	}
	if n.conns[addr] != nil {
		return nil, fmt.Errorf("simnet: listen %v: %w", addr, ErrAddrInUse)
	}
	c := &conn{net: n, addr: addr, ready: make(chan struct{}, 1), done: make(chan struct{})}
	n.conns[addr] = c
	return c, nil
}

// Close closes every Conn and discards datagrams in flight.
func (n *Network) Close() {
	n.mu.Lock()
	conns := slices.Collect(maps.Values(n.conns))
	n.mu.Unlock()
	for _, c := range conns {
		c.Close()
	}
}

// packet is a datagram in flight.
type packet struct {
	at       time.Time
	seq      uint64
	src, dst netip.AddrPort
	data     []byte
	ecn      netio.ECN
	tc       uint8 // the traffic class's DSCP (Message.TrafficClass)
	// deq, when set, makes the event the start of the datagram's
	// transmission at that port (a port whose RED marks on dequeue).
	deq *port
	// node is where the datagram arrives at time at when it crosses the
	// fabric: its source host first, then switches, then its destination
	// host. nil: straight to the destination's listener.
	node *node
}

type pending []*packet

func (p pending) Len() int { return len(p) }
func (p pending) Less(i, j int) bool {
	if !p[i].at.Equal(p[j].at) {
		return p[i].at.Before(p[j].at)
	}
	return p[i].seq < p[j].seq
}
func (p pending) Swap(i, j int) { p[i], p[j] = p[j], p[i] }
func (p *pending) Push(x any)   { *p = append(*p, x.(*packet)) }
func (p *pending) Pop() any {
	old := *p
	x := old[len(old)-1]
	old[len(old)-1] = nil
	*p = old[:len(old)-1]
	return x
}

// send applies the filter and faults to one datagram. n.mu held.
func (n *Network) send(now time.Time, src, dst netip.AddrPort, b []byte, ecn netio.ECN, tc uint8) {
	n.stats.Sent++
	f := n.faults
	// Draw every random number for this datagram, used or not, so that one
	// datagram's fate does not shift the next one's.
	r := n.sourceRand(src)
	loss, dup, reorder, corrupt := r.Float64(), r.Float64(), r.Float64(), r.Float64()
	j1, j2, hold, bit := r.Uint64(), r.Uint64(), r.Uint64(), r.Uint64()
	if n.filter != nil && n.filter(src, dst, b) == Drop {
		n.stats.Filtered++
		return
	}
	if loss < f.Loss {
		n.stats.Dropped++
		return
	}
	data := append([]byte(nil), b...)
	if corrupt < f.Corrupt && len(data) > 0 {
		i := bit % uint64(len(data)*8)
		data[i/8] ^= 1 << (i % 8)
		n.stats.Corrupted++
	}
	delay := f.Delay + jitter(j1, f.Jitter)
	if reorder < f.Reorder {
		rd := f.ReorderDelay
		if rd <= 0 {
			rd = time.Millisecond
		}
		delay += 1 + jitter(hold, rd) // at least 1ns: strictly behind a same-time peer
		n.stats.Reordered++
	}
	n.enqueue(now.Add(delay), src, dst, data, ecn, tc)
	if dup < f.Duplicate {
		n.stats.Duplicated++
		// The copy is of the datagram as sent: corruption hit one copy only.
		n.enqueue(now.Add(f.Delay+jitter(j2, f.Jitter)), src, dst, append([]byte(nil), b...), ecn, tc)
	}
}

func jitter(r uint64, d time.Duration) time.Duration {
	if d <= 0 {
		return 0
	}
	return time.Duration(r % uint64(d))
}

// enqueue puts a datagram in flight: to its source host's link when both ends
// are attached to the fabric, straight to the destination otherwise. n.mu held.
func (n *Network) enqueue(at time.Time, src, dst netip.AddrPort, data []byte, ecn netio.ECN, tc uint8) {
	p := &packet{at: at, src: src, dst: dst, data: data, ecn: ecn & netio.ECNMask, tc: tc &^ netio.ECNMask}
	if h := n.fabric.hosts[src.Addr()]; h != nil && n.fabric.hosts[dst.Addr()] != nil {
		p.node = h
	}
	n.push(p)
}

// push schedules p's next event at p.at. n.mu held.
func (n *Network) push(p *packet) {
	n.seq++
	p.seq = n.seq
	heap.Push(&n.pending, p)
}

// step carries out p's event: arrival at a fabric node, or delivery. n.mu held.
func (n *Network) step(p *packet) {
	if p.deq != nil {
		n.dequeue(p)
		return
	}
	if p.node != nil {
		n.arrive(p)
		return
	}
	n.deliver(p)
}

// schedule arms the timer for the earliest pending datagram. n.mu held.
func (n *Network) schedule(now time.Time) {
	if len(n.pending) == 0 || n.manual {
		return
	}
	at := n.pending[0].at
	if n.timer != nil && !n.timerAt.IsZero() && !at.Before(n.timerAt) {
		return // already armed early enough
	}
	d := at.Sub(now)
	n.timerAt = at
	if n.timer == nil {
		n.timer = time.AfterFunc(d, n.fire)
	} else {
		n.timer.Reset(d)
	}
}

// fire delivers every datagram that is due, in (time, send order).
func (n *Network) fire() {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.timerAt = time.Time{}
	now := time.Now()
	for len(n.pending) > 0 && !n.pending[0].at.After(now) {
		n.step(heap.Pop(&n.pending).(*packet))
	}
	n.schedule(now)
}

// deliver puts p in its listener's queue. n.mu held.
func (n *Network) deliver(p *packet) {
	c := n.conns[p.dst]
	if c == nil {
		n.stats.NoListener++
		return
	}
	if len(c.queue) >= n.queueLimit {
		n.stats.QueueFull++
		return
	}
	c.queue = append(c.queue, p)
	n.stats.Delivered++
	select {
	case c.ready <- struct{}{}:
	default:
	}
}

// flush delivers datagrams due now without waiting for the timer (zero
// delay), then rearms the timer. n.mu held.
func (n *Network) flush(now time.Time) {
	for len(n.pending) > 0 && !n.pending[0].at.After(now) {
		n.step(heap.Pop(&n.pending).(*packet))
	}
	n.schedule(now)
}

// remove unbinds c; with no listeners left the in-flight datagrams are
// discarded and the timer stopped. n.mu held.
func (n *Network) remove(c *conn) {
	if n.conns[c.addr] == c {
		delete(n.conns, c.addr)
	}
	if len(n.conns) == 0 {
		for len(n.pending) > 0 {
			p := heap.Pop(&n.pending).(*packet)
			n.stats.NoListener++
			_ = p
		}
		if n.timer != nil {
			n.timer.Stop()
			n.timerAt = time.Time{}
		}
	}
}

// conn is one bound address.
type conn struct {
	net    *Network
	addr   netip.AddrPort
	queue  []*packet     // guarded by net.mu
	ready  chan struct{} // signalled when queue becomes non-empty
	done   chan struct{} // closed by Close
	closed bool          // guarded by net.mu
	once   sync.Once
}

func (c *conn) LocalAddr() netip.AddrPort { return c.addr }

// SourceAddr is LocalAddr: a simulated host sends from the address it listens on.
func (c *conn) SourceAddr() netip.AddrPort { return c.addr }

func (c *conn) Caps() netio.Caps {
	c.net.mu.Lock()
	limit := c.net.queueLimit
	c.net.mu.Unlock()
	return netio.Caps{BatchSize: BatchSize, MaxSegments: 1, IPv4IDZero: true, RecvBuf: limit * 2048, ECN: true}
}

func (c *conn) Close() error {
	err := net.ErrClosed
	c.once.Do(func() {
		err = nil
		c.net.mu.Lock()
		c.closed = true
		c.queue = nil
		c.net.remove(c)
		c.net.mu.Unlock()
		close(c.done)
	})
	return err
}

func (c *conn) closedErr(op string) error {
	return fmt.Errorf("simnet: %s %v: %w", op, c.addr, net.ErrClosed)
}

// ReadBatch blocks until at least one datagram is queued or the Conn is
// closed. Datagrams longer than a Buf are truncated to it.
func (c *conn) ReadBatch(msgs []netio.Message) (int, error) {
	if len(msgs) == 0 {
		return 0, nil
	}
	for {
		if k, err := c.PollBatch(msgs); k > 0 || err != nil {
			return k, err
		}
		select {
		case <-c.ready:
		case <-c.done:
		}
	}
}

// PollBatch takes what is queued now without waiting: 0 when nothing is
// (netio.Poller). It is how the goroutine driving a manual Network reads.
func (c *conn) PollBatch(msgs []netio.Message) (int, error) {
	c.net.mu.Lock()
	defer c.net.mu.Unlock()
	if c.closed {
		return 0, c.closedErr("read")
	}
	k := 0
	for k < len(msgs) && k < len(c.queue) {
		p := c.queue[k]
		m := &msgs[k]
		m.N = copy(m.Buf, p.data)
		m.Addr = p.src
		m.SegSize = 0
		m.ECN, m.TrafficClass = p.ecn, p.tc
		c.queue[k] = nil
		k++
	}
	if k > 0 {
		c.queue = c.queue[k:]
		if len(c.queue) == 0 {
			c.queue = c.queue[:0:0]
		}
	}
	return k, nil
}

// WaitReadable waits until a datagram is queued, the timeout passes (never
// when negative) or the Conn closes (netio.Poller).
func (c *conn) WaitReadable(timeout time.Duration) (bool, error) {
	queued, closed := waitq.Readable(timeout, c.ready, c.done, func() (bool, bool) {
		c.net.mu.Lock()
		defer c.net.mu.Unlock()
		return len(c.queue) > 0, c.closed
	})
	if closed {
		return false, c.closedErr("wait")
	}
	return queued, nil
}

// WriteBatch sends every message; SegSize runs are split into datagrams.
func (c *conn) WriteBatch(msgs []netio.Message) (int, error) {
	n := c.net
	n.mu.Lock()
	defer n.mu.Unlock()
	now := n.now()
	if c.closed {
		return 0, c.closedErr("write")
	}
	for i := range msgs {
		m := &msgs[i]
		dst := netip.AddrPortFrom(m.Addr.Addr().Unmap(), m.Addr.Port())
		m.Segments(func(_ int, seg []byte) bool {
			n.send(now, c.addr, dst, seg, m.ECN, m.TrafficClass)
			return true
		})
	}
	n.flush(now)
	return len(msgs), nil
}

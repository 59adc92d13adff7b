// Package netiotest provides an in-memory [netio.Conn] for tests, and [TestConn], the
// conformance suite every netio backend passes.
//
// A [Conn] is one end of an in-memory datagram path: [Pipe] connects two, so that what
// one writes the other reads, with no socket, timer or goroutine in between; [NewConn]
// makes one with no peer, which the test drives by hand: it injects what the Conn reads
// ([Conn.Inject], or [Conn.Deliver] in lockstep with the reader) and watches what it
// writes ([Conn.OnWrite], [Conn.TakeWritten]). A Conn is a [netio.Poller] as well, so a busy-poll device runs
// on it too.
//
// It keeps to netio's contract as the UDP backend does: reads fill the caller's buffers,
// a run with SegSize goes out as its separate datagrams (a Conn has no GSO, and says so
// in Caps), a gathering Message (Iov) arrives as its concatenation, Close unblocks a
// reader with net.ErrClosed, and a datagram that finds the receive queue full is
// dropped, as a socket buffer drops it. In steady state nothing allocates: the queue's
// slots are kept and reused.
package netiotest

import (
	"bytes"
	"fmt"
	"net"
	"net/netip"
	"sync"
	"time"

	"github.com/goverbs/goverbs/netio"
	"github.com/goverbs/goverbs/netio/internal/waitq"
)

// DefaultDepth is the receive queue length, in datagrams, of the Conns Pipe and NewConn
// make.
const DefaultDepth = 1024

// BatchSize is what a Conn's Caps reports as its batch size.
const BatchSize = 64

// Conn is an in-memory netio.Conn; see the package documentation. Its methods are safe
// for concurrent use.
type Conn struct {
	local netip.AddrPort
	peer  *Conn

	mu     sync.Mutex
	moved  sync.Cond // broadcast when a reader looks at the queue, and on Close
	slots  [][]byte  // the receive queue: a ring of datagram buffers, kept for reuse
	lens   []int
	segs   []int // SegSize of an injected run (0 for a datagram)
	from   []netip.AddrPort
	ecns   []netio.ECN // the ECN codepoint each datagram was sent with
	head   int         // next slot to read
	count  int         // datagrams queued
	looks  uint64
	empty  uint64 // the look that emptied the queue last
	closed bool
	// Lending (netio.ViewReader): with lend (Lend) and lending (the reader's LendViews)
	// reads hand out the queue's slots themselves as Message.View; releases counts the
	// reader's ReleaseViews.
	lend, lending bool
	releases      int
	sameHost      bool          // reads mark their messages Message.SameHost (MarkSameHost)
	lent          [][]byte      // the buffers lent by the last read, reused by the next
	ready         chan struct{} // a datagram was queued (capacity 1)
	done          chan struct{} // closed by Close

	wmu     sync.Mutex // serializes writers: they share the gather buffer
	gather  []byte
	onWrite func(dst netip.AddrPort, dgram []byte)
	written int      // datagrams written; guarded by wmu
	keep    bool     // keep copies of them in kept (KeepWritten)
	kept    [][]byte // guarded by wmu
}

// Pipe returns two connected Conns at addresses a and b: whatever one writes, to any
// destination, the other reads, from the writer's address.
func Pipe(a, b netip.AddrPort) (*Conn, *Conn) {
	x, y := NewConn(a), NewConn(b)
	x.peer, y.peer = y, x
	return x, y
}

// NewConn returns a Conn at local with no peer: it reads what the test injects, and what
// it writes goes nowhere but to the test (OnWrite, Written, TakeWritten).
func NewConn(local netip.AddrPort) *Conn {
	c := &Conn{
		local: local,
		slots: make([][]byte, DefaultDepth),
		lens:  make([]int, DefaultDepth),
		segs:  make([]int, DefaultDepth),
		from:  make([]netip.AddrPort, DefaultDepth),
		ecns:  make([]netio.ECN, DefaultDepth),
		ready: make(chan struct{}, 1),
		done:  make(chan struct{}),
	}
	c.moved.L = &c.mu
	return c
}

// OnWrite sets a hook that WriteBatch calls with every datagram it sends (each segment of
// a run on its own, a gathering Message gathered), before the peer gets it. dgram is
// valid only during the call. Calls are serialized. The hook may block: WriteBatch waits
// for it, as it would for a slow kernel copy. nil removes the hook.
func (c *Conn) OnWrite(f func(dst netip.AddrPort, dgram []byte)) {
	c.wmu.Lock()
	c.onWrite = f
	c.wmu.Unlock()
}

// KeepWritten makes the Conn keep a copy of every datagram it writes from now on, for
// TakeWritten. It costs an allocation per datagram.
func (c *Conn) KeepWritten() {
	c.wmu.Lock()
	c.keep = true
	c.wmu.Unlock()
}

// TakeWritten returns the datagrams kept since the last call (see KeepWritten), oldest
// first, and forgets them.
func (c *Conn) TakeWritten() [][]byte {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	k := c.kept
	c.kept = nil
	return k
}

// Written is the number of datagrams written so far (each segment of a run counts).
func (c *Conn) Written() int {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	return c.written
}

// LocalAddr is the address the Conn was made with.
func (c *Conn) LocalAddr() netip.AddrPort { return c.local }

// SourceAddr is LocalAddr: a Conn sends from the address it receives on.
func (c *Conn) SourceAddr() netip.AddrPort { return c.local }

// Caps reports a batch size of BatchSize, no offloads (a run is sent as its datagrams)
// and IPv4 Identification 0, as goverbs' UDP backend without GSO, and ECN: a datagram
// arrives with the codepoint it was written (or injected) with.
func (c *Conn) Caps() netio.Caps {
	return netio.Caps{BatchSize: BatchSize, MaxSegments: 1, IPv4IDZero: true, RecvBuf: DefaultDepth * 2048, ECN: true}
}

// Close closes the Conn and unblocks its readers and a Deliver in progress. A second
// Close returns an error satisfying errors.Is(err, net.ErrClosed).
func (c *Conn) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return c.closedErr("close")
	}
	c.closed = true
	close(c.done)
	c.moved.Broadcast()
	return nil
}

func (c *Conn) closedErr(op string) error {
	return fmt.Errorf("netiotest: %s %v: %w", op, c.local, net.ErrClosed)
}

// WriteBatch delivers every datagram of msgs to the peer (if any) and the OnWrite hook.
// A run (SegSize) is sent as its separate datagrams; a datagram that finds the peer's
// queue full is dropped.
func (c *Conn) WriteBatch(msgs []netio.Message) (int, error) {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	var refused *netio.SendError
	for i := range msgs {
		if c.isClosed() {
			return i, c.closedErr("write")
		}
		m := &msgs[i]
		var b []byte
		if m.Iov == nil {
			b = m.Buf[:m.N]
		} else {
			if len(m.Iov) > netio.MaxIov {
				if refused == nil {
					refused = &netio.SendError{Index: i, Addr: m.Addr, Err: netio.ErrTooManyIov}
				}
				refused.Skipped += m.NumSegments()
				continue
			}
			c.gather = c.gather[:0]
			for _, v := range m.Iov {
				c.gather = append(c.gather, v...)
			}
			b = c.gather
		}
		for len(b) > 0 || m.N == 0 {
			n := len(b)
			if m.SegSize > 0 {
				n = min(n, m.SegSize)
			}
			c.written++
			if c.keep {
				c.kept = append(c.kept, bytes.Clone(b[:n]))
			}
			if c.onWrite != nil {
				c.onWrite(m.Addr, b[:n])
			}
			if c.peer != nil {
				c.peer.enqueue(c.local, b[:n], 0, m.ECN)
			}
			b = b[n:]
			if m.N == 0 {
				break // an empty datagram is still one
			}
		}
	}
	if refused != nil {
		return len(msgs), refused
	}
	return len(msgs), nil
}

func (c *Conn) isClosed() bool {
	select {
	case <-c.done:
		return true
	default:
		return false
	}
}

// enqueue copies one datagram (a run when segSize > 0) into the receive queue, or drops
// it when the queue is full or the Conn closed.
func (c *Conn) enqueue(from netip.AddrPort, b []byte, segSize int, ecn netio.ECN) {
	c.mu.Lock()
	if c.closed || c.count == len(c.slots) {
		c.mu.Unlock()
		return
	}
	i := (c.head + c.count) % len(c.slots)
	c.slots[i] = append(c.slots[i][:0], b...)
	c.lens[i], c.segs[i], c.from[i], c.ecns[i] = len(b), segSize, from, ecn&netio.ECNMask
	c.count++
	c.mu.Unlock()
	select {
	case c.ready <- struct{}{}:
	default:
	}
}

// Inject queues msgs[i].Buf[:N] as datagrams received from msgs[i].Addr, as a peer's
// writes would be, except that a Message with SegSize > 0 stays one coalesced run, as a
// socket with GRO hands it over (so a test can feed a receiver GRO runs, well-formed or
// not), with msgs[i].ECN as the codepoint it arrived with. Datagrams beyond the queue's
// depth are dropped.
func (c *Conn) Inject(msgs ...netio.Message) {
	for i := range msgs {
		m := &msgs[i]
		c.enqueue(m.Addr, m.Buf[:m.N], m.SegSize, m.ECN)
	}
}

// Deliver injects msgs at most max at a time (all at once when max <= 0), and after each
// batch waits until the reader has taken all of it and come back for more (called
// ReadBatch or PollBatch again), so that when Deliver returns the reader has finished
// with everything delivered: its reaction (the datagrams it sent) has happened. It
// returns early if the Conn is closed.
func (c *Conn) Deliver(msgs []netio.Message, max int) {
	if max <= 0 {
		max = len(msgs)
	}
	for len(msgs) > 0 {
		k := min(max, len(msgs))
		c.mu.Lock()
		mark := c.looks
		c.mu.Unlock()
		c.Inject(msgs[:k]...)
		msgs = msgs[k:]
		c.mu.Lock()
		for !c.closed && !(c.count == 0 && c.empty > mark && c.looks > c.empty) {
			c.moved.Wait()
		}
		closed := c.closed
		c.mu.Unlock()
		if closed {
			return
		}
	}
}

// PollBatch takes what is queued now, without waiting; 0 when nothing is (netio.Poller).
func (c *Conn) PollBatch(msgs []netio.Message) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.looks++
	c.moved.Broadcast()
	if c.closed {
		return 0, c.closedErr("read")
	}
	k := 0
	for ; k < len(msgs) && c.count > 0; k++ {
		m := &msgs[k]
		if c.lend && c.lending {
			// A buffer of the lender's own, as a ring's record is: an Inject never
			// writes it, and the reader's next read, which releases it, reuses it.
			if k == len(c.lent) {
				c.lent = append(c.lent, nil)
			}
			v := append(c.lent[k][:0], c.slots[c.head][:c.lens[c.head]]...)
			c.lent[k] = v
			m.View, m.N = v[:len(v):len(v)], len(v)
		} else {
			m.N, m.View = copy(m.Buf, c.slots[c.head][:c.lens[c.head]]), nil
		}
		m.Addr, m.SegSize, m.ECN, m.SameHost = c.from[c.head], c.segs[c.head], c.ecns[c.head], c.sameHost
		if m.SegSize > 0 && m.N < c.lens[c.head] {
			m.N -= m.N % m.SegSize // a truncated run keeps its whole segments, as with GRO
		}
		if m.SegSize >= m.N {
			m.SegSize = 0
		}
		c.head = (c.head + 1) % len(c.slots)
		c.count--
	}
	if k > 0 && c.count == 0 {
		c.empty = c.looks
		c.head = 0 // refill from the first slots, which have grown already
	}
	return k, nil
}

// Lend makes the Conn lend what it reads in place once its reader asks for that
// (LendViews): Message.View is then a buffer of the Conn's, as it is a same-host ring's
// record, so that a test runs the reader's view path. The buffers of one read are reused
// by the next, which releases them (netio.ViewReader).
func (c *Conn) Lend() {
	c.mu.Lock()
	c.lend = true
	c.mu.Unlock()
}

// MarkSameHost makes the Conn mark every message it reads from then on as one that
// crossed a same-host ring (Message.SameHost), whose ICRC the reader does not check, so
// that a test runs the reader's trusting path with the datagrams it chooses.
func (c *Conn) MarkSameHost() {
	c.mu.Lock()
	c.sameHost = true
	c.mu.Unlock()
}

// LendViews is the reader's request for views (netio.ViewReader); the Conn lends only
// after Lend.
func (c *Conn) LendViews() {
	c.mu.Lock()
	c.lending = true
	c.mu.Unlock()
}

// ReleaseViews is the reader's release of what it was lent (netio.ViewReader).
func (c *Conn) ReleaseViews() {
	c.mu.Lock()
	c.releases++
	c.mu.Unlock()
}

// Releases is how many times the reader released views.
func (c *Conn) Releases() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.releases
}

// ReadBatch waits until at least one datagram is queued and takes up to len(msgs).
// Longer datagrams are truncated to the buffer. After Close it returns an error
// satisfying errors.Is(err, net.ErrClosed).
func (c *Conn) ReadBatch(msgs []netio.Message) (int, error) {
	if len(msgs) == 0 {
		return 0, nil
	}
	for {
		if n, err := c.PollBatch(msgs); n > 0 || err != nil {
			return n, err
		}
		select {
		case <-c.ready:
		case <-c.done:
		}
	}
}

// WaitReadable waits until a datagram is queued, the timeout passes (never, when it is
// negative) or the Conn closes (netio.Poller).
func (c *Conn) WaitReadable(timeout time.Duration) (bool, error) {
	queued, closed := waitq.Readable(timeout, c.ready, c.done, func() (bool, bool) {
		c.mu.Lock()
		defer c.mu.Unlock()
		return c.count > 0, c.closed
	})
	if closed {
		return false, c.closedErr("wait")
	}
	return queued, nil
}

var (
	_ netio.Conn   = (*Conn)(nil)
	_ netio.Poller = (*Conn)(nil)
)

package verbs

import (
	"fmt"
	"net"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/goverbs/goverbs/netio"
)

// memConn is one end of an in-memory datagram pipe: WriteBatch copies each datagram
// straight into the peer's queue and PollBatch takes it from there, with no syscall, no
// timer and no goroutine in between. Two busy-poll devices on a pipe, driven from one
// goroutine, therefore cost exactly their own user-space work: a benchmark on them
// measures what goverbs adds to the kernel's share of a round trip.
type memConn struct {
	addr  netip.AddrPort
	peer  *memConn
	mu    sync.Mutex
	ring  [][]byte // preallocated datagram buffers
	lens  []int
	from  []netip.AddrPort
	head  int // next to read
	count int // queued
	ready chan struct{}
	done  chan struct{}
	once  sync.Once
}

// memPipe returns two connected ends, each holding up to depth datagrams.
func memPipe(a, b netip.AddrPort, depth int) (*memConn, *memConn) {
	mk := func(addr netip.AddrPort) *memConn {
		c := &memConn{addr: addr, ring: make([][]byte, depth), lens: make([]int, depth),
			from: make([]netip.AddrPort, depth), ready: make(chan struct{}, 1), done: make(chan struct{})}
		for i := range c.ring {
			c.ring[i] = make([]byte, 9000)
		}
		return c
	}
	x, y := mk(a), mk(b)
	x.peer, y.peer = y, x
	return x, y
}

func (c *memConn) LocalAddr() netip.AddrPort  { return c.addr }
func (c *memConn) SourceAddr() netip.AddrPort { return c.addr }
func (c *memConn) Caps() netio.Caps {
	return netio.Caps{BatchSize: 64, MaxSegments: 1, IPv4IDZero: true}
}

func (c *memConn) Close() error {
	err := net.ErrClosed
	c.once.Do(func() { err = nil; close(c.done) })
	return err
}

func (c *memConn) closed() bool {
	select {
	case <-c.done:
		return true
	default:
		return false
	}
}

// WriteBatch delivers every datagram to the peer; one that finds its queue full is
// dropped, as a socket buffer would drop it.
func (c *memConn) WriteBatch(msgs []netio.Message) (int, error) {
	if c.closed() {
		return 0, fmt.Errorf("mempipe: write %v: %w", c.addr, net.ErrClosed)
	}
	p := c.peer
	p.mu.Lock()
	for i := range msgs {
		m := &msgs[i]
		if p.count == len(p.ring) {
			continue
		}
		slot := (p.head + p.count) % len(p.ring)
		n := 0
		if m.Iov != nil {
			for _, v := range m.Iov {
				n += copy(p.ring[slot][n:], v)
			}
		} else {
			n = copy(p.ring[slot], m.Buf[:m.N])
		}
		p.lens[slot], p.from[slot] = n, c.addr
		p.count++
	}
	p.mu.Unlock()
	select {
	case p.ready <- struct{}{}:
	default:
	}
	return len(msgs), nil
}

func (c *memConn) PollBatch(msgs []netio.Message) (int, error) {
	if c.closed() {
		return 0, fmt.Errorf("mempipe: read %v: %w", c.addr, net.ErrClosed)
	}
	c.mu.Lock()
	k := 0
	for ; k < len(msgs) && c.count > 0; k++ {
		m := &msgs[k]
		m.N = copy(m.Buf, c.ring[c.head][:c.lens[c.head]])
		m.Addr, m.SegSize = c.from[c.head], 0
		c.head = (c.head + 1) % len(c.ring)
		c.count--
	}
	c.mu.Unlock()
	return k, nil
}

func (c *memConn) ReadBatch(msgs []netio.Message) (int, error) {
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

func (c *memConn) WaitReadable(timeout time.Duration) (bool, error) {
	if c.closed() {
		return false, fmt.Errorf("mempipe: wait %v: %w", c.addr, net.ErrClosed)
	}
	c.mu.Lock()
	n := c.count
	c.mu.Unlock()
	if n > 0 {
		return true, nil
	}
	var tc <-chan time.Time
	if timeout >= 0 {
		t := time.NewTimer(timeout)
		defer t.Stop()
		tc = t.C
	}
	select {
	case <-c.ready:
		return true, nil
	case <-tc:
		return false, nil
	case <-c.done:
		return false, fmt.Errorf("mempipe: wait %v: %w", c.addr, net.ErrClosed)
	}
}

// BenchmarkRCSendPingPong8InMemory is goverbs' own share of a busy-poll ping-pong: two
// busy-poll devices on an in-memory pipe, both driven from this goroutine the way
// `goverbs send_lat --busy-poll` drives each process (signaled 8-byte SENDs, send
// completions reaped as they come, a receive reposted per message). ns/op is one
// round trip of user-space work, two turnarounds; add two kernel UDP sends to
// approximate the loopback round trip.
func BenchmarkRCSendPingPong8InMemory(b *testing.B) {
	ea, ec := netip.MustParseAddrPort("127.10.0.2:4791"), netip.MustParseAddrPort("127.10.0.3:4791")
	ca, cc := memPipe(ea, ec, 256)
	a := newHostCfg(b, SoftConfig{Addr: ea.Addr(), Conn: ca, BusyPoll: true})
	c := newHostCfg(b, SoftConfig{Addr: ec.Addr(), Conn: cc, BusyPoll: true})
	pp := newPingPong(b, a, c, a.rcq, c.rcq)
	pp.ping.Flags |= SendSignaled
	pp.pong.Flags |= SendSignaled
	wcs := make([]WC, 32)
	var outA, outC int
	// reap polls a send CQ once, as perftest does after each post.
	reap := func(cq *CQ, out *int) {
		k, err := cq.Poll(wcs)
		if err != nil {
			b.Fatal(err)
		}
		for _, wc := range wcs[:k] {
			if wc.Status != WCSuccess {
				b.Fatalf("send completion %+v", wc)
			}
		}
		*out -= k
		if *out > 32 {
			b.Fatalf("%d sends not completed", *out)
		}
	}
	one := wcs[:1]
	// turn is one side's half: post the message and reap this side's send CQ; the peer
	// sees the message and reposts its receive.
	turn := func(q *QP, wr SendWR, out *int, scq, peerRCQ *CQ, peer *QP, peerRecv RecvWR) {
		if err := q.PostSend(wr); err != nil {
			b.Fatal(err)
		}
		*out++
		reap(scq, out)
		spin(b, peerRCQ, one)
		peer.PostRecv(peerRecv)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		turn(pp.qa, pp.ping, &outA, a.cq, c.rcq, pp.qc, pp.recvC)
		turn(pp.qc, pp.pong, &outC, c.cq, a.rcq, pp.qa, pp.recvA)
	}
}

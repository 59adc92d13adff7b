package rdmanet

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/goverbs/goverbs/verbs"
)

// The shape of one datagram socket (this package's choices within rsockets' protocol).
const (
	dgRecvN  = 256  // receives posted on the UD QP
	dgSendN  = 64   // sends in flight, each in its own slot of the send buffer
	dgQueueN = 512  // datagrams received and not yet read; more are dropped
	dgDests  = 4096 // peers remembered; a datagram to one more fails
	wrDgSend = 1 << 32
)

// ErrMessageTooLong is the error of a datagram longer than rsockets' datagrams may be:
// 2048 bytes with the header (2032 bytes of data on IPv4, 2020 on IPv6).
var ErrMessageTooLong = errors.New("rdmanet: datagram too long")

// PacketConn is a datagram socket over RDMA, speaking rsockets' datagram protocol
// (librdmacm's SOCK_DGRAM rsockets, as in its udpong): a UDP socket on the device's
// address, over which peers learn each other's UD QP number, and a UD QP over which the
// datagrams go once they have. It implements net.PacketConn. Datagrams may be lost, as
// UDP's, and arrive whole or not at all; one longer than a ReadFrom's buffer is cut.
type PacketConn struct {
	dev   *device
	udp   *net.UDPConn
	laddr netip.AddrPort
	v4    bool
	ch    *verbs.CompChannel
	cq    *verbs.CQ
	qp    *verbs.QP
	rmr   *verbs.MR // dgRecvN slots of grhLen+dgSlot
	smr   *verbs.MR // dgSendN slots of dgSlot
	sgid  uint8
	hdr   [udHdrLen6]byte // this socket's UD header
	hdrN  int

	mu    sync.Mutex
	dests map[netip.AddrPort]*dgDest
	free  []int         // free send slots
	room  chan struct{} // a token when a send slot frees

	queue    chan datagram
	rdl, wdl *deadline
	done     chan struct{}
	cancel   context.CancelFunc
	once     sync.Once
	closeErr error
	wg       sync.WaitGroup
	dropped  atomic.Uint64 // malformed datagrams, and those the queue had no room for
}

// dgDest is a peer: its UD QPN and the address handle to it, once learnt.
type dgDest struct {
	addr netip.Addr
	qpn  uint32
	ah   *verbs.AH
}

type datagram struct {
	from netip.AddrPort
	b    []byte
}

// ListenPacket opens a datagram socket at address ("host:port") on network "rdma": host
// is the IP address of an RDMA device (opened on demand, shared in the process), port
// a UDP port, 0 picking a free one (LocalAddr reports it). It is the socket of
// rsockets' datagram protocol, so it sends to and receives from C programs' SOCK_DGRAM
// rsockets. An error is a *net.OpError.
func ListenPacket(network, address string) (*PacketConn, error) {
	op := &net.OpError{Op: "listen", Net: network}
	c, err := listenPacket(network, address, op)
	if err != nil {
		op.Err = err
		return nil, op
	}
	return c, nil
}

func listenPacket(network, address string, op *net.OpError) (_ *PacketConn, err error) {
	laddr, err := deviceAddr(network, address, op)
	if err != nil {
		return nil, err
	}
	udp, err := net.ListenUDP("udp", net.UDPAddrFromAddrPort(laddr))
	if err != nil {
		return nil, err
	}
	la := udp.LocalAddr().(*net.UDPAddr).AddrPort()
	laddr = netip.AddrPortFrom(la.Addr().Unmap(), la.Port())
	op.Addr = &Addr{laddr}
	dev, err := acquireDevice(laddr.Addr())
	if err != nil {
		udp.Close()
		return nil, err
	}
	c := &PacketConn{dev: dev, udp: udp, laddr: laddr, v4: laddr.Addr().Is4(),
		dests: make(map[netip.AddrPort]*dgDest), room: make(chan struct{}, 1),
		queue: make(chan datagram, dgQueueN), rdl: newDeadline(), wdl: newDeadline(), done: make(chan struct{})}
	defer func() {
		if err != nil {
			c.release()
		}
	}()
	if err = c.makeQP(); err != nil {
		return nil, err
	}
	c.hdrN = putUDHeader(c.hdr[:], laddr)
	ctx, cancel := context.WithCancel(context.Background())
	c.cancel = cancel
	c.wg.Add(2)
	go c.udpLoop()
	go c.cqLoop(ctx)
	return c, nil
}

// makeQP makes the UD QP (to RTS, with rdma_cm's UDP Q_Key), its CQ and buffers, and
// posts the receives.
func (c *PacketConn) makeQP() (err error) {
	d := c.dev.dev
	want := verbs.GIDFromAddr(c.laddr.Addr())
	for i := 0; ; i++ {
		g, err := d.QueryGID(1, i)
		if err != nil {
			return fmt.Errorf("rdmanet: the device has no GID of %v", c.laddr.Addr())
		}
		if g == want {
			c.sgid = uint8(i)
			break
		}
	}
	c.ch = d.CreateCompChannel()
	if c.cq, err = d.CreateCQ(dgRecvN+dgSendN, c.ch); err != nil {
		return err
	}
	c.qp, err = c.dev.pd.CreateQP(verbs.QPInitAttr{Type: verbs.QPTypeUD, SendCQ: c.cq, RecvCQ: c.cq, SigAll: true,
		Cap: verbs.QPCap{MaxSendWR: dgSendN, MaxRecvWR: dgRecvN, MaxSendSGE: 1, MaxRecvSGE: 1}})
	if err != nil {
		return err
	}
	if err = c.qp.Modify(&verbs.QPAttr{State: verbs.QPStateInit, Port: 1, QKey: udpQKey},
		verbs.QPAttrState|verbs.QPAttrPKeyIndex|verbs.QPAttrPort|verbs.QPAttrQKey); err != nil {
		return err
	}
	if err = c.qp.Modify(&verbs.QPAttr{State: verbs.QPStateRTR}, verbs.QPAttrState); err != nil {
		return err
	}
	if err = c.qp.Modify(&verbs.QPAttr{State: verbs.QPStateRTS}, verbs.QPAttrState|verbs.QPAttrSQPSN); err != nil {
		return err
	}
	if c.rmr, err = c.dev.pd.RegMR(pageBuf(dgRecvN*(grhLen+dgSlot)), verbs.AccessLocalWrite); err != nil {
		return err
	}
	if c.smr, err = c.dev.pd.RegMR(pageBuf(dgSendN*dgSlot), 0); err != nil {
		return err
	}
	for i := 0; i < dgRecvN; i++ {
		if err = c.postRecv(i); err != nil {
			return err
		}
	}
	c.free = make([]int, 0, dgSendN)
	for i := dgSendN - 1; i >= 0; i-- {
		c.free = append(c.free, i)
	}
	return c.cq.RequestNotify(false)
}

func (c *PacketConn) postRecv(k int) error {
	return c.qp.PostRecv(verbs.RecvWR{ID: uint64(k), SGL: []verbs.SGE{c.rmr.SGE(k*(grhLen+dgSlot), grhLen+dgSlot)}})
}

// udpLoop reads the UDP socket: peers' QPNs, and their first datagrams.
func (c *PacketConn) udpLoop() {
	defer c.wg.Done()
	buf := make([]byte, dgSlot+udpHdrLen6)
	for {
		n, from, err := c.udp.ReadFromUDPAddrPort(buf)
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			continue // an ICMP error of an earlier send, say
		}
		c.udpIn(buf[:n], netip.AddrPortFrom(from.Addr().Unmap(), from.Port()))
	}
}

// udpIn handles a datagram of the UDP socket: a data message is answered with this
// socket's QPN and queued; either kind tells the sender's QPN.
func (c *PacketConn) udpIn(b []byte, from netip.AddrPort) {
	op, qpn, n, ok := parseUDPHeader(b, c.v4)
	if !ok || from.Addr().Is4() != c.v4 {
		c.dropped.Add(1)
		return
	}
	c.mu.Lock()
	d := c.dest(from)
	if d != nil {
		c.learn(d, qpn)
	}
	c.mu.Unlock()
	if d == nil {
		c.dropped.Add(1)
		return
	}
	if op == dgOpData {
		var h [udpHdrLen6]byte
		hn := putUDPHeader(h[:], dgOpCtrl, c.qp.QPN(), c.laddr.Addr())
		c.udp.WriteToUDPAddrPort(h[:hn], from) // lost, the peer asks again with its next datagram
		c.enqueue(from, b[n:])
	}
}

// dest returns from's entry, made if new (nil: too many peers). c.mu is held.
func (c *PacketConn) dest(to netip.AddrPort) *dgDest {
	d := c.dests[to]
	if d == nil && len(c.dests) < dgDests {
		d = &dgDest{addr: to.Addr()}
		c.dests[to] = d
	}
	return d
}

// learn records a peer's QPN and makes the address handle to it. c.mu is held.
func (c *PacketConn) learn(d *dgDest, qpn uint32) {
	if d.ah != nil && d.qpn == qpn {
		return
	}
	ah, err := c.dev.pd.CreateAH(verbs.AHAttr{DGID: verbs.GIDFromAddr(d.addr), SGIDIndex: c.sgid, HopLimit: 64, Port: 1})
	if err != nil {
		return // datagrams to it keep going over UDP
	}
	if d.ah != nil {
		d.ah.Close()
	}
	d.ah, d.qpn = ah, qpn
}

func (c *PacketConn) enqueue(from netip.AddrPort, p []byte) {
	select {
	case c.queue <- datagram{from: from, b: append([]byte(nil), p...)}:
	default:
		c.dropped.Add(1)
	}
}

// cqLoop takes the UD QP's completions: datagrams received, send slots freed.
func (c *PacketConn) cqLoop(ctx context.Context) {
	defer c.wg.Done()
	wcs := make([]verbs.WC, 32)
	for {
		n, err := c.cq.Poll(wcs)
		if err != nil {
			return
		}
		for i := range wcs[:n] {
			c.complete(&wcs[i])
		}
		if n > 0 {
			continue
		}
		cq, err := c.ch.Wait(ctx)
		if err != nil {
			return
		}
		cq.AckEvents(1)
		if cq.RequestNotify(false) != nil {
			return
		}
	}
}

func (c *PacketConn) complete(wc *verbs.WC) {
	if wc.ID&wrDgSend != 0 {
		c.mu.Lock()
		if len(c.free) < dgSendN {
			c.free = append(c.free, int(wc.ID&^wrDgSend))
		}
		c.mu.Unlock()
		select {
		case c.room <- struct{}{}:
		default:
		}
		return
	}
	k := int(wc.ID)
	if k < 0 || k >= dgRecvN {
		return
	}
	if wc.Status != verbs.WCSuccess {
		if wc.Status != verbs.WCWRFlushErr {
			c.postRecv(k)
		}
		return
	}
	if wc.ByteLen < grhLen || wc.ByteLen > grhLen+dgSlot {
		c.dropped.Add(1)
	} else {
		off := k * (grhLen + dgSlot)
		b := c.rmr.Buf()[off+grhLen : off+int(wc.ByteLen)]
		if from, n, ok := parseUDHeader(b, c.v4); ok {
			c.enqueue(from, b[n:])
		} else {
			c.dropped.Add(1)
		}
	}
	c.postRecv(k)
}

// ReadFrom reads the next datagram into p (cut to len(p)) and says who sent it, as an
// *Addr: the sender's address and UDP port.
func (c *PacketConn) ReadFrom(p []byte) (int, net.Addr, error) {
	n, from, err := c.ReadFromAddrPort(p)
	if err != nil {
		return n, nil, err
	}
	return n, &Addr{from}, nil
}

// ReadFromAddrPort is ReadFrom with the sender as a netip.AddrPort.
func (c *PacketConn) ReadFromAddrPort(p []byte) (int, netip.AddrPort, error) {
	select {
	case <-c.done:
		return 0, netip.AddrPort{}, c.opErr("read", nil, net.ErrClosed)
	default:
	}
	select {
	case d := <-c.queue:
		return copy(p, d.b), d.from, nil
	default:
	}
	select {
	case d := <-c.queue:
		return copy(p, d.b), d.from, nil
	case <-c.rdl.wait():
		return 0, netip.AddrPort{}, c.opErr("read", nil, os.ErrDeadlineExceeded)
	case <-c.done:
		return 0, netip.AddrPort{}, c.opErr("read", nil, net.ErrClosed)
	}
}

// WriteTo sends p as one datagram to addr, an *Addr or a *net.UDPAddr (a peer's
// address and UDP port).
func (c *PacketConn) WriteTo(p []byte, addr net.Addr) (int, error) {
	var to netip.AddrPort
	switch a := addr.(type) {
	case *Addr:
		to = a.AddrPort
	case *net.UDPAddr:
		to = a.AddrPort()
	default:
		return 0, c.opErr("write", addr, fmt.Errorf("rdmanet: %T is not a datagram address", addr))
	}
	return c.WriteToAddrPort(p, to)
}

// WriteToAddrPort is WriteTo with the peer as a netip.AddrPort.
func (c *PacketConn) WriteToAddrPort(p []byte, to netip.AddrPort) (int, error) {
	to = netip.AddrPortFrom(to.Addr().Unmap(), to.Port())
	select {
	case <-c.done:
		return 0, c.opErr("write", &Addr{to}, net.ErrClosed)
	case <-c.wdl.wait():
		return 0, c.opErr("write", &Addr{to}, os.ErrDeadlineExceeded)
	default:
	}
	if !to.IsValid() || to.Addr().Is4() != c.v4 {
		return 0, c.opErr("write", &Addr{to}, errors.New("rdmanet: not an address of the socket's family"))
	}
	if len(p) > dgSlot-udpHdrLen(c.laddr.Addr()) {
		return 0, c.opErr("write", &Addr{to}, ErrMessageTooLong)
	}
	c.mu.Lock()
	d := c.dest(to)
	if d == nil {
		c.mu.Unlock()
		return 0, c.opErr("write", &Addr{to}, errors.New("rdmanet: too many peers"))
	}
	if d.ah == nil { // its QPN is not known yet: over UDP, which asks for it
		c.mu.Unlock()
		b := make([]byte, udpHdrLen6+len(p))
		hn := putUDPHeader(b, dgOpData, c.qp.QPN(), c.laddr.Addr())
		n := copy(b[hn:], p)
		if _, err := c.udp.WriteToUDPAddrPort(b[:hn+n], to); err != nil {
			return 0, c.opErr("write", &Addr{to}, err)
		}
		return len(p), nil
	}
	for len(c.free) == 0 {
		c.mu.Unlock()
		select {
		case <-c.room:
		case <-c.wdl.wait():
			return 0, c.opErr("write", &Addr{to}, os.ErrDeadlineExceeded)
		case <-c.done:
			return 0, c.opErr("write", &Addr{to}, net.ErrClosed)
		case <-time.After(100 * time.Millisecond): // a token taken by another writer
		}
		c.mu.Lock()
	}
	k := c.free[len(c.free)-1]
	c.free = c.free[:len(c.free)-1]
	slot := c.smr.Buf()[k*dgSlot : (k+1)*dgSlot]
	copy(slot, c.hdr[:c.hdrN])
	n := c.hdrN + copy(slot[c.hdrN:], p)
	err := c.qp.PostSend(verbs.SendWR{ID: wrDgSend | uint64(k), Opcode: verbs.WRSend, Flags: verbs.SendSignaled,
		SGL: []verbs.SGE{c.smr.SGE(k*dgSlot, n)}, AH: d.ah, RemoteQPN: d.qpn, RemoteQKey: udpQKey})
	if err != nil {
		c.free = append(c.free, k)
	}
	c.mu.Unlock()
	if err != nil {
		return 0, c.opErr("write", &Addr{to}, err)
	}
	return len(p), nil
}

func (c *PacketConn) opErr(op string, addr net.Addr, err error) error {
	return &net.OpError{Op: op, Net: Network, Source: &Addr{c.laddr}, Addr: addr, Err: err}
}

// LocalAddr is the socket's address: the device's and the UDP port.
func (c *PacketConn) LocalAddr() net.Addr { return &Addr{c.laddr} }

// SetDeadline sets the read and write deadlines.
func (c *PacketConn) SetDeadline(t time.Time) error {
	c.rdl.set(t)
	c.wdl.set(t)
	return nil
}

// SetReadDeadline sets the deadline of ReadFrom; the zero time means none.
func (c *PacketConn) SetReadDeadline(t time.Time) error { c.rdl.set(t); return nil }

// SetWriteDeadline sets the deadline of WriteTo (which waits only for a free send
// slot); the zero time means none.
func (c *PacketConn) SetWriteDeadline(t time.Time) error { c.wdl.set(t); return nil }

// Close closes the socket: blocked reads and writes return net.ErrClosed. The datagrams
// already posted go first (1 s at most), since nothing of them outlives the QP.
func (c *PacketConn) Close() error {
	c.once.Do(func() {
		close(c.done)
		end := time.Now().Add(time.Second)
		for time.Now().Before(end) {
			c.mu.Lock()
			idle := len(c.free) == dgSendN
			c.mu.Unlock()
			if idle {
				break
			}
			time.Sleep(time.Millisecond)
		}
		c.cancel()
		c.closeErr = c.udp.Close()
		c.wg.Wait()
		c.release()
	})
	if c.closeErr != nil {
		return c.opErr("close", nil, c.closeErr)
	}
	return nil
}

// release closes what the socket made and gives its device back.
func (c *PacketConn) release() {
	if c.qp != nil {
		c.qp.Close()
	}
	for _, d := range c.dests {
		if d.ah != nil {
			d.ah.Close()
		}
	}
	for _, mr := range []*verbs.MR{c.rmr, c.smr} {
		if mr != nil {
			mr.Close()
		}
	}
	if c.cq != nil {
		c.cq.Close()
	}
	if c.ch != nil {
		c.ch.Close()
	}
	if c.udp != nil {
		c.udp.Close()
	}
	c.dev.release()
}

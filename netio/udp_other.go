//go:build !linux

package netio

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
)

// udpConn is the portable backend: one datagram per system call, no
// offloads. Identification/DF behaviour is whatever the OS does, so
// IPv4IDZero is false.
type udpConn struct {
	pc     *net.UDPConn
	local  netip.AddrPort
	v6     bool
	closed atomic.Bool
	wmu    sync.Mutex
	rcvBuf int
	sndBuf int
}

// ListenUDP binds addr with the standard library; see the Linux version.
func ListenUDP(addr netip.AddrPort, opts UDPOptions) (Conn, error) {
	network, addr, err := listenNetwork(addr)
	if err != nil {
		return nil, err
	}
	pc, err := net.ListenUDP(network, net.UDPAddrFromAddrPort(addr))
	if err != nil {
		return nil, fmt.Errorf("netio: listen %v: %w", addr, err)
	}
	c := &udpConn{pc: pc, v6: network == "udp6"}
	c.local = pc.LocalAddr().(*net.UDPAddr).AddrPort()
	if !c.v6 {
		c.local = netip.AddrPortFrom(c.local.Addr().Unmap(), c.local.Port())
	}
	rw, sw := opts.bufSizes()
	if pc.SetReadBuffer(rw) == nil {
		c.rcvBuf = rw
	}
	if pc.SetWriteBuffer(sw) == nil {
		c.sndBuf = sw
	}
	return c, nil
}

func (c *udpConn) LocalAddr() netip.AddrPort { return c.local }

// SourceAddr is LocalAddr: this backend sends from its one socket.
func (c *udpConn) SourceAddr() netip.AddrPort { return c.local }

func (c *udpConn) Caps() Caps {
	return Caps{BatchSize: 1, MaxSegments: 1, RecvBuf: c.rcvBuf, SendBuf: c.sndBuf}
}

func (c *udpConn) Close() error {
	if c.closed.Swap(true) {
		return net.ErrClosed
	}
	return c.pc.Close()
}

// ReadBatch reads one datagram.
func (c *udpConn) ReadBatch(msgs []Message) (int, error) {
	if len(msgs) == 0 {
		return 0, nil
	}
	m := &msgs[0]
	n, ap, err := c.pc.ReadFromUDPAddrPort(m.Buf)
	for err != nil && truncatedErr(err) {
		// Cut to the buffer and without its sender (Windows): of no use to anyone (a
		// RoCEv2 packet's ICRC is at its end), so it is dropped, and the next one read.
		n, ap, err = c.pc.ReadFromUDPAddrPort(m.Buf)
	}
	if err != nil {
		if c.closed.Load() || errors.Is(err, net.ErrClosed) {
			return 0, fmt.Errorf("netio: read %v: %w", c.local, net.ErrClosed)
		}
		return 0, err
	}
	if !c.v6 {
		ap = netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port())
	}
	m.N, m.Addr, m.SegSize = n, ap, 0
	return 1, nil
}

// WriteBatch sends each datagram (splitting SegSize runs) with one call each.
func (c *udpConn) WriteBatch(msgs []Message) (int, error) {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	var first *SendError
	skipped := 0
	for i := range msgs {
		m := &msgs[i]
		a := m.Addr.Addr()
		if a.Is4() != !c.v6 && !(a.Is4In6() && !c.v6) {
			skipped++
			if first == nil {
				first = &SendError{Index: i, Addr: m.Addr, Err: ErrAddressFamily}
			}
			continue
		}
		var err error
		m.Segments(func(_ int, seg []byte) bool {
			_, err = c.pc.WriteToUDPAddrPort(seg, m.Addr)
			if err != nil && (c.closed.Load() || errors.Is(err, net.ErrClosed)) {
				return false
			}
			if err != nil {
				skipped++
				if first == nil {
					first = &SendError{Index: i, Addr: m.Addr, Err: err}
				}
				err = nil
			}
			return true
		})
		if err != nil {
			return i, fmt.Errorf("netio: write %v: %w", c.local, net.ErrClosed)
		}
	}
	if first != nil {
		first.Skipped = skipped
		return len(msgs), first
	}
	return len(msgs), nil
}

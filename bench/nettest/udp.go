package main

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"os"
	"sync/atomic"
	"syscall"
	"time"
)

// udpLat is the UDP ping-pong: an echo server, or a client that times round trips.
func udpLat(o options) error {
	if o.serving() {
		return udpEcho(o)
	}
	if o.rcWire {
		return udpLatRC(o)
	}
	c, err := net.DialUDP("udp", net.UDPAddrFromAddrPort(o.local()), net.UDPAddrFromAddrPort(o.remote()))
	if err != nil {
		return err
	}
	defer c.Close()
	msg, in := make([]byte, o.size), make([]byte, 65536)
	if err := awaitEcho(c, msg, in); err != nil {
		return err
	}
	deadline := runDeadline(o)
	var s pingIO = netpollIO{c}
	if o.busy {
		if s, err = newSpinner(c, deadline); err != nil {
			return err
		}
	} else {
		c.SetReadDeadline(deadline)
	}
	return reportLatency(o, pingTurn(s, msg, in))
}

// pingIO is a ping-pong's I/O: the UDPConn through the netpoller (netpollIO), the
// spinner, or --rc-wire's.
type pingIO interface {
	read(b []byte) (int, error)
	write(b []byte) error
}

// netpollIO is a connected UDPConn's Read and Write, which wait in the netpoller.
type netpollIO struct{ c *net.UDPConn }

func (n netpollIO) read(b []byte) (int, error) { return n.c.Read(b) }
func (n netpollIO) write(b []byte) error {
	_, err := n.c.Write(b)
	return err
}

// pingTurn is one turn of a ping-pong over s: send msg, read until its echo comes.
func pingTurn(s pingIO, msg, in []byte) func(i int) error {
	return func(i int) error {
		stamp(msg, i+1)
		if err := s.write(msg); err != nil {
			return err
		}
		for {
			n, err := s.read(in)
			if err != nil {
				return lost(err)
			}
			if echoes(in[:n], msg) {
				return nil
			}
		}
	}
}

// reportLatency runs o.iters turns and prints the latency row.
func reportLatency(o options, turn func(i int) error) error {
	rtts, err := pingPong(o.iters, turn)
	if err != nil {
		return err
	}
	emit(latencyRow(o.size, rtts))
	return nil
}

// udpEcho answers every datagram with itself until it is killed (or, busy-polling, until
// its one client has gone).
func udpEcho(o options) error {
	c, err := net.ListenUDP("udp", net.UDPAddrFromAddrPort(o.local()))
	if err != nil {
		return err
	}
	defer c.Close()
	buf := make([]byte, 65536)
	if !o.busy {
		for {
			n, from, err := c.ReadFromUDPAddrPort(buf)
			if err != nil {
				return err
			}
			if _, err := c.WriteToUDPAddrPort(buf[:n], from); err != nil {
				return err
			}
		}
	}
	// The first datagram names the client: connect to it, then spin on read and write.
	n, from, err := c.ReadFromUDPAddrPort(buf)
	if err != nil {
		return err
	}
	if o.rcWire {
		return rcEcho(c, buf, n, from)
	}
	s, err := newSpinner(c, time.Time{})
	if err != nil {
		return err
	}
	if err := s.connect(from); err != nil {
		return err
	}
	for {
		if err := s.write(buf[:n]); err != nil {
			return clientGone(err)
		}
		if n, err = s.read(buf); err != nil {
			return clientGone(err)
		}
	}
}

// awaitEcho pings the server until it answers (it may still be starting), then drains
// the answers to the other pings, so that the measurement starts with nothing in flight.
func awaitEcho(c *net.UDPConn, msg, in []byte) error {
	stamp(msg, 0)
	for start := time.Now(); ; {
		if time.Since(start) > 10*time.Second {
			return errors.New("no answer from the server for 10 s")
		}
		if _, err := c.Write(msg); err != nil && !errors.Is(err, syscall.ECONNREFUSED) {
			return err
		}
		c.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
		_, err := c.Read(in)
		if err == nil {
			break
		}
		if errors.Is(err, syscall.ECONNREFUSED) { // no server yet: an ICMP port unreachable
			time.Sleep(100 * time.Millisecond)
		} else if !errors.Is(err, os.ErrDeadlineExceeded) {
			return err
		}
	}
	for {
		c.SetReadDeadline(time.Now().Add(20 * time.Millisecond))
		if _, err := c.Read(in); err != nil {
			c.SetReadDeadline(time.Time{})
			if errors.Is(err, os.ErrDeadlineExceeded) {
				return nil
			}
			return err
		}
	}
}

// stamp writes the turn number into the message (when it has room), so that the client
// can tell its echo from a late answer to an earlier ping: taking one for the other
// would time half a round trip.
func stamp(msg []byte, turn int) {
	if len(msg) >= 8 {
		binary.LittleEndian.PutUint64(msg, uint64(turn))
	}
}

// echoes reports whether got is the echo of msg.
func echoes(got, msg []byte) bool {
	return len(got) == len(msg) && bytes.Equal(got[:min(8, len(got))], msg[:min(8, len(msg))])
}

func lost(err error) error {
	if errors.Is(err, os.ErrDeadlineExceeded) {
		return errors.New("no answer: a datagram was lost (the test has no retransmission)")
	}
	return err
}

// clientGone ends a busy echo quietly when its client has gone: its connected socket
// then reports the ICMP port unreachable that an echo to the closed port earned.
func clientGone(err error) error {
	if errors.Is(err, syscall.ECONNREFUSED) {
		return nil
	}
	return err
}

// udpRate is the message-rate baseline: the client sends SIZE-byte datagrams in a plain
// loop for the duration, one write(2) each; the server counts what arrives and, asked on
// a TCP connection beside the datagrams, reports the count.
func udpRate(o options) error {
	if o.serving() {
		return udpCount(o)
	}
	ctl, err := dialTCP(o)
	if err != nil {
		return err
	}
	defer ctl.Close()
	c, err := net.DialUDP("udp", net.UDPAddrFromAddrPort(o.local()), net.UDPAddrFromAddrPort(o.remote()))
	if err != nil {
		return err
	}
	defer c.Close()
	msg := make([]byte, o.size)
	sent := 0
	start := time.Now()
	for time.Since(start) < o.dur {
		if _, err := c.Write(msg); err != nil {
			return err
		}
		sent++
	}
	el := time.Since(start)
	got, err := exchangeCounts(ctl, int64(sent))
	if err != nil {
		return err
	}
	emit(map[string]float64{"bytes": float64(o.size), "iterations": float64(got), "sent": float64(sent),
		"msg_rate_mpps": float64(got) / el.Seconds() / 1e6,
		"bw_avg_mib_s":  float64(got) * float64(o.size) / el.Seconds() / (1 << 20)})
	return nil
}

// udpCount serves one udp_rate client: it counts datagrams.
func udpCount(o options) error {
	c, err := net.ListenUDP("udp", net.UDPAddrFromAddrPort(o.local()))
	if err != nil {
		return err
	}
	defer c.Close()
	return serveCount(o, c, func(buf []byte) (int64, error) {
		_, err := c.Read(buf)
		return 1, err
	})
}

// serveCount serves one counting client (udp_rate, udp_gso_bw) on c: it takes the
// client's control connection on the server's address, adds up what read returns
// (datagrams or bytes) until the client says it has finished sending and what is still
// queued has been read, and answers with the total.
func serveCount(o options, c *net.UDPConn, read func(buf []byte) (int64, error)) error {
	// A receiver expecting a flood asks for a large buffer; the kernel caps it at
	// net.core.rmem_max.
	c.SetReadBuffer(4 << 20)
	ln, err := net.ListenTCP("tcp", net.TCPAddrFromAddrPort(o.local()))
	if err != nil {
		return err
	}
	ctl, err := ln.AcceptTCP()
	ln.Close()
	if err != nil {
		return err
	}
	defer ctl.Close()
	var got atomic.Int64
	go func() {
		buf := make([]byte, 65536)
		for {
			n, err := read(buf)
			if err != nil {
				return // c is closed once the count has been sent
			}
			got.Add(n)
		}
	}()
	var sent int64
	if _, err := fmt.Fscan(bufio.NewReader(ctl), &sent); err != nil {
		return fmt.Errorf("reading the client's count: %v", err)
	}
	// Let what is still queued in the socket be read before counting.
	for prev := int64(-1); got.Load() != prev; time.Sleep(20 * time.Millisecond) {
		prev = got.Load()
	}
	_, err = fmt.Fprintf(ctl, "%d\n", got.Load())
	return err
}

// exchangeCounts tells a counting server (serveCount) how much the client sent and
// returns how much arrived.
func exchangeCounts(ctl *net.TCPConn, sent int64) (int64, error) {
	if _, err := fmt.Fprintf(ctl, "%d\n", sent); err != nil {
		return 0, err
	}
	var got int64
	if _, err := fmt.Fscan(bufio.NewReader(ctl), &got); err != nil {
		return 0, fmt.Errorf("reading the server's count: %v", err)
	}
	return got, nil
}

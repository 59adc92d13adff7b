package main

import (
	"errors"
	"io"
	"net"
	"time"
)

// acceptOne listens on the server's address and takes one connection.
func acceptOne(o options) (*net.TCPConn, error) {
	ln, err := net.ListenTCP("tcp", net.TCPAddrFromAddrPort(o.local()))
	if err != nil {
		return nil, err
	}
	defer ln.Close()
	return ln.AcceptTCP()
}

// tcpBW is the bandwidth baseline: one stream of SIZE-byte writes for the duration,
// timed until the receiver has read it all.
func tcpBW(o options) error {
	if o.serving() {
		c, err := acceptOne(o)
		if err != nil {
			return err
		}
		buf := make([]byte, 64<<10)
		for {
			if _, err := c.Read(buf); err != nil {
				if errors.Is(err, io.EOF) {
					return c.Close() // tells the client that everything arrived
				}
				return err
			}
		}
	}
	c, err := dialTCP(o)
	if err != nil {
		return err
	}
	defer c.Close()
	buf := make([]byte, o.size)
	writes := 0
	start := time.Now()
	for time.Since(start) < o.dur {
		if _, err := c.Write(buf); err != nil {
			return err
		}
		writes++
	}
	if err := c.CloseWrite(); err != nil {
		return err
	}
	c.SetReadDeadline(time.Now().Add(30 * time.Second))
	if _, err := io.Copy(io.Discard, c); err != nil { // until the server's close
		return err
	}
	el := time.Since(start)
	emit(map[string]float64{"bytes": float64(o.size), "iterations": float64(writes),
		"bw_avg_mib_s":  float64(writes) * float64(o.size) / el.Seconds() / (1 << 20),
		"msg_rate_mpps": float64(writes) / el.Seconds() / 1e6})
	return nil
}

// tcpLat is the request/response baseline on one TCP connection.
func tcpLat(o options) error {
	if o.serving() {
		c, err := acceptOne(o)
		if err != nil {
			return err
		}
		defer c.Close()
		buf := make([]byte, o.size)
		if o.busy {
			s, err := newSpinner(c, time.Time{})
			if err != nil {
				return err
			}
			for {
				if err := s.readFull(buf); err != nil {
					return ignoreEOF(err)
				}
				if err := s.write(buf); err != nil {
					return err
				}
			}
		}
		for {
			if _, err := io.ReadFull(c, buf); err != nil {
				return ignoreEOF(err)
			}
			if _, err := c.Write(buf); err != nil {
				return err
			}
		}
	}
	c, err := dialTCP(o)
	if err != nil {
		return err
	}
	defer c.Close()
	msg, in := make([]byte, o.size), make([]byte, o.size)
	deadline := runDeadline(o)
	var turn func(int) error
	if o.busy {
		s, err := newSpinner(c, deadline)
		if err != nil {
			return err
		}
		turn = func(int) error {
			if err := s.write(msg); err != nil {
				return err
			}
			return s.readFull(in)
		}
	} else {
		c.SetReadDeadline(deadline)
		turn = func(int) error {
			if _, err := c.Write(msg); err != nil {
				return err
			}
			_, err := io.ReadFull(c, in)
			return err
		}
	}
	return reportLatency(o, turn)
}

// ignoreEOF ends a server quietly when its client closes the connection.
func ignoreEOF(err error) error {
	if errors.Is(err, io.EOF) {
		return nil
	}
	return err
}

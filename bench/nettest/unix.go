package main

import (
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
)

// unixPath is where unix_lat's server listens: a socket named after --bind and the port,
// so that a client finds it by the same arguments as the other tests' servers.
func unixPath(o options) string {
	return filepath.Join(os.TempDir(), fmt.Sprintf("nettest-%s-%d.sock", o.serverAddr(), o.port))
}

// unixLat is the same-host baseline of bench/samehost.sh: a SIZE-byte request/response
// on one unix stream socket, both sides blocked in the netpoller, as a Go programmer
// connects two processes of one machine without a network stack.
func unixLat(o options) error {
	path := unixPath(o)
	if o.serving() {
		os.Remove(path)
		l, err := net.Listen("unix", path)
		if err != nil {
			return err
		}
		defer l.Close()
		c, err := l.Accept()
		if err != nil {
			return err
		}
		defer c.Close()
		buf := make([]byte, o.size)
		for {
			if _, err := io.ReadFull(c, buf); err != nil {
				return ignoreEOF(err)
			}
			if _, err := c.Write(buf); err != nil {
				return err
			}
		}
	}
	c, err := net.Dial("unix", path)
	if err != nil {
		return err
	}
	defer c.Close()
	msg, in := make([]byte, o.size), make([]byte, o.size)
	c.SetReadDeadline(runDeadline(o))
	return reportLatency(o, func(int) error {
		if _, err := c.Write(msg); err != nil {
			return err
		}
		_, err := io.ReadFull(c, in)
		return err
	})
}

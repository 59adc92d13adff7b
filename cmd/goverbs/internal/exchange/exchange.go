// Package exchange is the out-of-band TCP connection over which two tools trade their
// QPs' facts before any RDMA can flow, as rdma-core's and perftest's tools do: listening,
// dialing, and reads and writes bounded in time, with errors a user can act on. Its
// subpackages are the formats spoken over it.
package exchange

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"strconv"
	"syscall"
	"time"
)

// The tools' out-of-band connection: TCP, with the timeouts that keep a tool from
// hanging on a peer that went away.

const (
	// DefaultPort is rdma-core's and perftest's exchange port.
	DefaultPort = 18515
	dialTimeout = 5 * time.Second
	ioTimeout   = 30 * time.Second
)

// Listen opens the server's TCP socket for the exchange on the device's address.
func Listen(addr netip.Addr, port int) (net.Listener, error) {
	if port <= 0 || port > 65535 {
		return nil, fmt.Errorf("invalid TCP port %d", port)
	}
	l, err := net.Listen("tcp", netip.AddrPortFrom(addr, uint16(port)).String())
	if err != nil {
		if errors.Is(err, syscall.EADDRINUSE) {
			return nil, fmt.Errorf("TCP port %d on %s is in use (another server running? choose another with -p)", port, addr)
		}
		return nil, fmt.Errorf("listen for the exchange: %v", err)
	}
	return l, nil
}

// Accept waits for the one client.
func Accept(l net.Listener) (net.Conn, error) {
	c, err := l.Accept()
	l.Close()
	if err != nil {
		return nil, fmt.Errorf("accept: %v", err)
	}
	return c, nil
}

// Dial connects to the server's exchange port with a bounded timeout.
func Dial(server string, port int) (net.Conn, error) {
	if port <= 0 || port > 65535 {
		return nil, fmt.Errorf("invalid TCP port %d", port)
	}
	target := net.JoinHostPort(server, strconv.Itoa(port))
	c, err := net.DialTimeout("tcp", target, dialTimeout)
	if err != nil {
		switch {
		case errors.Is(err, syscall.ECONNREFUSED):
			return nil, fmt.Errorf("couldn't connect to %s: connection refused (is the server running?)", target)
		case os.IsTimeout(err):
			return nil, fmt.Errorf("couldn't connect to %s: no answer within %v", target, dialTimeout)
		}
		var dnsErr *net.DNSError
		if errors.As(err, &dnsErr) {
			return nil, fmt.Errorf("couldn't resolve %s", server)
		}
		return nil, fmt.Errorf("couldn't connect to %s: %v", target, err)
	}
	return c, nil
}

// ReadFull reads exactly len(b) bytes within ioTimeout.
func ReadFull(c net.Conn, b []byte, what string) error {
	c.SetReadDeadline(time.Now().Add(ioTimeout))
	if _, err := io.ReadFull(c, b); err != nil {
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			return fmt.Errorf("couldn't read %s: the peer closed the connection (does it speak the same exchange format?)", what)
		}
		if os.IsTimeout(err) {
			return fmt.Errorf("couldn't read %s: no answer within %v", what, ioTimeout)
		}
		return fmt.Errorf("couldn't read %s: %v", what, err)
	}
	return nil
}

// WriteAll writes b within the I/O timeout; what names b in the error.
func WriteAll(c net.Conn, b []byte, what string) error {
	c.SetWriteDeadline(time.Now().Add(ioTimeout))
	if _, err := c.Write(b); err != nil {
		return fmt.Errorf("couldn't send %s: %v", what, err)
	}
	return nil
}

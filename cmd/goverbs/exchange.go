package main

import (
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"strconv"
	"syscall"
	"time"

	"github.com/goverbs/goverbs/verbs"
)

// The out-of-band exchange of the rdma-core ping-pongs (libibverbs/examples/pingpong.c):
// over TCP, each side sends one 52-byte record "LLLL:QQQQQQ:PPPPPP:GGGG…" — LID, QPN and
// PSN in hex, the GID as 32 hex digits (its 16 bytes in order) — NUL-terminated. The
// client writes its record, reads the server's and writes "done\x00".

const (
	ppRecordLen  = 52
	dialTimeout  = 5 * time.Second
	ioTimeout    = 30 * time.Second
	defaultTCPPt = 18515
)

// dest is one side's connection facts.
type dest struct {
	lid uint16
	qpn uint32
	psn uint32
	gid verbs.GID
}

func (d dest) record() []byte {
	s := fmt.Sprintf("%04x:%06x:%06x:%s", d.lid, d.qpn&0xffffff, d.psn&0xffffff, hex.EncodeToString(d.gid[:]))
	b := make([]byte, ppRecordLen)
	copy(b, s)
	return b
}

var errForeignPeer = errors.New("the peer does not speak the rdma-core ping-pong exchange format (52-byte LID:QPN:PSN:GID records)")

func parseRecord(b []byte) (dest, error) {
	if len(b) != ppRecordLen || b[4] != ':' || b[11] != ':' || b[18] != ':' || b[51] != 0 {
		return dest{}, errForeignPeer
	}
	var d dest
	lid, err1 := strconv.ParseUint(string(b[0:4]), 16, 16)
	qpn, err2 := strconv.ParseUint(string(b[5:11]), 16, 32)
	psn, err3 := strconv.ParseUint(string(b[12:18]), 16, 32)
	_, err4 := hex.Decode(d.gid[:], b[19:51])
	if err1 != nil || err2 != nil || err3 != nil || err4 != nil {
		return dest{}, errForeignPeer
	}
	d.lid, d.qpn, d.psn = uint16(lid), uint32(qpn), uint32(psn)
	return d, nil
}

// listen opens the server's TCP socket for the exchange on the device's address.
func listen(addr netip.Addr, port int) (net.Listener, error) {
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

// accept waits for the one client.
func accept(l net.Listener) (net.Conn, error) {
	c, err := l.Accept()
	l.Close()
	if err != nil {
		return nil, fmt.Errorf("accept: %v", err)
	}
	return c, nil
}

// dial connects to the server's exchange port with a bounded timeout.
func dial(server string, port int) (net.Conn, error) {
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

// readFull reads exactly len(b) bytes within ioTimeout.
func readFull(c net.Conn, b []byte, what string) error {
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

func writeAll(c net.Conn, b []byte, what string) error {
	c.SetWriteDeadline(time.Now().Add(ioTimeout))
	if _, err := c.Write(b); err != nil {
		return fmt.Errorf("couldn't send %s: %v", what, err)
	}
	return nil
}

// clientExchange sends n local records and reads n remote ones, then writes "done".
func clientExchange(c net.Conn, local []dest) ([]dest, error) {
	for _, d := range local {
		if err := writeAll(c, d.record(), "local address"); err != nil {
			return nil, err
		}
	}
	remote, err := readRemote(c, len(local))
	if err != nil {
		return nil, err
	}
	if err := writeAll(c, []byte("done\x00"), "done"); err != nil {
		return nil, err
	}
	return remote, nil
}

// readRemote reads n records from the peer.
func readRemote(c net.Conn, n int) ([]dest, error) {
	remote := make([]dest, n)
	buf := make([]byte, ppRecordLen)
	for i := range remote {
		// The first five bytes tell a foreign peer at once ("LID:" or not): a
		// perftest-style peer sends 16 bytes of version and waits for an answer.
		if err := readFull(c, buf[:5], "remote address"); err != nil {
			return nil, err
		}
		if buf[4] != ':' {
			return nil, errForeignPeer
		}
		if err := readFull(c, buf[5:], "remote address"); err != nil {
			return nil, err
		}
		d, err := parseRecord(buf)
		if err != nil {
			return nil, err
		}
		remote[i] = d
	}
	return remote, nil
}

// serverFinish writes the server's records and waits for the client's "done".
func serverFinish(c net.Conn, local []dest) error {
	for _, d := range local {
		if err := writeAll(c, d.record(), "local address"); err != nil {
			return err
		}
	}
	buf := make([]byte, 5)
	return readFull(c, buf, "the client's done")
}

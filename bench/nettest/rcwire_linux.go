package main

import (
	"errors"
	"net"
	"net/netip"
	"os"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// rcAckLen is the size of an RC ACK's UDP payload: BTH, AETH and ICRC.
const rcAckLen = 20

// rcWire sends and receives as an RC ping-pong's RoCEv2 datagrams travel (udp_lat
// --busy-poll --rc-wire): one sendmmsg of the message and an ACK-sized datagram to the
// peer's address on an unconnected socket with DF set, and spinning reads that skip
// ACK-sized datagrams.
type rcWire struct {
	*spinner // the descriptor and the spinning reads; its deadline bounds them
	peer     unix.RawSockaddrInet4
	ack      [rcAckLen]byte
	iovs     [2]unix.Iovec
	hdrs     [2]unix.Mmsghdr
}

func newRCWire(c *net.UDPConn, peer netip.AddrPort, deadline time.Time) (*rcWire, error) {
	if !peer.Addr().Is4() {
		return nil, errors.New("--rc-wire: IPv4 only")
	}
	s, err := newSpinner(c, deadline)
	if err != nil {
		return nil, err
	}
	w := &rcWire{spinner: s}
	// DF set, so the kernel leaves the Identification at 0, as a RoCEv2 sender needs.
	if err := unix.SetsockoptInt(w.fd, unix.IPPROTO_IP, unix.IP_MTU_DISCOVER, unix.IP_PMTUDISC_DO); err != nil {
		return nil, err
	}
	w.peer = unix.RawSockaddrInet4{Family: unix.AF_INET, Addr: peer.Addr().As4()}
	p := (*[2]byte)(unsafe.Pointer(&w.peer.Port))
	p[0], p[1] = byte(peer.Port()>>8), byte(peer.Port())
	for i := range w.hdrs {
		w.hdrs[i].Hdr.Name = (*byte)(unsafe.Pointer(&w.peer))
		w.hdrs[i].Hdr.Namelen = unix.SizeofSockaddrInet4
		w.hdrs[i].Hdr.Iov = &w.iovs[i]
		w.hdrs[i].Hdr.Iovlen = 1
	}
	w.iovs[1].Base = &w.ack[0]
	w.iovs[1].SetLen(rcAckLen)
	return w, nil
}

// write sends msg and an ACK-sized datagram behind it in one sendmmsg.
func (w *rcWire) write(msg []byte) error {
	w.iovs[0].Base = &msg[0]
	w.iovs[0].SetLen(len(msg))
	for sent := 0; sent < len(w.hdrs); {
		n, _, e := unix.Syscall6(unix.SYS_SENDMMSG, uintptr(w.fd), uintptr(unsafe.Pointer(&w.hdrs[sent])),
			uintptr(len(w.hdrs)-sent), unix.MSG_DONTWAIT, 0, 0)
		switch {
		case e == unix.EAGAIN || e == unix.EINTR:
		case e != 0:
			return e
		default:
			sent += int(n)
		}
	}
	return nil
}

// read spins until a datagram other than an ACK-sized one arrives and returns its length.
func (w *rcWire) read(b []byte) (int, error) {
	for {
		n, err := w.spinner.read(b)
		if err != nil || n != rcAckLen {
			return n, err
		}
	}
}

// udpLatRC is udp_lat's client with --rc-wire: an unconnected socket on the client's
// address, the same ping-pong.
func udpLatRC(o options) error {
	c, err := net.ListenUDP("udp", net.UDPAddrFromAddrPort(o.local()))
	if err != nil {
		return err
	}
	defer c.Close()
	w, err := newRCWire(c, o.remote(), runDeadline(o))
	if err != nil {
		return err
	}
	msg, in := make([]byte, o.size), make([]byte, 65536)
	if err := awaitRCEcho(w, msg, in); err != nil {
		return err
	}
	return reportLatency(o, pingTurn(w, msg, in))
}

// awaitRCEcho pings until the server answers (it may still be starting).
func awaitRCEcho(w *rcWire, msg, in []byte) error {
	stamp(msg, 0)
	for start := time.Now(); time.Since(start) < 10*time.Second; {
		if err := w.write(msg); err != nil {
			return err
		}
		for t := time.Now(); time.Since(t) < 100*time.Millisecond; {
			n, err := unix.Read(w.fd, in)
			if err == nil && n != rcAckLen && echoes(in[:n], msg) {
				return nil
			}
		}
	}
	return errors.New("no answer from the server for 10 s")
}

// rcEcho is the busy echo with --rc-wire: it answers every message from the first
// client with itself and an ACK-sized datagram, until the client has gone quiet for a
// second (an unconnected socket hears no ICMP port unreachable).
func rcEcho(c *net.UDPConn, buf []byte, n int, from netip.AddrPort) error {
	w, err := newRCWire(c, from, time.Time{})
	if err != nil {
		return err
	}
	for {
		if err := w.write(buf[:n]); err != nil {
			return err
		}
		w.deadline = time.Now().Add(time.Second)
		if n, err = w.read(buf); err != nil {
			if errors.Is(err, os.ErrDeadlineExceeded) {
				return nil
			}
			return err
		}
	}
}

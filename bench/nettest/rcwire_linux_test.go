package main

import (
	"bytes"
	"net"
	"net/netip"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestRCWireSendsMessageThenACK: --rc-wire's send puts the message and then an
// ACK-sized datagram on the wire, from a socket with DF set, and its read returns the
// message and skips the ACK.
func TestRCWireSendsMessageThenACK(t *testing.T) {
	listen := func() *net.UDPConn {
		c, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	a, b := listen(), listen()
	deadline := time.Now().Add(5 * time.Second)
	wa, err := newRCWire(a, b.LocalAddr().(*net.UDPAddr).AddrPort(), deadline)
	if err != nil {
		t.Fatal(err)
	}
	if v, err := unix.GetsockoptInt(wa.fd, unix.IPPROTO_IP, unix.IP_MTU_DISCOVER); err != nil || v != unix.IP_PMTUDISC_DO {
		t.Fatalf("IP_MTU_DISCOVER = %d, %v; want IP_PMTUDISC_DO (DF, Identification 0)", v, err)
	}
	msg := []byte("12345678")
	if err := wa.write(msg); err != nil {
		t.Fatal(err)
	}
	// What arrived, datagram by datagram, through the standard library.
	b.SetReadDeadline(deadline)
	buf := make([]byte, 64)
	var sizes []int
	var from netip.AddrPort
	for range 2 {
		n, f, err := b.ReadFromUDPAddrPort(buf)
		if err != nil {
			t.Fatal(err)
		}
		if len(sizes) == 0 && !bytes.Equal(buf[:n], msg) {
			t.Fatalf("first datagram %q, want the message %q", buf[:n], msg)
		}
		sizes = append(sizes, n)
		from = f
	}
	if sizes[1] != rcAckLen {
		t.Fatalf("datagram sizes %v, want the message's then an ACK's (%d)", sizes, rcAckLen)
	}
	// The echo side's read skips the ACK.
	wb, err := newRCWire(b, from, deadline)
	if err != nil {
		t.Fatal(err)
	}
	if err := wa.write(msg); err != nil {
		t.Fatal(err)
	}
	if err := wa.write([]byte("abcdefgh")); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"12345678", "abcdefgh"} {
		n, err := wb.read(buf)
		if err != nil {
			t.Fatal(err)
		}
		if string(buf[:n]) != want {
			t.Fatalf("read %q, want %q (the ACK-sized datagram skipped)", buf[:n], want)
		}
	}
}

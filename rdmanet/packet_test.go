package rdmanet

import (
	"bytes"
	"errors"
	"net"
	"net/netip"
	"os"
	"runtime"
	"testing"
	"time"
)

// packetPair opens two datagram sockets on two fresh device addresses.
func packetPair(t *testing.T) (a, b *PacketConn) {
	t.Helper()
	open := func() *PacketConn {
		c, err := ListenPacket("rdma", netip.AddrPortFrom(freeAddr(t), 0).String())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	return open(), open()
}

func readOne(t *testing.T, c *PacketConn) ([]byte, netip.AddrPort) {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	buf := make([]byte, 4096)
	n, from, err := c.ReadFromAddrPort(buf)
	if err != nil {
		t.Fatal(err)
	}
	return buf[:n], from
}

// waitLearnt waits until c knows peer's QPN (its datagrams to peer then go by UD).
func waitLearnt(t *testing.T, c *PacketConn, peer netip.AddrPort) {
	t.Helper()
	for end := time.Now().Add(5 * time.Second); ; time.Sleep(time.Millisecond) {
		c.mu.Lock()
		learnt := c.dests[peer] != nil && c.dests[peer].ah != nil
		c.mu.Unlock()
		if learnt {
			return
		}
		if time.Now().After(end) {
			t.Fatalf("%v never learnt %v's QPN", c.laddr, peer)
		}
	}
}

// Datagrams arrive whole and say who sent them: the first over UDP (the QPN exchange),
// the reply and the rest as UD SENDs once each side knows the other's QPN.
func TestPacketConnExchange(t *testing.T) {
	a, b := packetPair(t)
	baddr := b.LocalAddr().(*Addr).AddrPort
	if _, err := a.WriteTo([]byte("hello"), b.LocalAddr()); err != nil {
		t.Fatal(err)
	}
	got, from := readOne(t, b)
	if string(got) != "hello" || from != a.laddr {
		t.Fatalf("b read %q from %v, want hello from %v", got, from, a.laddr)
	}
	if _, err := b.WriteToAddrPort([]byte("hi back"), from); err != nil {
		t.Fatal(err)
	}
	if got, from := readOne(t, a); string(got) != "hi back" || from != baddr {
		t.Fatalf("a read %q from %v", got, from)
	}
	// the largest datagram, and many in turn, by UD now that both QPNs are known
	big := bytes.Repeat([]byte{0xA5}, dgSlot-udpHdrLen4)
	for i := 0; i < 100; i++ {
		msg := big[:1+i*20]
		if i == 99 {
			msg = big
		}
		if _, err := a.WriteToAddrPort(msg, baddr); err != nil {
			t.Fatal(err)
		}
		if got, _ := readOne(t, b); !bytes.Equal(got, msg) {
			t.Fatalf("datagram %d: %d bytes, want %d", i, len(got), len(msg))
		}
	}
	waitLearnt(t, a, baddr)
	if _, err := a.WriteToAddrPort(append(big, 1), baddr); !errors.Is(err, ErrMessageTooLong) {
		t.Errorf("a datagram one byte too long: %v, want ErrMessageTooLong", err)
	}
	// a short buffer gets the datagram's start, and the next read the next datagram
	a.WriteToAddrPort([]byte("0123456789"), baddr)
	a.WriteToAddrPort([]byte("next"), baddr)
	b.SetReadDeadline(time.Now().Add(5 * time.Second))
	short := make([]byte, 4)
	if n, _, err := b.ReadFrom(short); err != nil || string(short[:n]) != "0123" {
		t.Fatalf("short read: %q, %v", short[:n], err)
	}
	if got, _ := readOne(t, b); string(got) != "next" {
		t.Fatalf("after a short read: %q", got)
	}
}

// A read deadline ends a read with os.ErrDeadlineExceeded; Close ends a blocked read
// with net.ErrClosed, and later calls fail the same way.
func TestPacketConnDeadlineAndClose(t *testing.T) {
	a, _ := packetPair(t)
	a.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
	start := time.Now()
	_, _, err := a.ReadFrom(make([]byte, 10))
	if !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("read past its deadline: %v", err)
	}
	var ne net.Error
	if !errors.As(err, &ne) || !ne.Timeout() {
		t.Errorf("%v is not a net.Error timeout", err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("the deadline took %v", d)
	}
	a.SetReadDeadline(time.Time{})
	errc := make(chan error, 1)
	go func() {
		_, _, err := a.ReadFrom(make([]byte, 10))
		errc <- err
	}()
	time.Sleep(20 * time.Millisecond)
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-errc:
		if !errors.Is(err, net.ErrClosed) {
			t.Errorf("a read blocked over Close: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Close left a read blocked")
	}
	if _, err := a.WriteToAddrPort([]byte("x"), a.laddr); !errors.Is(err, net.ErrClosed) {
		t.Errorf("write after Close: %v", err)
	}
}

// Hostile datagrams on the UDP socket, and hostile UD headers, are dropped and
// counted; the socket goes on working.
func TestPacketConnDropsHostileHeaders(t *testing.T) {
	a, b := packetPair(t)
	baddr := b.LocalAddr().(*Addr).AddrPort
	raw, err := net.DialUDP("udp", nil, net.UDPAddrFromAddrPort(baddr))
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	good := make([]byte, udpHdrLen4+3)
	putUDPHeader(good, dgOpData, 0x123, a.laddr.Addr())
	bad := func(edit func(b []byte) []byte) []byte {
		return edit(append([]byte(nil), good...))
	}
	for _, p := range [][]byte{
		{},
		good[:udpHdrLen4-1], // short
		bad(func(b []byte) []byte { b[0] = 0; return b }), // tag
		bad(func(b []byte) []byte { b[4] = 6; return b }), // IPv6 on an IPv4 socket
		bad(func(b []byte) []byte { b[6] = 28; return b }),
		bad(func(b []byte) []byte { b[6] = 255; return b }),
		bad(func(b []byte) []byte { b[5] = 3; return b }), // op
	} {
		raw.Write(p)
	}
	// UD: a wrong version, a wrong length, a header longer than the datagram
	if _, err := a.WriteToAddrPort([]byte("learn"), baddr); err != nil {
		t.Fatal(err)
	}
	readOne(t, b)
	b.WriteToAddrPort([]byte("ok"), a.laddr)
	readOne(t, a)
	waitLearnt(t, a, baddr) // b's answer to "learn" (over UDP) may come after "ok" (over UD)
	for _, h := range [][]byte{{6, udHdrLen4}, {4, udHdrLen6}, {6, udHdrLen6, 0, 1}, {4}} {
		a.mu.Lock()
		saved := a.hdr
		n := copy(a.hdr[:], h)
		a.hdrN = n
		a.mu.Unlock()
		a.WriteToAddrPort(nil, baddr)
		a.mu.Lock()
		a.hdr, a.hdrN = saved, putUDHeader(a.hdr[:], a.laddr)
		a.mu.Unlock()
	}
	if _, err := a.WriteToAddrPort([]byte("after"), baddr); err != nil {
		t.Fatal(err)
	}
	got, _ := readOne(t, b)
	if string(got) != "after" {
		t.Fatalf("after the hostile datagrams: %q", got)
	}
	if d := b.dropped.Load(); d < 7+4 {
		t.Errorf("%d datagrams dropped, want at least 11", d)
	}
	if n := len(b.queue); n != 0 {
		t.Errorf("%d hostile datagrams queued", n)
	}
}

func TestPacketHeadersRoundTrip(t *testing.T) {
	for _, a := range []netip.AddrPort{netip.MustParseAddrPort("10.1.2.3:7174"), netip.MustParseAddrPort("[fd00::5]:9")} {
		b := make([]byte, udpHdrLen6)
		n := putUDPHeader(b, dgOpCtrl, 0xABCDEF12, a.Addr())
		op, qpn, m, ok := parseUDPHeader(b[:n], a.Addr().Is4())
		if !ok || op != dgOpCtrl || qpn != 0xCDEF12 || m != n {
			t.Errorf("%v: UDP header %x parses as %d %#x %d %v", a, b[:n], op, qpn, m, ok)
		}
		if _, _, _, ok := parseUDPHeader(b[:n], !a.Addr().Is4()); ok {
			t.Errorf("%v: UDP header taken by a socket of the other family", a)
		}
		n = putUDHeader(b, a)
		from, m, ok := parseUDHeader(b[:n], a.Addr().Is4())
		if !ok || from != a || m != n {
			t.Errorf("%v: UD header %x parses as %v %d %v", a, b[:n], from, m, ok)
		}
	}
}

func FuzzPacketHeaders(f *testing.F) {
	b := make([]byte, udpHdrLen6)
	f.Add(b[:putUDPHeader(b, dgOpData, 7, netip.MustParseAddr("10.0.0.1"))])
	f.Add(b[:putUDHeader(b, netip.MustParseAddrPort("[fd00::1]:5"))])
	f.Fuzz(func(t *testing.T, p []byte) {
		for _, v4 := range []bool{true, false} {
			if _, _, n, ok := parseUDPHeader(p, v4); ok && n > len(p) {
				t.Fatal("UDP header longer than the datagram")
			}
			if from, n, ok := parseUDHeader(p, v4); ok {
				if n > len(p) || from.Addr().Is4() != v4 {
					t.Fatalf("UD header: %v, %d of %d", from, n, len(p))
				}
			}
		}
	})
}

// Close releases everything: the devices (the last user closes them) and the
// goroutines, once datagrams went both ways.
func TestPacketConnCloseReleases(t *testing.T) {
	before := runtime.NumGoroutine()
	var cs []*PacketConn
	for range 2 {
		c, err := ListenPacket("rdma", netip.AddrPortFrom(freeAddr(t), 0).String())
		if err != nil {
			t.Fatal(err)
		}
		cs = append(cs, c)
	}
	a, b := cs[0], cs[1]
	a.WriteTo([]byte("ping"), b.LocalAddr())
	_, from := readOne(t, b)
	b.WriteToAddrPort([]byte("pong"), from)
	readOne(t, a)
	for _, c := range cs {
		if err := c.Close(); err != nil {
			t.Fatal(err)
		}
		if err := c.Close(); err != nil {
			t.Errorf("a second Close: %v", err)
		}
	}
	if open := openDevices(a.laddr.Addr(), b.laddr.Addr()); len(open) > 0 {
		t.Errorf("devices on %v open after Close", open)
	}
	checkGoroutines(t, before)
}

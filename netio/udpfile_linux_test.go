//go:build linux

package netio_test

import (
	"net"
	"net/netip"
	"os"
	"testing"

	"github.com/goverbs/goverbs/netio"
)

// TestFileUDP: a Conn on a UDP socket bound elsewhere (goverbs serve passes one to a Go
// client) receives what is sent to that socket's address, sends from a socket of its
// own, and leaves the caller's descriptor open; anything but a bound UDP socket is an
// error.
func TestFileUDP(t *testing.T) {
	pc, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer pc.Close()
	f, err := pc.File()
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	c, err := netio.FileUDP(f, netio.UDPOptions{})
	if err != nil {
		t.Fatal(err)
	}
	want := pc.LocalAddr().(*net.UDPAddr).AddrPort()
	if got := c.LocalAddr(); got != netip.AddrPortFrom(want.Addr().Unmap(), want.Port()) {
		t.Fatalf("LocalAddr %v, want %v", got, want)
	}
	if c.SourceAddr() == c.LocalAddr() {
		t.Fatal("the Conn sends from the passed socket, not a send socket of its own")
	}
	s, err := net.DialUDP("udp4", nil, net.UDPAddrFromAddrPort(want))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	s.Write([]byte("hello"))
	msgs := make([]netio.Message, 1)
	msgs[0].Buf = make([]byte, 2048)
	n, err := c.ReadBatch(msgs)
	if err != nil || n != 1 || string(msgs[0].Buf[:msgs[0].N]) != "hello" {
		t.Fatalf("ReadBatch: %d %v %q", n, err, msgs[0].Buf[:msgs[0].N])
	}
	c.Close()
	if _, err := f.Stat(); err != nil {
		t.Fatalf("the caller's descriptor was closed with the Conn: %v", err)
	}

	tf, err := os.CreateTemp(t.TempDir(), "x")
	if err != nil {
		t.Fatal(err)
	}
	defer tf.Close()
	if _, err := netio.FileUDP(tf, netio.UDPOptions{}); err == nil {
		t.Fatal("FileUDP took a regular file")
	}
	tl, err := net.ListenTCP("tcp4", &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer tl.Close()
	tlf, _ := tl.File()
	defer tlf.Close()
	if _, err := netio.FileUDP(tlf, netio.UDPOptions{}); err == nil {
		t.Fatal("FileUDP took a TCP socket")
	}
}

package exchange

import (
	"net"
	"net/netip"
	"strconv"
	"strings"
	"testing"
)

func TestListenDialAccept(t *testing.T) {
	if _, err := Listen(netip.MustParseAddr("127.0.0.1"), 0); err == nil || !strings.Contains(err.Error(), "invalid TCP port 0") {
		t.Fatalf("port 0: %v", err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	// Nobody listens there now: the message says so, as the tools print it.
	if _, err := Dial("127.0.0.1", port); err == nil || !strings.Contains(err.Error(), "connection refused (is the server running?)") {
		t.Fatalf("dial a closed port: %v", err)
	}
	l, err = Listen(netip.MustParseAddr("127.0.0.1"), port)
	if err != nil {
		t.Skipf("port %d taken meanwhile: %v", port, err)
	}
	if _, err := Listen(netip.MustParseAddr("127.0.0.1"), port); err == nil || !strings.Contains(err.Error(), "TCP port "+strconv.Itoa(port)+" on 127.0.0.1 is in use") {
		t.Fatalf("a second listener: %v", err)
	}
	go func() {
		c, err := Dial("127.0.0.1", port)
		if err == nil {
			WriteAll(c, []byte("done\x00"), "done")
			c.Close()
		}
	}()
	c, err := Accept(l)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	b := make([]byte, 5)
	if err := ReadFull(c, b, "the client's done"); err != nil || string(b) != "done\x00" {
		t.Fatalf("read %q, %v", b, err)
	}
	if err := ReadFull(c, b, "more"); err == nil || !strings.Contains(err.Error(), "the peer closed the connection") {
		t.Fatalf("read past the end: %v", err)
	}
}

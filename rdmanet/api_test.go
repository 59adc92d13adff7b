package rdmanet

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/netip"
	"runtime"
	"testing"
	"time"

	"github.com/goverbs/goverbs/internal/testaddr"
)

// freeAddr returns a loopback address with nothing bound to RoCEv2's port, for
// Listen or a Dialer to open a device on.
func freeAddr(t testing.TB) netip.Addr { return testaddr.Free(t, testaddr.RDMANet) }

// listenDial returns a listener on a fresh device and a Dialer from another.
func listenDial(t *testing.T) (net.Listener, *Dialer) {
	t.Helper()
	l, err := Listen("rdma", netip.AddrPortFrom(freeAddr(t), 0).String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l, &Dialer{LocalAddr: freeAddr(t), Timeout: 10 * time.Second}
}

func TestListenDialEcho(t *testing.T) {
	l, d := listenDial(t)
	if l.Addr().Network() != "rdma" || l.Addr().(*Addr).AddrPort.Port() == 0 {
		t.Fatalf("listener address %v (%s): want a chosen port", l.Addr(), l.Addr().Network())
	}
	go func() {
		c, err := l.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		io.Copy(c, c)
	}()
	c, err := d.DialContext(context.Background(), "rdma", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if c.RemoteAddr().String() != l.Addr().String() {
		t.Errorf("RemoteAddr %v, want the listener's %v", c.RemoteAddr(), l.Addr())
	}
	if got := c.LocalAddr().(*Addr).AddrPort.Addr(); got != d.LocalAddr {
		t.Errorf("LocalAddr %v, want the dialer's device %v", got, d.LocalAddr)
	}
	msg := bytes.Repeat([]byte("echo over rdma "), 10000)
	go c.Write(msg)
	got := make([]byte, len(msg))
	if _, err := io.ReadFull(c, got); err != nil || !bytes.Equal(got, msg) {
		t.Fatalf("echo: %v, equal %v", err, bytes.Equal(got, msg))
	}
}

// net/http over rdmanet moves a 64 MiB body each way intact.
func TestHTTP64MiB(t *testing.T) {
	l, d := listenDial(t)
	const size = 64 << 20
	body := make([]byte, size)
	for i := range body {
		body[i] = byte(rand.Uint32())
	}
	want := sha256.Sum256(body)
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := sha256.New()
		n, err := io.Copy(h, r.Body)
		if err != nil || n != size || !bytes.Equal(h.Sum(nil), want[:]) {
			http.Error(w, "request body damaged", http.StatusBadRequest)
			return
		}
		w.Write(body)
	})}
	go srv.Serve(l)
	t.Cleanup(func() { srv.Close() })
	// http.Transport dials "tcp"; the program says which network it means.
	dial := func(ctx context.Context, _, addr string) (net.Conn, error) { return d.DialContext(ctx, "rdma", addr) }
	client := &http.Client{Transport: &http.Transport{DialContext: dial}}
	defer client.CloseIdleConnections()
	resp, err := client.Post("http://"+l.Addr().String()+"/", "application/octet-stream", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status %s", resp.Status)
	}
	h := sha256.New()
	if n, err := io.Copy(h, resp.Body); err != nil || n != size || !bytes.Equal(h.Sum(nil), want[:]) {
		t.Fatalf("response body: %d bytes, %v, intact %v", n, err, bytes.Equal(h.Sum(nil), want[:]))
	}
}

func TestListenerCloseUnblocksAccept(t *testing.T) {
	l, _ := listenDial(t)
	errc := make(chan error)
	go func() {
		_, err := l.Accept()
		errc <- err
	}()
	time.Sleep(10 * time.Millisecond)
	l.Close()
	select {
	case err := <-errc:
		if !errors.Is(err, net.ErrClosed) {
			t.Fatalf("Accept after Close: %v, want net.ErrClosed", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Accept still blocked after Close")
	}
}

// Connections closed from either side end their CM connections, and once the
// listener closes too the shared devices close: no goroutine or device is left.
func TestCloseReleasesDevices(t *testing.T) {
	before := runtime.NumGoroutine()
	l, d := listenDial(t)
	for i := range 4 {
		accepted := make(chan net.Conn, 1)
		go func() {
			c, _ := l.Accept()
			accepted <- c
		}()
		c, err := d.DialContext(context.Background(), "rdma", l.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		s := <-accepted
		if s == nil {
			t.Fatal("Accept failed")
		}
		if _, err := c.Write([]byte("x")); err != nil {
			t.Fatal(err)
		}
		first, second := c.(*Conn), s.(*Conn)
		if i%2 == 1 {
			first, second = second, first
		}
		first.Close()
		if _, err := io.ReadAll(second); err != nil {
			t.Fatalf("reading after the peer's Close: %v", err)
		}
		second.Close()
		<-first.tornDown
		<-second.tornDown
	}
	l.Close()
	// This test's devices only: another test's connections may still be releasing
	// theirs in the background, as Close allows (that was this test's flake, under
	// load: "1 devices open after every user closed").
	if open := openDevices(l.Addr().(*Addr).AddrPort.Addr(), d.LocalAddr); len(open) > 0 {
		t.Errorf("devices on %v open after every user closed", open)
	}
	checkGoroutines(t, before)
}

// openDevices returns which of addrs have a device open.
func openDevices(addrs ...netip.Addr) []netip.Addr {
	devices.mu.Lock()
	defer devices.mu.Unlock()
	var open []netip.Addr
	for _, a := range addrs {
		if devices.m[a] != nil {
			open = append(open, a)
		}
	}
	return open
}

// A connection set up but never accepted is closed with the listener, and
// Listener.Close returns only once it is released: the listener's device is closed
// by then.
func TestListenerCloseReleasesUnacceptedConns(t *testing.T) {
	l, d := listenDial(t)
	c, err := d.DialContext(context.Background(), "rdma", l.Addr().String()) // set up with no Accept
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	l.Close()
	if open := openDevices(l.Addr().(*Addr).AddrPort.Addr()); len(open) > 0 {
		t.Fatalf("the listener's device on %v still open after Listener.Close", open)
	}
	// The client hears of it as of any peer's close.
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	if n, err := c.Read(make([]byte, 1)); n != 0 || err != io.EOF {
		t.Errorf("reading from the connection the listener closed: %d, %v; want io.EOF", n, err)
	}
}

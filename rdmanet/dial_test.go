package rdmanet

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/goverbs/goverbs/internal/testaddr"
)

// Dial's errors are *net.OpError, as net.Dial's: Op "dial", the network asked for,
// the server's address once it is known, and the cause beneath.
func TestDialErrors(t *testing.T) {
	l, d := listenDial(t)
	ap := l.Addr().(*Addr).AddrPort
	nobody := netip.AddrPortFrom(ap.Addr(), ap.Port()+1) // a port nobody listens on
	for _, tc := range []struct {
		name, network, address string
		want                   string // in the message
		wantAddr               bool   // the OpError names the server's address
	}{
		{"network", "tcp", l.Addr().String(), "dial tcp: unknown network tcp", false},
		{"no port", "rdma", ap.Addr().String(), "missing port in address", false},
		{"unknown service", "rdma", ap.Addr().String() + ":no-such-service", "unknown port", false},
		{"port 0", "rdma", netip.AddrPortFrom(ap.Addr(), 0).String(), "dial needs a host and a port", false},
		// The CM's REJ, "invalid service ID": refused at once, not after a timeout.
		{"no listener", "rdma", nobody.String(), "dial rdma " + nobody.String() + ": cm: connection rejected", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			start := time.Now()
			c, err := d.DialContext(context.Background(), tc.network, tc.address)
			if err == nil {
				c.Close()
				t.Fatal("dial succeeded")
			}
			var op *net.OpError
			if !errors.As(err, &op) || op.Op != "dial" || op.Net != tc.network {
				t.Fatalf("error %#v, want a *net.OpError for dial %s", err, tc.network)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %q does not say %q", err, tc.want)
			}
			if got := op.Addr != nil && op.Addr.String() == tc.address; got != tc.wantAddr {
				t.Errorf("error's address %v (want it named: %v)", op.Addr, tc.wantAddr)
			}
			if took := time.Since(start); took > 5*time.Second {
				t.Errorf("the refusal took %v", took)
			}
		})
	}
}

// A dial to an address nobody answers ends when its context does, with the
// context's error: a net.Error whose Timeout is true for a deadline, as net.Dial's.
func TestDialContextEnds(t *testing.T) {
	d := &Dialer{LocalAddr: freeAddr(t)}
	silent := netip.AddrPortFrom(testaddr.Addr(testaddr.RDMANet), 7471).String()

	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := d.DialContext(ctx, "rdma", silent)
	var ne net.Error
	if !errors.Is(err, context.DeadlineExceeded) || !errors.As(err, &ne) || !ne.Timeout() {
		t.Errorf("dial past its deadline: %v, want a timeout", err)
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("dial returned %v after its deadline", took)
	}

	ctx, cancel = context.WithCancel(context.Background())
	time.AfterFunc(100*time.Millisecond, cancel)
	if _, err := d.DialContext(ctx, "rdma", silent); !errors.Is(err, context.Canceled) {
		t.Errorf("dial whose context was canceled: %v, want context.Canceled", err)
	}

	timed := &Dialer{LocalAddr: d.LocalAddr, Timeout: 200 * time.Millisecond}
	if _, err := timed.DialContext(context.Background(), "rdma", silent); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("dial past Dialer.Timeout: %v, want a timeout", err)
	}
}

// Each side's LocalAddr is the other's RemoteAddr: the server's is the listener's
// address, the client's its device's address and the port the CM gave it.
func TestConnAddrs(t *testing.T) {
	l, d := listenDial(t)
	accepted := make(chan net.Conn, 1)
	go func() {
		c, _ := l.Accept()
		accepted <- c
	}()
	c, err := d.DialContext(context.Background(), "rdma", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	s := <-accepted
	if s == nil {
		t.Fatal("Accept failed")
	}
	defer s.Close()
	for _, a := range []net.Addr{c.LocalAddr(), c.RemoteAddr(), s.LocalAddr(), s.RemoteAddr()} {
		if a.Network() != "rdma" {
			t.Errorf("%v's network is %q, want rdma", a, a.Network())
		}
	}
	if s.LocalAddr().String() != l.Addr().String() || c.RemoteAddr().String() != l.Addr().String() {
		t.Errorf("server's LocalAddr %v and client's RemoteAddr %v, want the listener's %v",
			s.LocalAddr(), c.RemoteAddr(), l.Addr())
	}
	local := c.LocalAddr().(*Addr).AddrPort
	if local.Addr() != d.LocalAddr || local.Port() == 0 {
		t.Errorf("client's LocalAddr %v, want %v and a port", local, d.LocalAddr)
	}
	if s.RemoteAddr().String() != local.String() {
		t.Errorf("server's RemoteAddr %v, want the client's LocalAddr %v", s.RemoteAddr(), local)
	}
}

// Listen's errors are *net.OpError too, naming the address asked for.
func TestListenErrors(t *testing.T) {
	for _, tc := range []struct{ network, address, want string }{
		{"tcp", "127.0.0.1:0", "listen tcp: unknown network tcp"},
		{"rdma", "127.0.0.1", "missing port in address"},
		{"rdma", ":0", "listen needs a device's address"},
	} {
		l, err := Listen(tc.network, tc.address)
		if err == nil {
			l.Close()
			t.Errorf("Listen(%q, %q) succeeded", tc.network, tc.address)
			continue
		}
		var op *net.OpError
		if !errors.As(err, &op) || op.Op != "listen" || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Listen(%q, %q): %v, want a *net.OpError saying %q", tc.network, tc.address, err, tc.want)
		}
	}
}

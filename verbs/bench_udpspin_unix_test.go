//go:build unix

package verbs_test

import (
	"net"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// BenchmarkUDPPingPong8BusyPoll is the busy-poll baseline as a Go programmer would write
// it: two net.UDPConns on loopback, each side spinning on a non-blocking read of its
// socket (read(2) on the non-blocking socket through SyscallConn), as bench/nettest's busy
// udp_lat does. It uses nothing of goverbs, so it hides none of goverbs' costs.
func BenchmarkUDPPingPong8BusyPoll(b *testing.B) {
	listen := func() *net.UDPConn {
		c, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
		if err != nil {
			b.Fatal(err)
		}
		return c
	}
	ca, cc := listen(), listen()
	defer ca.Close()
	defer cc.Close()
	back := ca.LocalAddr().(*net.UDPAddr)
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		sc := newSpinner(b, cc)
		for {
			select {
			case <-stop:
				return
			default:
			}
			if n := sc.Recv(); n > 0 {
				cc.WriteToUDP(sc.buf[:n], back)
			}
		}
	}()
	defer func() { close(stop); <-done }()
	sa := newSpinner(b, ca)
	ping := make([]byte, 8)
	to := cc.LocalAddr().(*net.UDPAddr)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := ca.WriteToUDP(ping, to); err != nil {
			b.Fatal(err)
		}
		for sa.Recv() == 0 {
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/2/1000, "us-one-way")
}

// spinner reads c without blocking: Recv returns a waiting datagram's length, or 0
// when none waits. The socket is non-blocking (Go makes every socket so), read(2) takes
// one datagram, and the closure is built once so that a spin allocates nothing.
type spinner struct {
	rc  syscall.RawConn
	buf []byte
	n   int
	fn  func(fd uintptr) bool
}

func newSpinner(b *testing.B, c *net.UDPConn) *spinner {
	rc, err := c.SyscallConn()
	if err != nil {
		b.Fatal(err)
	}
	s := &spinner{rc: rc, buf: make([]byte, 1<<16)}
	s.fn = func(fd uintptr) bool {
		s.n = 0
		if k, err := unix.Read(int(fd), s.buf); err == nil {
			s.n = k
		}
		return true // never park in the netpoller: the caller spins
	}
	return s
}

func (s *spinner) Recv() int {
	s.rc.Read(s.fn)
	return s.n
}

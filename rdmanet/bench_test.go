package rdmanet

import (
	"io"
	"net"
	"net/netip"
	"testing"

	"github.com/goverbs/goverbs/internal/testaddr"
	"github.com/goverbs/goverbs/verbs"
)

// The stream against Go's TCP on loopback, in one process: bandwidth of 64 KiB
// writes and a 64-byte request/response. Read the two as a ratio from the same run.
//
//	go test -run '^$' -bench . ./rdmanet

func BenchmarkStream64K(b *testing.B) {
	b.Run("rdma", func(b *testing.B) { x, y := rdmaPair(b); benchStream(b, x, y) })
	b.Run("tcp", func(b *testing.B) { x, y := tcpPair(b); benchStream(b, x, y) })
}

func BenchmarkRequestResponse64(b *testing.B) {
	b.Run("rdma", func(b *testing.B) { x, y := rdmaPair(b); benchRR(b, x, y) })
	b.Run("tcp", func(b *testing.B) { x, y := tcpPair(b); benchRR(b, x, y) })
}

func rdmaPair(b *testing.B) (net.Conn, net.Conn) {
	da, db := testDevices(b)
	return rdmaPairOn(b, da, db)
}

// rdmaPairOn connects two Conns on devices da and db, closed and torn down at the
// benchmark's end.
func rdmaPairOn(b *testing.B, da, db *verbs.Device) (*Conn, *Conn) {
	x, y, err := testPair(b, da, db)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		x.Close()
		y.Close()
		<-x.tornDown
		<-y.tornDown
	})
	return x, y
}

func tcpPair(b *testing.B) (net.Conn, net.Conn) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		c, _ := l.Accept()
		accepted <- c
	}()
	x, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		b.Fatal(err)
	}
	y := <-accepted
	b.Cleanup(func() {
		x.Close()
		y.Close()
	})
	return x, y
}

func benchStream(b *testing.B, x, y net.Conn) {
	buf := make([]byte, 64<<10)
	done := make(chan error, 1)
	go func() {
		_, err := io.CopyN(io.Discard, struct{ io.Reader }{y}, int64(b.N)*int64(len(buf)))
		done <- err
	}()
	b.SetBytes(int64(len(buf)))
	b.ResetTimer()
	for range b.N {
		if _, err := x.Write(buf); err != nil {
			b.Fatal(err)
		}
	}
	if err := <-done; err != nil {
		b.Fatal(err)
	}
}

func benchRR(b *testing.B, x, y net.Conn) {
	go func() {
		buf := make([]byte, 64)
		for {
			if _, err := io.ReadFull(y, buf); err != nil {
				return
			}
			if _, err := y.Write(buf); err != nil {
				return
			}
		}
	}()
	buf := make([]byte, 64)
	b.ResetTimer()
	for range b.N {
		if _, err := x.Write(buf); err != nil {
			b.Fatal(err)
		}
		if _, err := io.ReadFull(x, buf); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkRequestResponse64UDP is BenchmarkRequestResponse64's rdmanet over the
// devices' UDP sockets, the same-host shortcut off: the network path's per-message
// cost (system calls and all), in one process. A CPU profile of it shows what rdmanet
// adds above the verbs:
//
//	go test -run '^$' -bench RequestResponse64UDP -cpuprofile /tmp/rr.prof ./rdmanet
func BenchmarkRequestResponse64UDP(b *testing.B) {
	open := func() *verbs.Device {
		dev := testaddr.Open(b, testaddr.RDMANet, func(ip netip.Addr) (*verbs.Device, error) {
			return verbs.OpenSoft(verbs.SoftConfig{Addr: ip, NoSameHost: true})
		})
		b.Cleanup(func() { dev.Close() })
		return dev
	}
	x, y := rdmaPairOn(b, open(), open())
	benchRR(b, x, y)
}

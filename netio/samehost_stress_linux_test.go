//go:build linux

package netio_test

import (
	"fmt"
	"net/netip"
	"testing"
	"time"

	"github.com/goverbs/goverbs/netio"
)

// TestSameHostPingPongFromCold: fresh Conns that have never met ping-pong with blocking
// reads, the rendezvous happening under the first exchanges (both dial at once): no
// datagram may be lost at the switch from UDP to the rings.
func TestSameHostPingPongFromCold(t *testing.T) {
	for round := 0; round < 30; round++ {
		dir := rendezvousDir(t)
		a, b := sameHost(t, "127.0.0.2:0", dir, netio.UDPOptions{}), sameHost(t, "127.0.0.3:0", dir, netio.UDPOptions{})
		echo := func(c netio.Conn, to netip.AddrPort, n int, done chan<- error) {
			in := []netio.Message{{Buf: make([]byte, netio.MaxGROSize)}}
			for i := 0; i < n; i++ {
				k, err := c.ReadBatch(in)
				if err != nil || k != 1 {
					done <- fmt.Errorf("ReadBatch = %d, %v; want the ball", k, err)
					return
				}
				if _, err := c.WriteBatch([]netio.Message{{Buf: in[0].Buf, N: in[0].N, Addr: to}}); err != nil {
					done <- err
					return
				}
			}
			done <- nil
		}
		const n = 50
		da, db := make(chan error, 1), make(chan error, 1)
		go echo(b, a.LocalAddr(), n, db)
		go echo(a, b.LocalAddr(), n-1, da)
		a.WriteBatch([]netio.Message{{Buf: []byte("ball"), N: 4, Addr: b.LocalAddr()}})
		for _, ch := range []chan error{da, db} {
			select {
			case err := <-ch:
				if err != nil {
					t.Fatal(err)
				}
			case <-time.After(5 * time.Second):
				sa, _ := netio.SameHostStatsOf(a)
				sb, _ := netio.SameHostStatsOf(b)
				t.Fatalf("round %d: the ball was lost; a: %v; b: %v", round, sa, sb)
			}
		}
		a.Close()
		b.Close()
	}
}

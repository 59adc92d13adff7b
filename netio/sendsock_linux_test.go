//go:build linux

package netio

import (
	"fmt"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestSendSocket: datagrams leave from SourceAddr, a second socket on LocalAddr's IP with
// a port of its own, and whatever is sent to that port is dropped rather than queued
// (nobody ever reads it).
func TestSendSocket(t *testing.T) {
	for _, busy := range []bool{false, true} {
		t.Run(fmt.Sprintf("BusyPoll=%v", busy), func(t *testing.T) {
			a := listen(t, "127.0.0.2:0", UDPOptions{BusyPoll: busy})
			b := listen(t, "127.0.0.3:0", UDPOptions{})
			src := a.SourceAddr()
			if src.Addr() != a.LocalAddr().Addr() || src.Port() == 0 || src.Port() == a.LocalAddr().Port() {
				t.Fatalf("SourceAddr %v for LocalAddr %v", src, a.LocalAddr())
			}
			if _, err := a.WriteBatch([]Message{{Buf: []byte("hi"), N: 2, Addr: b.LocalAddr()}}); err != nil {
				t.Fatal(err)
			}
			if _, from := readN(t, b, 1, 5*time.Second); from[0] != src {
				t.Fatalf("datagram from %v, want %v", from[0], src)
			}
			ms := make([]Message, 8)
			for i := range ms {
				ms[i] = Message{Buf: []byte("stray"), N: 5, Addr: src}
			}
			if _, err := b.WriteBatch(ms); err != nil {
				t.Fatal(err)
			}
			time.Sleep(20 * time.Millisecond)
			var queued int
			var qerr error
			a.(*udpConn).snd.Control(func(fd uintptr) { queued, qerr = unix.IoctlGetInt(int(fd), unix.SIOCINQ) })
			if qerr != nil || queued != 0 {
				t.Fatalf("send socket holds %d bytes (%v), want nothing", queued, qerr)
			}
		})
	}
}

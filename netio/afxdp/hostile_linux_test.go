//go:build linux

package afxdp_test

import (
	"encoding/binary"
	"net"
	"testing"
	"time"

	"github.com/goverbs/goverbs/netio"
	"github.com/goverbs/goverbs/netio/afxdp"
	"golang.org/x/sys/unix"
)

// TestHostileFrames puts broken frames on the wire from B (an AF_PACKET socket on vb)
// to the device's address and port: the program steers them to the socket, which drops
// and counts each one and goes on to deliver the good datagram after them.
func TestHostileFrames(t *testing.T) {
	n := newTestNet(t, 1500)
	x := openXDP(t, n, n.AddrA, afxdp.Options{})
	var fd int
	var err error
	var vb *net.Interface
	in(t, n.B, func() {
		if vb, err = net.InterfaceByName(ifB); err != nil {
			return
		}
		fd, err = unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, 0)
	})
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	var va *net.Interface
	in(t, n.A, func() { va, err = net.InterfaceByName(ifA) })
	if err != nil {
		t.Fatal(err)
	}
	frame := func(payload []byte, edit func(f []byte)) []byte {
		f := make([]byte, 14+20+8+len(payload))
		copy(f[0:6], va.HardwareAddr)
		copy(f[6:12], vb.HardwareAddr)
		binary.BigEndian.PutUint16(f[12:], 0x0800)
		ip := f[14:34]
		ip[0], ip[8], ip[9] = 0x45, 64, 17
		binary.BigEndian.PutUint16(ip[2:], uint16(20+8+len(payload)))
		binary.BigEndian.PutUint16(ip[6:], 0x4000)
		copy(ip[12:16], n.AddrB.AsSlice())
		copy(ip[16:20], n.AddrA.AsSlice())
		udp := f[34:]
		binary.BigEndian.PutUint16(udp[0:], 50000)
		binary.BigEndian.PutUint16(udp[2:], 4791)
		binary.BigEndian.PutUint16(udp[4:], uint16(8+len(payload)))
		copy(udp[8:], payload)
		if edit != nil {
			edit(f)
		}
		binary.BigEndian.PutUint16(ip[10:], 0)
		binary.BigEndian.PutUint16(ip[10:], ^uint16(sum(0, ip)))
		return f
	}
	bad := [][]byte{
		frame([]byte("x"), func(f []byte) { binary.BigEndian.PutUint16(f[14+2:], 1400) }), // IP length beyond the frame
		frame([]byte("x"), func(f []byte) { binary.BigEndian.PutUint16(f[34+4:], 900) }),  // UDP length beyond the IP payload
		frame([]byte("x"), func(f []byte) { binary.BigEndian.PutUint16(f[34+4:], 3) }),    // UDP length under its header
		frame([]byte("x"), func(f []byte) { binary.BigEndian.PutUint16(f[14+2:], 10) }),   // IP length under its header
		frame([]byte("x"), nil), // its header checksum broken below
	}
	bad[len(bad)-1][14+10] ^= 0xff
	sa := &unix.SockaddrLinklayer{Ifindex: vb.Index, Halen: 6}
	copy(sa.Addr[:], va.HardwareAddr)
	for _, f := range bad {
		if err := unix.Sendto(fd, f, 0, sa); err != nil {
			t.Fatal(err)
		}
	}
	if err := unix.Sendto(fd, frame([]byte("good"), nil), 0, sa); err != nil {
		t.Fatal(err)
	}
	msgs := []netio.Message{{Buf: make([]byte, 64)}}
	if k, err := readTimeout(x, msgs, 3*time.Second); k != 1 || err != nil || string(msgs[0].Buf[:msgs[0].N]) != "good" {
		t.Fatalf("ReadBatch = %d, %v: %q; stats %+v", k, err, msgs[0].Buf[:msgs[0].N], x.Stats())
	}
	if s := x.Stats(); s.RxMalformed != uint64(len(bad)) || s.RxPackets != 1 {
		t.Fatalf("stats %+v, want %d malformed and 1 received", s, len(bad))
	}
}

//go:build linux

package netio

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"net/netip"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/goverbs/goverbs/wire"
)

// zeroChecksumRoCE6 builds what Linux rxe sends over IPv6: a UDP header with checksum 0
// and an RDMA SEND ONLY packet with its ICRC, from [::1]:srcPort to dst.
func zeroChecksumRoCE6(srcPort uint16, dst netip.AddrPort) []byte {
	h := wire.Headers{BTH: wire.BTHFields{Opcode: wire.RCSendOnly, PKey: 0xffff, DestQP: 0x11, PSN: 7}}
	roce := make([]byte, h.Len()+8+wire.ICRCLen)
	n := wire.Finish(roce, h.Encode(roce), 8)
	copy(roce[n-8:n], "rxe-ipv6")
	ip := wire.IPHeader{Src: netip.IPv6Loopback(), Dst: dst.Addr(), SrcPort: srcPort, DstPort: dst.Port()}
	wire.PutICRC(&ip, roce, n)
	udp := make([]byte, 8, 8+len(roce))
	binary.BigEndian.PutUint16(udp[0:], srcPort)
	binary.BigEndian.PutUint16(udp[2:], dst.Port())
	binary.BigEndian.PutUint16(udp[4:], uint16(8+len(roce)))
	// udp[6:8], the checksum, stays 0.
	return append(udp, roce...)
}

// sendRawUDP6 sends a whole UDP datagram (header included) to [::1] through a raw
// socket, which leaves the checksum as given; it skips the test where raw sockets are
// not allowed.
func sendRawUDP6(t *testing.T, dgram []byte) {
	t.Helper()
	fd, err := unix.Socket(unix.AF_INET6, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.IPPROTO_UDP)
	if err != nil {
		t.Skipf("no raw IPv6 socket (needs CAP_NET_RAW): %v", err)
	}
	defer unix.Close(fd)
	if err := unix.Sendto(fd, dgram, 0, &unix.SockaddrInet6{Addr: netip.IPv6Loopback().As16()}); err != nil {
		t.Skipf("raw IPv6 send: %v", err)
	}
}

// TestIPv6ZeroChecksumAccepted: Linux rxe sends RoCEv2 over IPv6 with UDP checksum 0;
// the IPv6 receive socket accepts it (UDP_NO_CHECK6_RX), in both receive modes. Without
// the option the kernel drops it (Udp6InCsumErrors), which the second half shows: the
// option off, the zero-checksum datagram never arrives, and a checksummed one sent after
// it does.
func TestIPv6ZeroChecksumAccepted(t *testing.T) {
	const srcPort = 50001
	for _, busy := range []bool{false, true} {
		t.Run(fmt.Sprintf("BusyPoll=%v", busy), func(t *testing.T) {
			c := listen(t, "[::1]:0", UDPOptions{BusyPoll: busy})
			dgram := zeroChecksumRoCE6(srcPort, c.LocalAddr())
			sendRawUDP6(t, dgram)
			got, from := readN(t, c, 1, 5*time.Second)
			if !bytes.Equal(got[0], dgram[8:]) {
				t.Fatalf("received %x, want %x", got[0], dgram[8:])
			}
			if want := netip.AddrPortFrom(netip.IPv6Loopback(), srcPort); from[0] != want {
				t.Fatalf("from %v, want %v", from[0], want)
			}
		})
	}
	t.Run("option off", func(t *testing.T) {
		c := listen(t, "[::1]:0", UDPOptions{})
		var serr error
		if err := c.(*udpConn).rc.Control(func(fd uintptr) {
			serr = unix.SetsockoptInt(int(fd), unix.IPPROTO_UDP, unix.UDP_NO_CHECK6_RX, 0)
		}); err != nil || serr != nil {
			t.Fatalf("turning UDP_NO_CHECK6_RX off: %v %v", err, serr)
		}
		sendRawUDP6(t, zeroChecksumRoCE6(srcPort, c.LocalAddr()))
		peer := listen(t, "[::1]:0", UDPOptions{})
		if _, err := peer.WriteBatch([]Message{{Buf: []byte("checksummed"), N: 11, Addr: c.LocalAddr()}}); err != nil {
			t.Fatal(err)
		}
		// Loopback delivers in the sender's system call, so the zero-checksum datagram,
		// had it been accepted, would be queued first.
		if got, _ := readN(t, c, 1, 5*time.Second); string(got[0]) != "checksummed" {
			t.Fatalf("first datagram %q: the zero-checksum one was accepted without the option", got[0])
		}
	})
}

// TestIPv6SendsChecksum: what goverbs sends over IPv6 carries a real UDP checksum, as
// RFC 8200 requires of anything that is not a tunnel (RFC 6935/6936), single datagrams
// and GSO segments alike. A raw socket sees a copy of every UDP datagram to [::1].
func TestIPv6SendsChecksum(t *testing.T) {
	fd, err := unix.Socket(unix.AF_INET6, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.IPPROTO_UDP)
	if err != nil {
		t.Skipf("no raw IPv6 socket (needs CAP_NET_RAW): %v", err)
	}
	defer unix.Close(fd)
	a := listen(t, "[::1]:0", UDPOptions{})
	b := listen(t, "[::1]:0", UDPOptions{DisableGRO: true})
	run := bytes.Repeat([]byte("segment!"), 3*125) // three segments of 1000 bytes
	if _, err := a.WriteBatch([]Message{
		{Buf: []byte("single"), N: 6, Addr: b.LocalAddr()},
		{Buf: run, N: len(run), SegSize: 1000, Addr: b.LocalAddr()},
	}); err != nil {
		t.Fatal(err)
	}
	readN(t, b, 4, 5*time.Second)
	tv := unix.NsecToTimeval(int64(2 * time.Second))
	if err := unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv); err != nil {
		t.Fatal(err)
	}
	// Loopback passes a GSO send whole (the receiving socket segments it), so count
	// bytes, not datagrams.
	buf := make([]byte, 1<<16)
	for seen, want := 0, 6+len(run); seen < want; {
		n, _, err := unix.Recvfrom(fd, buf, 0)
		if err != nil {
			t.Fatalf("raw socket saw %d of %d bytes: %v", seen, want, err)
		}
		if n < 8 || binary.BigEndian.Uint16(buf[2:]) != b.LocalAddr().Port() {
			continue // someone else's
		}
		if sum := binary.BigEndian.Uint16(buf[6:]); sum == 0 {
			t.Fatalf("a datagram of %d bytes was sent with UDP checksum 0", n)
		}
		seen += n - 8
	}
}

//go:build linux

package afxdp_test

import (
	"encoding/binary"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/goverbs/goverbs/netio"
	"github.com/goverbs/goverbs/netio/afxdp"
	"golang.org/x/net/icmp"
	"golang.org/x/net/ipv4"
	"golang.org/x/sys/unix"
)

// openXDP opens an AF_XDP Conn in namespace A on addr; the test closes it.
func openXDP(t *testing.T, n *testNet, addr netip.Addr, opts afxdp.Options) *afxdp.Conn {
	t.Helper()
	var x *afxdp.Conn
	var err error
	opts.Addr, opts.Interface = netip.AddrPortFrom(addr, 4791), ifA
	in(t, n.A, func() { x, err = afxdp.Open(opts) })
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { x.Close() })
	return x
}

// openPeerUDP opens a UDP backend Conn in namespace B on B's IPv4 address, port 4791;
// the test closes it.
func openPeerUDP(t *testing.T, n *testNet) netio.Conn {
	t.Helper()
	var u netio.Conn
	var err error
	in(t, n.B, func() { u, err = netio.ListenUDP(netip.AddrPortFrom(n.AddrB, 4791), netio.UDPOptions{}) })
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { u.Close() })
	return u
}

// openPeerXDP opens an AF_XDP Conn in namespace B on B's IPv4 address; the test closes it.
func openPeerXDP(t *testing.T, n *testNet) *afxdp.Conn {
	t.Helper()
	var b *afxdp.Conn
	var err error
	in(t, n.B, func() { b, err = afxdp.Open(afxdp.Options{Addr: netip.AddrPortFrom(n.AddrB, 4791), Interface: ifB}) })
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	return b
}

// TestKernelPath: with the program attached, what is not UDP to the device's address and
// port still reaches the kernel: ARP (B resolves A afresh), ICMP echo (A pings B and
// gets the reply through va), UDP to another port of A's address and UDP to port 4791
// of another of va's addresses, each answered by a kernel socket. None of it reaches
// the AF_XDP socket, and a datagram to the device's own address and port does.
func TestKernelPath(t *testing.T) {
	n := newTestNet(t, 1500)
	n.ip(t, "-n", n.A, "addr", "add", "192.0.2.3/24", "dev", ifA)
	x := openXDP(t, n, n.AddrA, afxdp.Options{})
	if !strings.Contains(n.ip(t, "-n", n.A, "-d", "link", "show", ifA), "prog/xdp") {
		t.Fatal("no XDP program on va")
	}

	// Kernel sockets in A: an echo server on 192.0.2.1:5000 and on 192.0.2.3:4791.
	var other, otherAddr *net.UDPConn
	var icmpConn *icmp.PacketConn
	var err error
	in(t, n.A, func() {
		if other, err = net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(192, 0, 2, 1), Port: 5000}); err != nil {
			return
		}
		if otherAddr, err = net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(192, 0, 2, 3), Port: 4791}); err != nil {
			return
		}
		icmpConn, err = icmp.ListenPacket("ip4:icmp", "192.0.2.1")
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []*net.UDPConn{other, otherAddr} {
		defer c.Close()
		go func() {
			b := make([]byte, 64)
			for {
				k, from, err := c.ReadFromUDPAddrPort(b)
				if err != nil {
					return
				}
				c.WriteToUDPAddrPort(append([]byte("echo "), b[:k]...), from)
			}
		}()
	}
	defer icmpConn.Close()

	n.ip(t, "-n", n.B, "neigh", "flush", "all") // B must ask A by ARP again
	var client *net.UDPConn
	in(t, n.B, func() { client, err = net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(192, 0, 2, 2)}) })
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	for _, to := range []string{"192.0.2.1:5000", "192.0.2.3:4791"} {
		if _, err := client.WriteToUDPAddrPort([]byte("hi"), netip.MustParseAddrPort(to)); err != nil {
			t.Fatal(err)
		}
		client.SetReadDeadline(time.Now().Add(3 * time.Second))
		b := make([]byte, 64)
		k, from, err := client.ReadFromUDPAddrPort(b)
		if err != nil || string(b[:k]) != "echo hi" || from.String() != to {
			t.Fatalf("UDP to %s through the kernel: %q from %v, %v", to, b[:k], from, err)
		}
	}
	if out := n.ip(t, "-n", n.B, "neigh", "show", "192.0.2.1"); !strings.Contains(out, "lladdr") {
		t.Fatalf("B did not resolve A by ARP: %q", out)
	}

	// ICMP echo from A to B: the reply comes in through va.
	echo := icmp.Message{Type: ipv4.ICMPTypeEcho, Body: &icmp.Echo{ID: 0x6776, Seq: 1, Data: []byte("goverbs")}}
	wb, _ := echo.Marshal(nil)
	if _, err := icmpConn.WriteTo(wb, &net.IPAddr{IP: net.IPv4(192, 0, 2, 2)}); err != nil {
		t.Fatal(err)
	}
	icmpConn.SetReadDeadline(time.Now().Add(3 * time.Second))
	for {
		b := make([]byte, 1500)
		k, _, err := icmpConn.ReadFrom(b)
		if err != nil {
			t.Fatalf("no ICMP echo reply: %v", err)
		}
		m, err := icmp.ParseMessage(1, b[:k])
		if err == nil && m.Type == ipv4.ICMPTypeEchoReply {
			break
		}
	}
	if s := x.Stats(); s.RxPackets != 0 || s.RxNotOurs != 0 || s.RxMalformed != 0 {
		t.Fatalf("the AF_XDP socket saw kernel traffic: %+v", s)
	}

	// And the device's own traffic goes to the socket.
	if _, err := client.WriteToUDPAddrPort([]byte("rocev2"), x.LocalAddr()); err != nil {
		t.Fatal(err)
	}
	msgs := []netio.Message{{Buf: make([]byte, 64)}}
	if k, err := readTimeout(x, msgs, 3*time.Second); k != 1 || err != nil || string(msgs[0].Buf[:msgs[0].N]) != "rocev2" {
		t.Fatalf("ReadBatch = %d, %v", k, err)
	}
}

// readTimeout is ReadBatch with a timeout (through WaitReadable).
func readTimeout(x *afxdp.Conn, msgs []netio.Message, d time.Duration) (int, error) {
	if ok, err := x.WaitReadable(d); !ok || err != nil {
		return 0, err
	}
	return x.ReadBatch(msgs)
}

// TestWireFormat captures on B what the Conn sends and checks every header field the
// kernel would have filled in: Ethernet addresses, IPv4 with DF, Identification 0, TTL
// 64 and a correct header checksum (IPv6: hop limit 64), UDP ports, length and a
// correct checksum.
func TestWireFormat(t *testing.T) {
	n := newTestNet(t, 1500)
	n.waitIPv6(t)
	for _, v6 := range []bool{false, true} {
		addrA, addrB := n.AddrA, n.AddrB
		if v6 {
			addrA, addrB = n.V6A, n.V6B
		}
		x := openXDP(t, n, addrA, afxdp.Options{})
		var capFd int
		var err error
		var vb *net.Interface
		in(t, n.B, func() {
			if vb, err = net.InterfaceByName(ifB); err != nil {
				return
			}
			proto := int(htons(unix.ETH_P_ALL))
			if capFd, err = unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, proto); err != nil {
				return
			}
			err = unix.Bind(capFd, &unix.SockaddrLinklayer{Protocol: htons(unix.ETH_P_ALL), Ifindex: vb.Index})
		})
		if err != nil {
			t.Fatal(err)
		}
		tv := unix.NsecToTimeval(int64(3 * time.Second))
		unix.SetsockoptTimeval(capFd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv)
		payload := []byte("an odd-length RoCEv2 payload")
		to := netip.AddrPortFrom(addrB, 4791)
		if _, err := x.WriteBatch([]netio.Message{{Buf: payload, N: len(payload), Addr: to}}); err != nil {
			t.Fatal(err)
		}
		var f []byte
		for {
			b := make([]byte, 2048)
			k, _, err := unix.Recvfrom(capFd, b, 0)
			if err != nil {
				t.Fatalf("v6=%v: nothing captured: %v", v6, err)
			}
			f = b[:k]
			if isUDPTo(f, 4791) {
				break
			}
		}
		unix.Close(capFd)
		checkFrame(t, f, vb.HardwareAddr, x.LocalAddr(), to, payload)
		x.Close()
	}
}

func htons(v uint16) uint16 { return v<<8 | v>>8 }

func isUDPTo(f []byte, port uint16) bool {
	if len(f) < 14 {
		return false
	}
	switch binary.BigEndian.Uint16(f[12:]) {
	case 0x0800:
		return len(f) >= 14+28 && f[23] == 17 && binary.BigEndian.Uint16(f[36:]) == port
	case 0x86dd:
		return len(f) >= 14+48 && f[20] == 17 && binary.BigEndian.Uint16(f[56:]) == port
	}
	return false
}

func checkFrame(t *testing.T, f []byte, dstMAC net.HardwareAddr, src, dst netip.AddrPort, payload []byte) {
	t.Helper()
	if net.HardwareAddr(f[0:6]).String() != dstMAC.String() {
		t.Errorf("destination MAC %v, want %v", net.HardwareAddr(f[0:6]), dstMAC)
	}
	var pseudo []byte
	var udp []byte
	if src.Addr().Is4() {
		ip := f[14:34]
		if id := binary.BigEndian.Uint16(ip[4:]); id != 0 {
			t.Errorf("IPv4 Identification %d, want 0", id)
		}
		if fl := binary.BigEndian.Uint16(ip[6:]); fl != 0x4000 {
			t.Errorf("IPv4 flags/fragment %#x, want DF only", fl)
		}
		if ip[8] != 64 || ip[0] != 0x45 {
			t.Errorf("IPv4 TTL %d, version/IHL %#x", ip[8], ip[0])
		}
		if sum(0, ip) != 0xffff {
			t.Errorf("IPv4 header checksum wrong")
		}
		if netip.AddrFrom4([4]byte(ip[12:16])) != src.Addr() || netip.AddrFrom4([4]byte(ip[16:20])) != dst.Addr() {
			t.Errorf("IPv4 addresses %v", ip[12:20])
		}
		udp = f[34:]
		pseudo = append(append([]byte{}, ip[12:20]...), 0, 17, 0, 0)
	} else {
		ip := f[14:54]
		if ip[7] != 64 || ip[6] != 17 {
			t.Errorf("IPv6 hop limit %d, next header %d", ip[7], ip[6])
		}
		udp = f[54:]
		pseudo = append(append([]byte{}, ip[8:40]...), 0, 0, 0, 0, 0, 0, 0, 17)
	}
	ulen := int(binary.BigEndian.Uint16(udp[4:]))
	if ulen != 8+len(payload) || binary.BigEndian.Uint16(udp[0:]) != src.Port() || binary.BigEndian.Uint16(udp[2:]) != dst.Port() {
		t.Fatalf("UDP header %x", udp[:8])
	}
	if string(udp[8:ulen]) != string(payload) {
		t.Errorf("payload %q", udp[8:ulen])
	}
	if src.Addr().Is4() {
		binary.BigEndian.PutUint16(pseudo[10:], uint16(ulen))
	} else {
		binary.BigEndian.PutUint32(pseudo[32:], uint32(ulen))
	}
	if binary.BigEndian.Uint16(udp[6:]) == 0 || sum(sum(0, pseudo), udp[:ulen]) != 0xffff {
		t.Errorf("UDP checksum %#x wrong", binary.BigEndian.Uint16(udp[6:]))
	}
}

// sum is the one's-complement sum of b added to s, folded (RFC 1071), 16 bits at a time.
func sum(s uint32, b []byte) uint32 {
	for len(b) >= 2 {
		s += uint32(binary.BigEndian.Uint16(b))
		b = b[2:]
	}
	if len(b) == 1 {
		s += uint32(b[0]) << 8
	}
	for s>>16 != 0 {
		s = s&0xffff + s>>16
	}
	return s
}

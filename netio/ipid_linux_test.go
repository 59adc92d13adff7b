//go:build linux

package netio

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// capturedIPv4 is what a capture saw of one outgoing IPv4/UDP datagram.
type capturedIPv4 struct {
	id     uint16
	df     bool
	udpLen int
}

func (c capturedIPv4) String() string {
	return fmt.Sprintf("id=%d df=%v udplen=%d", c.id, c.df, c.udpLen)
}

// captureLo opens an AF_PACKET socket on lo (needs CAP_NET_RAW) and returns
// a function collecting outgoing IPv4/UDP datagrams to dstPort until want
// have been seen or a short timeout.
func captureLo(t *testing.T) func(dstPort uint16, want int) []capturedIPv4 {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root for an AF_PACKET capture")
	}
	lo, err := net.InterfaceByName("lo")
	if err != nil {
		t.Skip(err)
	}
	proto := int(htons(unix.ETH_P_ALL))
	fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW, proto)
	if err != nil {
		t.Skipf("AF_PACKET: %v", err)
	}
	t.Cleanup(func() { unix.Close(fd) })
	if err := unix.Bind(fd, &unix.SockaddrLinklayer{Protocol: htons(unix.ETH_P_ALL), Ifindex: lo.Index}); err != nil {
		t.Fatal(err)
	}
	tv := unix.NsecToTimeval(int64(200 * time.Millisecond))
	if err := unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv); err != nil {
		t.Fatal(err)
	}
	return func(dstPort uint16, want int) (got []capturedIPv4) {
		buf := make([]byte, 1<<17)
		deadline := time.Now().Add(2 * time.Second)
		for len(got) < want && time.Now().Before(deadline) {
			n, from, err := unix.Recvfrom(fd, buf, 0)
			if err != nil {
				continue
			}
			ll, ok := from.(*unix.SockaddrLinklayer)
			if !ok || ll.Pkttype != unix.PACKET_OUTGOING || n < 14+20+8 {
				continue
			}
			f := buf[:n]
			if binary.BigEndian.Uint16(f[12:]) != unix.ETH_P_IP {
				continue
			}
			ip := f[14:]
			ihl := int(ip[0]&0xf) * 4
			if ip[9] != unix.IPPROTO_UDP || len(ip) < ihl+8 || binary.BigEndian.Uint16(ip[ihl+2:]) != dstPort {
				continue
			}
			got = append(got, capturedIPv4{
				id:     binary.BigEndian.Uint16(ip[4:]),
				df:     ip[6]&0x40 != 0,
				udpLen: int(binary.BigEndian.Uint16(ip[ihl+4:])),
			})
		}
		return got
	}
}

func htons(v uint16) uint16 { return v<<8 | v>>8 }

// TestIPv4Identification checks Caps.IPv4IDZero on the wire: datagrams from
// ListenUDP leave with DF and Identification 0, unlike a default socket, and
// records what a GSO send looks like on loopback (one unsegmented packet,
// since lo takes GSO packets whole).
func TestIPv4Identification(t *testing.T) {
	capture := captureLo(t)
	a := listen(t, "127.0.0.2:0", UDPOptions{})
	b := listen(t, "127.0.0.3:0", UDPOptions{DisableGRO: true})
	if !a.Caps().IPv4IDZero {
		t.Fatal("IPv4IDZero false")
	}
	port := b.LocalAddr().Port()

	ms := newMsgs(5, 1000)
	for i := range ms {
		ms[i].N, ms[i].Addr = 100, b.LocalAddr()
	}
	if _, err := a.WriteBatch(ms); err != nil {
		t.Fatal(err)
	}
	for _, p := range capture(port, 5) {
		if p.id != 0 || !p.df {
			t.Errorf("ListenUDP datagram: %v, want id=0 df=true", p)
		}
	}

	// A default Go socket: no DF, the kernel's hashed per-destination counter.
	plain, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 2)})
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()
	for range 3 {
		plain.WriteToUDPAddrPort([]byte("x"), b.LocalAddr())
	}
	t.Logf("default socket: %v", capture(port, 3))

	if a.Caps().GSO {
		buf := make([]byte, 4*1000)
		if _, err := a.WriteBatch([]Message{{Buf: buf, N: len(buf), Addr: b.LocalAddr(), SegSize: 1000}}); err != nil {
			t.Fatal(err)
		}
		// lo accepts GSO packets whole: the capture sees one 4008-byte UDP
		// datagram with id 0; the receiving socket segments it.
		got := capture(port, 1)
		t.Logf("GSO send of 4x1000 on lo: %v", got)
		if len(got) != 1 || got[0].id != 0 || !got[0].df {
			t.Errorf("GSO super-packet on lo: %v", got)
		}
	}
	readN(t, b, 5+3+4, 2*time.Second)
}

// TestGSOSegmentIdentification measures the Identification of GSO segments
// when the kernel segments in software before the device (as it does for a
// NIC without UDP segmentation offload). It re-runs itself in a private
// network namespace whose lo has gso_max_segs 1, so that segmentation
// happens on transmit and the capture sees every segment. Only that
// namespace's loopback is touched.
func TestGSOSegmentIdentification(t *testing.T) {
	if os.Getenv("NETIO_GSO_NETNS") == "1" {
		gsoSegmentIDsInNetns(t)
		return
	}
	out, err := rerunInNetns(t, "TestGSOSegmentIdentification", "NETIO_GSO_NETNS", "gso_max_segs 1")
	if err != nil {
		if strings.Contains(string(out), "SKIP") || strings.Contains(string(out), "Operation not permitted") {
			t.Skipf("netns: %v\n%s", err, out)
		}
		t.Fatalf("netns run: %v\n%s", err, out)
	}
	for _, l := range strings.Split(string(out), "\n") {
		if strings.Contains(l, "segment") {
			t.Log(strings.TrimSpace(l))
		}
	}
}

// rerunInNetns runs test again in a private network namespace (skipping when not root or
// without unshare and ip) whose lo is up and set with "ip link set dev lo LOSETUP"; env=1
// tells the inner run it is inside. Only that namespace's loopback is touched.
func rerunInNetns(t *testing.T, test, env, loSetup string) ([]byte, error) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root")
	}
	unshare, err1 := exec.LookPath("unshare")
	ipcmd, err2 := exec.LookPath("ip")
	if err1 != nil || err2 != nil {
		t.Skip("needs unshare and ip")
	}
	script := ipcmd + " link set lo up && " + ipcmd + " link set dev lo " + loSetup +
		" && exec \"$0\" -test.run='^" + test + "$' -test.v -test.count=1"
	cmd := exec.Command(unshare, "-n", "sh", "-c", script, os.Args[0])
	cmd.Env = append(os.Environ(), env+"=1")
	return cmd.CombinedOutput()
}

func gsoSegmentIDsInNetns(t *testing.T) {
	capture := captureLo(t)
	a := listen(t, "127.0.0.1:0", UDPOptions{})
	b := listen(t, "127.0.0.1:0", UDPOptions{DisableGRO: true})
	if !a.Caps().GSO {
		t.Skip("no GSO")
	}
	const segs = 5
	buf := make([]byte, segs*1000-300)
	for round := range 2 {
		if _, err := a.WriteBatch([]Message{{Buf: buf, N: len(buf), Addr: b.LocalAddr(), SegSize: 1000}}); err != nil {
			t.Fatal(err)
		}
		got := capture(b.LocalAddr().Port(), segs)
		t.Logf("segments of GSO send %d (software segmentation): %v", round, got)
		if len(got) != segs {
			t.Fatalf("captured %d segments, want %d", len(got), segs)
		}
		for i, p := range got {
			if want := GSOSegmentID(0, i); p.id != want || !p.df {
				t.Errorf("segment %d: %v, want id=%d df=true", i, p, want)
			}
		}
	}
	readN(t, b, 2*segs, 2*time.Second)
}

// TestGSORefused: in a private netns whose lo has MTU 1500, a GSO send with
// 2000-byte segments is refused (Linux 6.18 says EMSGSIZE; older kernels
// EINVAL, which makes WriteBatch resend the run split, to be refused again).
// All three datagrams are reported as skipped, GSO stays on because GSO was
// not the problem, and the run after them still arrives.
func TestGSORefused(t *testing.T) {
	if os.Getenv("NETIO_GSO_REFUSED_NETNS") == "1" {
		gsoRefusedInNetns(t)
		return
	}
	out, err := rerunInNetns(t, "TestGSORefused", "NETIO_GSO_REFUSED_NETNS", "mtu 1500")
	if err != nil {
		t.Fatalf("netns run: %v\n%s", err, out)
	}
	t.Logf("%s", out)
}

func gsoRefusedInNetns(t *testing.T) {
	a := listen(t, "127.0.0.1:0", UDPOptions{})
	b := listen(t, "127.0.0.1:0", UDPOptions{DisableGRO: true})
	if !a.Caps().GSO {
		t.Skip("no GSO")
	}
	big := make([]byte, 3*2000)
	ok := make([]byte, 3*1000)
	ms := []Message{
		{Buf: big, N: len(big), Addr: b.LocalAddr(), SegSize: 2000},
		{Buf: ok, N: len(ok), Addr: b.LocalAddr(), SegSize: 1000},
	}
	n, err := a.WriteBatch(ms)
	var se *SendError
	if n != 2 || !errors.As(err, &se) || se.Index != 0 || se.Skipped != 3 {
		t.Fatalf("WriteBatch = %d, %v", n, err)
	}
	t.Logf("refused GSO run: %v; GSO still %v", err, a.Caps().GSO)
	if !a.Caps().GSO {
		t.Error("GSO turned off although the split datagrams were refused too")
	}
	got, _ := readN(t, b, 3, 2*time.Second)
	for _, g := range got {
		if len(g) != 1000 {
			t.Fatalf("got %d-byte datagram", len(g))
		}
	}
}

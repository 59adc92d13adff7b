//go:build linux

package netio

import (
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
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

// TestNoEpollRegistration: a busy-poll Conn's receive socket and every Conn's send socket
// stay out of every epoll set, also after WaitReadable has waited (it waits in poll(2)). A
// socket in an epoll set makes every datagram delivered to it, or freed after sending,
// run the set's callback inside the sender's system call.
func TestNoEpollRegistration(t *testing.T) {
	busy := listen(t, "127.0.0.2:0", UDPOptions{BusyPoll: true})
	plain := listen(t, "127.0.0.3:0", UDPOptions{})
	p, _ := AsPoller(busy)
	if ready, err := p.WaitReadable(time.Millisecond); ready || err != nil {
		t.Fatalf("WaitReadable on an idle socket = %v, %v", ready, err)
	}
	fds := map[int]string{
		busy.(*udpConn).rfd.fd:  "busy-poll receive socket",
		busy.(*udpConn).snd.fd:  "busy-poll send socket",
		plain.(*udpConn).snd.fd: "send socket",
	}
	ents, err := os.ReadDir("/proc/self/fdinfo")
	if err != nil {
		t.Skip("no /proc/self/fdinfo:", err)
	}
	for _, e := range ents {
		b, err := os.ReadFile("/proc/self/fdinfo/" + e.Name())
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(b), "\n") {
			// An epoll set lists each registered descriptor as "tfd:  N events: ...".
			f := strings.Fields(line)
			if len(f) < 2 || f[0] != "tfd:" {
				continue
			}
			if n, err := strconv.Atoi(f[1]); err == nil && fds[n] != "" {
				t.Errorf("the %s (fd %d) is registered in epoll set fd %s", fds[n], n, e.Name())
			}
		}
	}
}

const bufChildEnv = "NETIO_BUFFER_CHILD"

// TestBufferWarningUnprivileged opens a Conn without CAP_NET_ADMIN (in a user namespace,
// where SO_RCVBUFFORCE is refused) and checks that BufferWarning speaks exactly when
// net.core.rmem_max is below the receive buffer ListenUDP asks for.
func TestBufferWarningUnprivileged(t *testing.T) {
	if os.Getenv(bufChildEnv) != "" {
		c := listen(t, "127.0.0.2:0", UDPOptions{})
		fmt.Printf("warning=%q\n", BufferWarning(c.Caps()))
		return
	}
	unshare, err := exec.LookPath("unshare")
	if err != nil {
		t.Skip("no unshare(1)")
	}
	b, err := os.ReadFile("/proc/sys/net/core/rmem_max")
	if err != nil {
		t.Skip(err)
	}
	rmemMax, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(unshare, "--user", os.Args[0], "-test.run=^TestBufferWarningUnprivileged$", "-test.count=1")
	cmd.Env = append(os.Environ(), bufChildEnv+"=1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Skipf("cannot run in a user namespace: %v: %s", err, out)
	}
	warned := strings.Contains(string(out), "warning=\"netio:")
	if want := rmemMax < defaultRecvBuf; warned != want {
		t.Fatalf("rmem_max %d, ListenUDP wants %d: warned=%v, want %v\n%s", rmemMax, defaultRecvBuf, warned, want, out)
	}
	t.Logf("rmem_max %d: warned=%v", rmemMax, warned)
}

package capitest

// Datagram rsockets in goverbs' drop-in librdmacm.so.1 (capi/rdmacm/rsocket_dgram.c):
// rdmacm-utils' unmodified udpong, server and client on two devices of one goverbs serve
// daemon, and against goverbs' own udpong (package rdmanet's PacketConn, the same wire
// protocol) attached to the same daemon, both ways. udpong's server serves until it is
// killed and says nothing before a client logs in, so the run waits for its UDP port.

import (
	"encoding/binary"
	"net"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// hostileDatagrams are datagrams a datagram rsocket's UDP socket must drop: short ones,
// a wrong tag, version, length or op, and one longer than any datagram; then a
// well-formed control message naming a QPN nobody has.
func hostileDatagrams(from string) [][]byte {
	good := make([]byte, 16)
	binary.BigEndian.PutUint32(good, 0x55555555)
	good[4], good[5], good[6] = 4, 0, 16
	binary.BigEndian.PutUint32(good[8:], 0xFFFFFF)
	copy(good[12:], net.ParseIP(from).To4())
	edit := func(i int, v byte) []byte {
		b := append([]byte(nil), good...)
		b[i] = v
		return append(b, "payload"...)
	}
	ctrl := append([]byte(nil), good...)
	ctrl[5] = 7
	return [][]byte{{}, {0x55}, good[:15], edit(0, 0), edit(4, 6), edit(4, 9), edit(6, 28), edit(6, 255),
		edit(6, 4), edit(5, 3), append(append([]byte(nil), good...), make([]byte, 3000)...), ctrl}
}

func TestRsocketUdpong(t *testing.T) {
	r := newRsocketRig(t, "udpong")
	udpong, gobin, sa, ca, d, srvEnv, cliEnv := r.prog, r.gobin, r.sa, r.ca, r.d, r.srvEnv, r.cliEnv
	// the client's first datagram (its login) goes over UDP; the rest over the UD QPs
	for _, tc := range []struct {
		name string
		args []string
	}{
		{"echo", []string{"-S", "1000", "-C", "100", "-T", "e"}},
		{"bandwidth 1.5k", []string{"-S", "1536", "-C", "200"}},
		{"blocking echo", []string{"-S", "64", "-C", "100", "-T", "b", "-T", "e"}},
		{"async rpoll echo", []string{"-S", "500", "-C", "100", "-T", "a", "-T", "e"}},
	} {
		t.Run("C/"+tc.name, func(t *testing.T) {
			port := strconv.Itoa(freePort(t))
			run := runCM // an echo can stall on a loaded machine: runUDCM says why
			if slices.Contains(tc.args, "e") {
				run = runUDCM
			}
			_, cli := run(t, "udp:"+port, 0, true,
				cmSide{append([]string{udpong, "-b", sa, "-p", port}, tc.args...), srvEnv},
				cmSide{append([]string{udpong, "-s", sa, "-p", port}, tc.args...), cliEnv})
			rstreamDone(t, "client", cli)
		})
	}

	// datagrams that are not rsockets' reach the server first: dropped, and it serves on
	t.Run("C server, hostile datagrams first", func(t *testing.T) {
		port := freePort(t)
		go func() {
			for end := time.Now().Add(20 * time.Second); !udpBound(port) && time.Now().Before(end); {
				time.Sleep(10 * time.Millisecond)
			}
			c, err := net.DialUDP("udp", &net.UDPAddr{IP: net.ParseIP(ca)}, &net.UDPAddr{IP: net.ParseIP(sa), Port: port})
			if err != nil {
				return
			}
			defer c.Close()
			for _, p := range hostileDatagrams(ca) {
				c.Write(p)
			}
		}()
		p := strconv.Itoa(port)
		_, cli := runCM(t, "udp:"+p, 300*time.Millisecond, true,
			cmSide{[]string{udpong, "-b", sa, "-p", p, "-T", "e"}, srvEnv},
			cmSide{[]string{udpong, "-s", sa, "-p", p, "-S", "100", "-C", "50", "-T", "e"}, cliEnv})
		rstreamDone(t, "client", cli)
	})

	echo := []string{"-S", "1000", "-C", "100", "-T", "e"}
	bw := []string{"-S", "1000", "-C", "200"}
	for _, args := range [][]string{echo, bw} {
		name := map[bool]string{true: "echo", false: "bandwidth"}[len(args) == len(echo)]
		t.Run("Go server, C client, "+name, func(t *testing.T) {
			port := strconv.Itoa(freePort(t))
			run := runCM
			if name == "echo" {
				run = runUDCM // udpong.c's echo client can stall on a loaded machine
			}
			srv, cli := run(t, "udp:"+port, 0, true,
				cmSide{append([]string{gobin, "udpong", "-b", sa, "-p", port}, args...), d.goTool("s0", sa)},
				cmSide{append([]string{udpong, "-s", sa, "-p", port}, args...), cliEnv})
			rstreamDone(t, "C client", cli)
			if !strings.Contains(srv, "client login from "+ca) {
				t.Errorf("the Go server logged no login from %s:\n%s", ca, srv)
			}
		})
		t.Run("C server, Go client, "+name, func(t *testing.T) {
			port := strconv.Itoa(freePort(t))
			_, cli := runCM(t, "udp:"+port, 0, true,
				cmSide{append([]string{udpong, "-b", sa, "-p", port}, args...), srvEnv},
				cmSide{append([]string{gobin, "udpong", "-s", sa, "-b", ca, "-p", port}, args...), d.goTool("c0", ca)})
			rstreamDone(t, "Go client", cli)
		})
	}
}

// TestRsocketDgramCalls runs testdata/rsdgram.c: the datagram calls udpong does not make
// (rselect, MSG_PEEK, rrecvfrom's address, rconnect and rgetpeername, EMSGSIZE, the
// longest datagram, options, rlisten refused), two sockets of one process on one device.
func TestRsocketDgramCalls(t *testing.T) {
	runCheckProgram(t, "rsdgram", "dgram ok\n")
}

package capitest

// Datagram rsockets in goverbs' drop-in librdmacm.so.1 (capi/rdmacm/rsocket_dgram.c):
// rdmacm-utils' unmodified udpong, server and client on two devices of one goverbs serve
// daemon, and against goverbs' own udpong (package rdmanet's PacketConn, the same wire
// protocol) attached to the same daemon, both ways. udpong's server serves until it is
// killed and says nothing before a client logs in, so the run waits for its UDP port.

import (
	"strconv"
	"strings"
	"testing"
)

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
			_, cli := runCM(t, "udp:"+port, 0, true,
				cmSide{append([]string{udpong, "-b", sa, "-p", port}, tc.args...), srvEnv},
				cmSide{append([]string{udpong, "-s", sa, "-p", port}, tc.args...), cliEnv})
			rstreamDone(t, "client", cli)
		})
	}

	echo := []string{"-S", "1000", "-C", "100", "-T", "e"}
	bw := []string{"-S", "1000", "-C", "200"}
	for _, args := range [][]string{echo, bw} {
		name := map[bool]string{true: "echo", false: "bandwidth"}[len(args) == len(echo)]
		t.Run("Go server, C client, "+name, func(t *testing.T) {
			port := strconv.Itoa(freePort(t))
			srv, cli := runCM(t, "udp:"+port, 0, true,
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

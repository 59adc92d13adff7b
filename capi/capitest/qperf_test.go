package capitest

// Debian's qperf on the C flavour and its librdmacm, attached to a goverbs serve daemon
// (issue 27). qperf's server forks a child for every client it serves, so the test is
// also one of fork() under a real program: the parent keeps listening on its TCP port
// while each child opens the device anew and runs the tests.

import (
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// TestQperfAttached runs qperf's RC tests with -cm1 (its rdma_cm mode) between two
// processes on two devices of one daemon, twice against the same forking server.
// Without -cm1 qperf addresses the peer by LID alone (no GRH), which no RoCE device
// takes, rxe included.
//
// Debian's qperf 0.4.11 sends the client the port it bound before it calls
// rdma_listen (strace of the server: the port's write, then CM_LISTEN to the daemon),
// so a quick client's REQ can find no listener; the daemon's CM lets a REQ for a
// bound port wait for the listen (ibcm's Reserve). Before it did, about one run in
// two lost that race on a loaded machine ("Event rejected").
func TestQperfAttached(t *testing.T) {
	lib := rdmacmLibrary(t)
	qperf := program(t, "qperf")
	sa, ca := newAddr(), newAddr()
	d := serve(t, lib, "s0="+sa+",c0="+ca)
	port := strconv.Itoa(freePort(t))
	server := cmSide{[]string{qperf, "-lp", port}, d.attached(lib, "s0", sa)}
	client := cmSide{[]string{qperf, "-lp", port, "-cm1", "-t", "1", sa,
		"rc_bw", "rc_lat", "rc_rdma_write_bw", "rc_bw"}, d.attached(lib, "c0", ca)}
	want := []*regexp.Regexp{
		regexp.MustCompile(`(?m)^rc_bw:\n\s+bw\s+=\s+[0-9.]+ [KMG]B/sec$`),
		regexp.MustCompile(`(?m)^rc_lat:\n\s+latency\s+=\s+[0-9.]+ (ns|us|ms)$`),
		regexp.MustCompile(`(?m)^rc_rdma_write_bw:\n\s+bw\s+=\s+[0-9.]+ [KMG]B/sec$`),
	}
	_, out := runCM(t, "tcp:"+port, 0, true, server, client)
	for _, re := range want {
		if !re.MatchString(out) {
			t.Errorf("qperf's output lacks %v:\n%s", re, out)
		}
	}
	if n := strings.Count(out, "rc_bw:"); n != 2 {
		t.Errorf("rc_bw ran %d times, want 2 (the forking server served it twice):\n%s", n, out)
	}
}

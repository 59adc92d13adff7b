//go:build linux

package server_test

import (
	"regexp"
	"runtime/pprof"
	"strconv"
	"strings"
	"testing"

	"github.com/goverbs/goverbs/verbs/soft"
)

// TestLoopDrivesSameHostRings: with the same-host shortcut on, two clients of one device
// exchange a message through the device's ring to itself, and the daemon's event loop,
// not the device's receive goroutine, reads it: the loop says so in stat, the ring
// carried the datagrams, and no goroutine waits in the shortcut's blocking read.
func TestLoopDrivesSameHostRings(t *testing.T) {
	t.Run("GOVERBS_SHM=1", func(t *testing.T) { loopDrivesSameHostRings(t, "1") })
	// The daemon's default: rings, where a device of the same process (an in-process
	// Go program's) would need GOVERBS_SHM=1.
	t.Run("unset", func(t *testing.T) { loopDrivesSameHostRings(t, "") })
}

func loopDrivesSameHostRings(t *testing.T, env string) {
	t.Setenv(soft.EnvSameHost, env)
	// Clients on the daemon's engine, as C clients are: a Go client's own engine sends
	// by the kernel, never through the daemon's rings.
	t.Setenv("GOVERBS_ATTACH_ENGINE", "0")
	_, addr := daemon(t)
	if st := statOf(t, addr); !strings.Contains(st, "event loop: reads the device's socket and its same-host rings") {
		t.Fatalf("the loop does not read the device's rings:\n%s", st)
	}
	exchange(t, addr)
	st := statOf(t, addr)
	m := regexp.MustCompile(`samehost_rx_pkts (\d+)`).FindStringSubmatch(st)
	if m == nil {
		t.Fatalf("no same-host counters in stat:\n%s", st)
	}
	// The SEND and its ACK, at least, through the ring.
	if n, _ := strconv.Atoi(m[1]); n < 2 {
		t.Fatalf("samehost_rx_pkts %d: the exchange did not take the ring\n%s", n, st)
	}
	var b strings.Builder
	pprof.Lookup("goroutine").WriteTo(&b, 1)
	if strings.Contains(b.String(), "netio.(*sameHostConn).ReadBatch") {
		t.Fatalf("a goroutine reads the device with ReadBatch (its receive goroutine):\n%s", b.String())
	}
}

// TestSameHostOffInDaemon: GOVERBS_SHM=0 keeps the daemon's devices on the kernel's UDP.
func TestSameHostOffInDaemon(t *testing.T) {
	t.Setenv(soft.EnvSameHost, "0")
	_, addr := daemon(t)
	exchange(t, addr)
	if st := statOf(t, addr); strings.Contains(st, "same-host rings") || strings.Contains(st, "samehost_rx_pkts") {
		t.Fatalf("GOVERBS_SHM=0, yet the device has the same-host shortcut:\n%s", st)
	}
}

//go:build linux

package attach_test

import (
	"fmt"
	"net/netip"
	"strings"
	"testing"

	"github.com/goverbs/goverbs/internal/attach/server"
	"github.com/goverbs/goverbs/internal/testaddr"
	"github.com/goverbs/goverbs/verbs/soft"
)

// Go clients on engines of their own beside clients on the daemon's engine, with the
// daemon's devices on the same-host rings (GOVERBS_SHM=1 for the daemon): the rings
// carry only datagrams for the daemon's engine's QPNs (top byte 0), the rest go by the
// kernel, which steers them to their client's engine.

// daemonOnRings serves two devices, sw0 and sw1, on the same-host rings, and returns
// their addresses.
func daemonOnRings(t *testing.T) [2]netip.Addr {
	t.Helper()
	t.Setenv("XDG_RUNTIME_DIR", t.TempDir())
	var srv *server.Server
	var addrs [2]netip.Addr
	testaddr.Open(t, testaddr.Attach, func(a netip.Addr) (*server.Server, error) {
		addrs = [2]netip.Addr{a, testaddr.Addr(testaddr.Attach)}
		s, err := server.New(server.Config{Devices: []soft.Config{
			{Name: "sw0", Addr: addrs[0], SameHost: true}, {Name: "sw1", Addr: addrs[1], SameHost: true}}})
		srv = s
		return s, err
	})
	t.Cleanup(func() { srv.Close() })
	return addrs
}

// ringKid starts a child attached at addr whose peer is at peer, on its own engine or
// on the daemon's (own), and checks from its first line that it is where it was put.
func ringKid(t *testing.T, addr, peer netip.Addr, own bool, mode string) *kid {
	t.Helper()
	ownEngine(t, own)
	t.Setenv("ATTACH_PEER", peer.String())
	k := startKid(t, addr, mode, 300)
	k.qpnLine(t)
	var qpn uint32
	fmt.Sscanf(k.line, "qpn %d", &qpn)
	if (qpn>>16 != 0) != own {
		t.Fatalf("child with own engine %v has QPN %#x", own, qpn)
	}
	// The daemon lists the range of a client on its own engine (a daemon whose engine
	// numbers QPs anywhere would pass the test above by chance).
	if st := daemonStat(t, addr); own != strings.Contains(st, fmt.Sprintf("own_engine qpn 0x%06x-", qpn&^0xffff)) {
		t.Fatalf("child with own engine %v, QPN %#x; the daemon lists:\n%s", own, qpn, st)
	}
	return k
}

// pingPongAll introduces the pairs' children to each other and waits for their "ok".
func pingPongAll(t *testing.T, ps [][2]*kid) {
	t.Helper()
	for _, p := range ps {
		introduce(p)
	}
	waitOK(t, ps)
}

// TestRingsOwnAndDaemonEngine: on one device and across the daemon's two devices, a
// client on its own engine and a client on the daemon's ping-pong, both ways round.
// The daemon's engine's datagrams to the own engine's QPN leave through the device's
// ring to itself, or its ring to the other device, unless the rings let them go by
// the kernel: through a ring they would reach the daemon's engine, which has no such QP.
func TestRingsOwnAndDaemonEngine(t *testing.T) {
	addrs := daemonOnRings(t)
	var ps [][2]*kid
	for _, across := range []bool{false, true} {
		b := addrs[0]
		if across {
			b = addrs[1]
		}
		for _, ownFirst := range []bool{true, false} {
			ps = append(ps, [2]*kid{ringKid(t, addrs[0], b, ownFirst, "ping"), ringKid(t, b, addrs[0], !ownFirst, "pong")})
		}
	}
	pingPongAll(t, ps)
}

// TestRingsTwoOwnEngines: two clients on engines of their own on one address of a
// daemon on the rings ping-pong (the device's socket heads the group all the same).
func TestRingsTwoOwnEngines(t *testing.T) {
	addrs := daemonOnRings(t)
	pingPongAll(t, [][2]*kid{{ringKid(t, addrs[0], addrs[0], true, "ping"), ringKid(t, addrs[0], addrs[0], true, "pong")}})
}

// TestRingsInProcessPeer: TestOwnEngineInProcessPeer with the daemon and the in-process
// peer both on the same-host rings: the peer pairs with the daemon's device and learns
// at the rendezvous that the ring takes only the daemon's engine's QPNs, so its
// datagrams to the own-engine client's QPN go by the kernel (without that, they reached
// the daemon's engine through the ring and the QP's retries ran out).
func TestRingsInProcessPeer(t *testing.T) {
	t.Setenv(soft.EnvSameHost, "1")
	TestOwnEngineInProcessPeer(t)
}

// Datagram backends other than UDP, registered by the packages that bring them.

package soft

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"sync"

	"github.com/goverbs/goverbs/netio"
)

// A Backend opens a device's datagram socket on addr for the ARGS of a Config.Backend
// "KIND:ARGS"; busyPoll is the device's Config.BusyPoll. The device owns the Conn.
type Backend func(args string, addr netip.AddrPort, busyPoll bool) (netio.Conn, error)

var (
	backendsMu sync.RWMutex
	backends   = map[string]Backend{}
)

// RegisterBackend makes a backend available under kind, for Config.Backend and
// GOVERBS_DEVICES entries "NAME=ADDR@KIND:ARGS". Backends register from their package's
// init, as database/sql drivers do, so that a program carries only the backends it
// imports (AF_XDP brings a BPF loader with it). Registering a kind twice panics.
func RegisterBackend(kind string, b Backend) {
	backendsMu.Lock()
	defer backendsMu.Unlock()
	if _, dup := backends[kind]; dup || b == nil || kind == "" || strings.Contains(kind, ":") {
		panic(fmt.Sprintf("soft: RegisterBackend(%q): duplicate, empty or nil", kind))
	}
	backends[kind] = b
}

// backendFor looks up the backend a spec names.
func backendFor(spec string) (Backend, string, error) {
	kind, args, _ := strings.Cut(spec, ":")
	backendsMu.RLock()
	b, ok := backends[kind]
	known := make([]string, 0, len(backends))
	for k := range backends {
		known = append(known, k)
	}
	backendsMu.RUnlock()
	if !ok {
		slices.Sort(known)
		list := strings.Join(known, ", ")
		if list == "" {
			list = "none"
		}
		return nil, "", fmt.Errorf("backend %q: unknown kind %q (registered in this program: %s; AF_XDP registers from package verbs/soft/xdp)", spec, kind, list)
	}
	return b, args, nil
}

// listenUDP opens the UDP backend's socket (a variable for the tests that look at the
// options a device asks for).
var listenUDP = netio.ListenUDP

// listen opens the device's datagram socket: the backend the Config names, UDP otherwise.
// ecn says whether the device reads received datagrams' ECN bits: its congestion
// control is on, so that it answers CE marks with CNPs as an RNIC's notification point
// does (IBTA Annex A17.9.3). Off, nothing reads them, and the UDP socket is not asked
// for a control message per datagram. A registered backend is not told: AF_XDP reads
// the bits from the headers it parses anyway, at no cost.
func listen(cfg Config, addr netip.AddrPort, ecn bool) (netio.Conn, error) {
	if cfg.Backend == "" {
		return listenUDP(addr, netio.UDPOptions{BusyPoll: cfg.BusyPoll, ECN: ecn, ReusePort: cfg.ReusePort})
	}
	b, args, err := backendFor(cfg.Backend)
	if err != nil {
		return nil, err
	}
	return b(args, addr, cfg.BusyPoll)
}

//go:build linux

package afxdp

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"sync"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// Neighbour resolution. The destination MAC address of every datagram comes from the
// kernel's neighbour table (ARP for IPv4, neighbour discovery for IPv6), read over
// netlink: the next hop is the kernel's route to the destination (its gateway, or the
// destination itself on a directly connected network). A miss is resolved by the
// kernel: an RTM_NEWNEIGH request with NTF_USE makes it create the entry and start
// probing, as a packet sent through its stack would; where that is refused, an ordinary
// UDP datagram through a kernel socket to the discard port does the same. goverbs never
// puts ARP or neighbour discovery on the wire itself.

const (
	// neighTTL is how long a resolved address is used before the table is read again
	// (the kernel keeps an entry REACHABLE for 15-45 s by default and revalidates it on
	// its own; reading it every second follows a change within a second).
	neighTTL = time.Second
	// resolveWait bounds how long a send waits for the kernel to resolve a miss; the
	// datagrams to that destination are reported as unreachable after it (RC retries).
	resolveWait = 100 * time.Millisecond
	// resolvePoll is the pause between reads of the table during a resolution.
	resolvePoll = time.Millisecond
	// recheckEvery bounds how often sends to a destination whose resolution failed read
	// the table again.
	recheckEvery = time.Millisecond
)

// errNoNeighbour is the SendError of a datagram whose next hop could not be resolved.
var errNoNeighbour = fmt.Errorf("afxdp: no neighbour entry: %w", unix.EHOSTUNREACH)

// errLocal is what lookup says of a destination on this host (the kernel's route is of
// type local): no NIC puts such a datagram back on the host, so it goes through the
// kernel's own stack (the Conn's local path) instead.
var errLocal = errors.New("afxdp: destination on this host")

type neighEntry struct {
	mac     [6]byte
	local   bool // on this host: see errLocal
	failed  bool // resolution failed: sends do not wait again until expires
	expires time.Time
	hop     netip.Addr // a failed entry's next hop
	checked time.Time  // when a failed entry's table entry was last read
}

// neighMemo is the Conn's last answer from lookup, kept (under the send lock) while
// lookup would give it again: a ping-pong's sends, one datagram or two a batch to the
// same peer, then skip the table's lock, map and clock checks.
type neighMemo struct {
	hop   netip.Addr
	mac   [6]byte
	until time.Time
}

// neighbours resolves next hops on one interface. Its netlink and UDP sockets are made
// in the network namespace Open runs in, and stay there: every later lookup asks that
// namespace's kernel whatever thread it runs on.
//
// lookup is called by one sender at a time (the Conn's send lock). An entry older than
// neighTTL is still used while a goroutine reads the table again, so that a send never
// waits for netlink once its destination has been resolved. mu guards the cache and the
// netlink handle between the two.
type neighbours struct {
	mu         sync.Mutex
	h          *netlink.Handle
	ifindex    int
	v6         bool
	local      netip.Addr
	probe      int // a UDP socket bound to local, for the fallback probe; -1 if none
	useOK      bool
	cache      map[netip.Addr]neighEntry
	refreshing map[netip.Addr]bool
	closed     bool
}

func newNeighbours(ifindex int, local netip.Addr) (*neighbours, error) {
	h, err := netlink.NewHandle(unix.NETLINK_ROUTE)
	if err != nil {
		return nil, fmt.Errorf("afxdp: netlink: %w", err)
	}
	n := &neighbours{h: h, ifindex: ifindex, v6: local.Is6() && !local.Is4In6(), local: local,
		probe: -1, useOK: true, cache: make(map[netip.Addr]neighEntry), refreshing: make(map[netip.Addr]bool)}
	domain := unix.AF_INET
	if n.v6 {
		domain = unix.AF_INET6
	}
	if fd, err := unix.Socket(domain, unix.SOCK_DGRAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, unix.IPPROTO_UDP); err == nil {
		var sa unix.Sockaddr
		if n.v6 {
			sa = &unix.SockaddrInet6{Addr: local.As16(), ZoneId: uint32(ifindex)}
		} else {
			sa = &unix.SockaddrInet4{Addr: local.Unmap().As4()}
		}
		if unix.Bind(fd, sa) == nil {
			n.probe = fd
		} else {
			unix.Close(fd)
		}
	}
	return n, nil
}

func (n *neighbours) close() {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.closed = true
	n.h.Close()
	if n.probe >= 0 {
		unix.Close(n.probe)
	}
}

// lookup returns the MAC address for datagrams to dst, resolving it through the kernel
// when the table has none (waiting up to resolveWait). now is the caller's clock. Until
// the time it also returns, lookup would answer dst with the same address and do
// nothing more (the entry is neither refreshed nor replaced before it expires), so a
// caller may keep the answer until then instead of asking again (neighMemo).
func (n *neighbours) lookup(dst netip.Addr, now time.Time) ([6]byte, time.Time, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.closed {
		return [6]byte{}, time.Time{}, errNoNeighbour
	}
	e, ok := n.cache[dst]
	switch {
	case ok && e.failed && now.Before(e.expires):
		// The kernel goes on probing after a failed wait: read its table again (at most
		// every recheckEvery, never waiting) so that an answer that came late is used at
		// once, by RC's next retry.
		if now.Sub(e.checked) < recheckEvery {
			return [6]byte{}, time.Time{}, errNoNeighbour
		}
		e.checked = now
		n.cache[dst] = e
		if mac, found, err := n.table(e.hop); err == nil && found {
			n.cache[dst] = neighEntry{mac: mac, expires: now.Add(neighTTL)}
			return mac, now.Add(neighTTL), nil
		}
		return [6]byte{}, time.Time{}, errNoNeighbour
	case ok && !e.failed:
		if !now.Before(e.expires) && !n.refreshing[dst] {
			n.refreshing[dst] = true
			go n.refresh(dst)
		}
		if e.local {
			return [6]byte{}, time.Time{}, errLocal
		}
		return e.mac, e.expires, nil
	}
	mac, err := n.resolve(dst, now)
	if err != nil {
		return mac, time.Time{}, err
	}
	return mac, n.cache[dst].expires, nil
}

// refresh reads dst's entry again in the background (see neighbours). An entry the
// kernel no longer has a usable address for is dropped, and the next send resolves
// it afresh.
func (n *neighbours) refresh(dst netip.Addr) {
	n.mu.Lock()
	defer n.mu.Unlock()
	delete(n.refreshing, dst)
	if n.closed {
		return
	}
	hop, err := n.nextHop(dst)
	if err == errLocal {
		n.cache[dst] = neighEntry{local: true, expires: time.Now().Add(neighTTL)}
		return
	}
	if err != nil {
		delete(n.cache, dst)
		return
	}
	mac, ok, err := n.table(hop)
	if err != nil || !ok {
		delete(n.cache, dst)
		return
	}
	n.cache[dst] = neighEntry{mac: mac, expires: time.Now().Add(neighTTL)}
}

// resolve finds dst's next hop and its address, asking the kernel to resolve it on a
// miss and waiting up to resolveWait. mu is held.
func (n *neighbours) resolve(dst netip.Addr, now time.Time) ([6]byte, error) {
	hop, err := n.nextHop(dst)
	if err == errLocal {
		n.cache[dst] = neighEntry{local: true, expires: now.Add(neighTTL)}
		return [6]byte{}, errLocal
	}
	if err != nil {
		return [6]byte{}, err
	}
	mac, ok, err := n.table(hop)
	if err != nil {
		return [6]byte{}, err
	}
	if !ok {
		n.solicit(hop, dst)
		deadline := now.Add(resolveWait)
		for !ok && time.Now().Before(deadline) {
			time.Sleep(resolvePoll)
			if mac, ok, err = n.table(hop); err != nil {
				return [6]byte{}, err
			}
		}
		if !ok {
			// The kernel goes on probing by itself; until neighTTL has passed, sends to
			// dst fail without waiting again (they only look at the table), so that an
			// unreachable peer (which RC keeps retrying) does not stall the sends to
			// every other.
			t := time.Now()
			n.cache[dst] = neighEntry{failed: true, expires: t.Add(neighTTL), hop: hop, checked: t}
			return [6]byte{}, errNoNeighbour
		}
	}
	n.cache[dst] = neighEntry{mac: mac, expires: time.Now().Add(neighTTL)}
	return mac, nil
}

// nextHop asks the kernel's routing table how dst is reached: through a gateway, or
// directly, or (errLocal) on this host. A route out of another interface is an error:
// this socket sends on one.
func (n *neighbours) nextHop(dst netip.Addr) (netip.Addr, error) {
	routes, err := n.h.RouteGet(net.IP(dst.AsSlice()))
	if err != nil {
		return netip.Addr{}, fmt.Errorf("afxdp: route to %v: %w", dst, err)
	}
	for _, r := range routes {
		if r.Type == unix.RTN_LOCAL {
			return netip.Addr{}, errLocal
		}
	}
	for _, r := range routes {
		if r.LinkIndex != n.ifindex {
			continue
		}
		if gw, ok := netip.AddrFromSlice(r.Gw); ok && r.Gw != nil && !gw.IsUnspecified() {
			if !n.v6 {
				gw = gw.Unmap()
			}
			return gw, nil
		}
		return dst, nil
	}
	return netip.Addr{}, fmt.Errorf("afxdp: the route to %v does not leave through interface %d: %w", dst, n.ifindex, unix.ENETUNREACH)
}

// table reads hop's entry from the neighbour table: its MAC address when the entry is
// usable (REACHABLE, STALE, DELAY, PROBE, PERMANENT, NOARP), ok false otherwise.
func (n *neighbours) table(hop netip.Addr) (mac [6]byte, ok bool, err error) {
	family := netlink.FAMILY_V4
	if n.v6 {
		family = netlink.FAMILY_V6
	}
	list, err := n.h.NeighList(n.ifindex, family)
	if err != nil {
		return mac, false, fmt.Errorf("afxdp: read the neighbour table: %w", err)
	}
	const usable = netlink.NUD_REACHABLE | netlink.NUD_STALE | netlink.NUD_DELAY | netlink.NUD_PROBE |
		netlink.NUD_PERMANENT | netlink.NUD_NOARP
	for _, e := range list {
		ip, okIP := netip.AddrFromSlice(e.IP)
		if !okIP || ip.Unmap() != hop.Unmap() || e.State&usable == 0 || len(e.HardwareAddr) != 6 {
			continue
		}
		return [6]byte(e.HardwareAddr), true, nil
	}
	return mac, false, nil
}

// solicit makes the kernel resolve hop: RTM_NEWNEIGH with NTF_USE (the kernel creates
// the entry if needed and sends its ARP request or neighbour solicitation, as for a
// packet of its own), or, where that is refused, a zero-length UDP datagram to dst's
// discard port (9) through a kernel socket, which queues behind the resolution.
func (n *neighbours) solicit(hop, dst netip.Addr) {
	if n.useOK {
		family := netlink.FAMILY_V4
		if n.v6 {
			family = netlink.FAMILY_V6
		}
		err := n.h.NeighSet(&netlink.Neigh{LinkIndex: n.ifindex, Family: family,
			State: netlink.NUD_NONE, Flags: netlink.NTF_USE, IP: net.IP(hop.AsSlice())})
		if err == nil {
			return
		}
		if !errors.Is(err, unix.EPERM) {
			n.useOK = false // an old kernel: use the datagram from now on
		}
	}
	if n.probe < 0 {
		return
	}
	var sa unix.Sockaddr
	if n.v6 {
		sa = &unix.SockaddrInet6{Port: 9, Addr: dst.As16()}
	} else {
		sa = &unix.SockaddrInet4{Port: 9, Addr: dst.Unmap().As4()}
	}
	_ = unix.Sendto(n.probe, nil, unix.MSG_DONTWAIT, sa)
}

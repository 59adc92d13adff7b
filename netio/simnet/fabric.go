package simnet

import (
	"fmt"
	"math"
	"net/netip"
	"time"

	"github.com/goverbs/goverbs/netio"
)

// Link is one hop of the fabric, the same both ways: a host's cable to its
// switch, or a cable between two switches.
type Link struct {
	// Bandwidth in bits per second. A datagram occupies the sending port
	// for its wire size (the datagram plus FrameOverhead) at this rate;
	// 0 sends it in no time.
	Bandwidth float64
	// Delay is the propagation delay, from the end of transmission to
	// arrival at the other end.
	Delay time.Duration
	// Loss is the probability that a datagram is lost on the link after it
	// has been transmitted (a bad cable, a bit error), drawn from the
	// Network's seeded generator.
	Loss float64
}

// sane returns l with what cannot be simulated made harmless: a bandwidth that
// is not a positive number is infinite (no transmission time), a negative
// delay none; so time never runs backwards.
func (l Link) sane() Link {
	if !(l.Bandwidth > 0) || math.IsInf(l.Bandwidth, 1) {
		l.Bandwidth = 0
	}
	l.Delay = max(l.Delay, 0)
	return l
}

// RED sets a switch port's ECN marking, as RED does it in ECN mode (DCQCN's
// congestion point, Zhu et al. SIGCOMM 2015): a datagram that arrives
// ECN-capable (ECT(0), ECT(1)) at an output queue holding q bytes leaves
// marked CE with probability 0 for q ≤ Kmin, Pmax·(q−Kmin)/(Kmax−Kmin) for
// Kmin < q ≤ Kmax, and 1 above Kmax. The queue is measured when the datagram
// is enqueued (the bytes waiting ahead of it), or with OnDequeue when its
// transmission starts (the bytes waiting behind it). A datagram that is not
// ECN-capable is never marked; the queue's capacity alone limits it (tail
// drop). Kmax 0 turns marking off.
type RED struct {
	Kmin, Kmax int // bytes
	Pmax       float64
	// OnDequeue marks as a datagram leaves the queue rather than as it
	// enters: the mark then reports the queue as it is now, not as it was a
	// queueing delay ago, and reaches the sender that much sooner. The HPCC
	// simulator's switch marks so (SwitchNode::SwitchNotifyDequeue).
	OnDequeue bool
}

// DCQCNMarking returns the marking the DCQCN paper's switches use: Kmin 5 KB,
// Kmax 200 KB, Pmax 1%, on enqueue.
func DCQCNMarking() RED { return RED{Kmin: 5 << 10, Kmax: 200 << 10, Pmax: 0.01} }

// Prob is the probability that a datagram arriving at a queue of q bytes is
// marked.
func (r RED) Prob(q int) float64 {
	switch {
	case r.Kmax <= 0 || q <= r.Kmin:
		return 0
	case q > r.Kmax:
		return 1
	}
	return r.Pmax * float64(q-r.Kmin) / float64(r.Kmax-r.Kmin)
}

// SwitchConfig describes a switch: an output-queued switch, one FIFO per
// egress port shared by every flow leaving through it.
type SwitchConfig struct {
	// QueueBytes is each egress port's capacity in bytes (wire size): a
	// datagram that would overfill it is dropped (tail drop). 0 means
	// DefaultSwitchQueue.
	QueueBytes int
	// ECN marks ECN-capable datagrams CE (see RED).
	ECN RED
}

// DefaultSwitchQueue is the egress queue a SwitchConfig gets by default: 1 MB.
const DefaultSwitchQueue = 1 << 20

// Frame overheads: what a datagram costs on an Ethernet link beyond its UDP
// payload, in bytes: preamble and start delimiter 8, Ethernet header 14, FCS 4,
// inter-frame gap 12, UDP header 8, and the IP header (20 for IPv4, 40 for
// IPv6). The fabric times and queues datagrams by this wire size.
const (
	FrameOverhead4 = 8 + 14 + 4 + 12 + 20 + 8
	FrameOverhead6 = FrameOverhead4 + 20
)

// WireSize is the bytes a datagram of udpPayload bytes between addresses of
// dst's family occupies on a link.
func WireSize(dst netip.Addr, udpPayload int) int {
	if dst.Unmap().Is4() {
		return udpPayload + FrameOverhead4
	}
	return udpPayload + FrameOverhead6
}

// Switch is a switch of a Network's fabric.
type Switch struct {
	n    *Network
	node *node
}

// Name is the name the switch was added with.
func (s *Switch) Name() string { return s.node.name }

// Port is one direction of a link: the output queue of the switch or host that
// transmits onto it.
type Port struct {
	n  *Network
	pt *port
}

// PortStats counts what went through a port.
type PortStats struct {
	Datagrams uint64 // transmitted (and then possibly lost on the link)
	Bytes     uint64 // wire bytes transmitted
	Marked    uint64 // marked CE on enqueue
	TailDrop  uint64 // dropped: the queue was full
	LinkLoss  uint64 // lost on the link after transmission
	MaxQueue  int    // the most bytes seen waiting, at an enqueue
}

// Stats returns the port's counters.
func (p *Port) Stats() PortStats {
	p.n.mu.Lock()
	defer p.n.mu.Unlock()
	return p.pt.stats
}

// Queue is the number of bytes waiting in the port's queue now (not counting
// a datagram being transmitted).
func (p *Port) Queue() int {
	p.n.mu.Lock()
	defer p.n.mu.Unlock()
	p.pt.drain(p.n.now())
	return p.pt.queued
}

// SetLink changes the link as this port sends onto it (the other direction
// keeps its own): a lossy uplink, a slower port.
func (p *Port) SetLink(l Link) {
	p.n.mu.Lock()
	p.pt.link = l.sane()
	p.n.mu.Unlock()
}

// String names the port by its two ends.
func (p *Port) String() string { return p.pt.from.name + "->" + p.pt.to.name }

// fabric is a Network's switches and hosts. Guarded by the Network's mutex.
type fabric struct {
	hosts    map[netip.Addr]*node
	switches []*node
	routed   bool // routes are up to date with the topology
}

// node is a host or a switch.
type node struct {
	name   string
	host   netip.Addr // valid for a host
	ports  []*port
	routes map[netip.Addr]*port // a switch's egress port towards each host
	cfg    SwitchConfig         // a switch's; a host's is zero (unbounded, no marking)
}

// port is the sending end of one direction of a link.
type port struct {
	from, to  *node
	link      Link
	capacity  int // bytes; 0: unbounded (a host's NIC holds what its host sends)
	red       RED
	busyUntil time.Time // when the last datagram queued finishes transmission
	// waiting holds the transmission start time and wire size of each
	// datagram queued; those that have started are dropped from the front.
	waiting []waiter
	head    int
	queued  int // bytes of waiting[head:]
	stats   PortStats
}

type waiter struct {
	start time.Time
	size  int
}

// AddSwitch adds a switch to the fabric.
func (n *Network) AddSwitch(name string, cfg SwitchConfig) *Switch {
	n.mu.Lock()
	defer n.mu.Unlock()
	if cfg.QueueBytes <= 0 {
		cfg.QueueBytes = DefaultSwitchQueue
	}
	nd := &node{name: name, routes: make(map[netip.Addr]*port), cfg: cfg}
	n.fabric.switches = append(n.fabric.switches, nd)
	n.fabric.routed = false
	return &Switch{n: n, node: nd}
}

// Attach connects the host at addr (every Conn listening on that IP address)
// to sw by a link l. It returns the two ports: the host's (its NIC's
// transmit queue, unbounded) and the switch's egress port towards the host
// (the queue an incast fills). Datagrams between two attached hosts cross the
// fabric; the others go straight, as without one. A host attaches once.
func (n *Network) Attach(addr netip.Addr, sw *Switch, l Link) (host, toHost *Port, err error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	addr = addr.Unmap()
	if sw == nil || sw.n != n {
		return nil, nil, fmt.Errorf("simnet: attach %v: the switch is not this Network's", addr)
	}
	if !addr.IsValid() {
		return nil, nil, fmt.Errorf("simnet: attach %v: invalid address", addr)
	}
	if n.fabric.hosts == nil {
		n.fabric.hosts = make(map[netip.Addr]*node)
	}
	if n.fabric.hosts[addr] != nil {
		return nil, nil, fmt.Errorf("simnet: attach %v: already attached", addr)
	}
	h := &node{name: addr.String(), host: addr}
	n.fabric.hosts[addr] = h
	up, down := n.link(h, sw.node, l)
	return &Port{n, up}, &Port{n, down}, nil
}

// Connect links two switches of this Network by l and returns the ports a→b
// and b→a.
func (n *Network) Connect(a, b *Switch, l Link) (ab, ba *Port, err error) {
	if a == nil || b == nil || a.n != n || b.n != n || a == b {
		return nil, nil, fmt.Errorf("simnet: connect: two distinct switches of this Network are needed")
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	x, y := n.link(a.node, b.node, l)
	return &Port{n, x}, &Port{n, y}, nil
}

// link makes both directions of a link between a and b, each port with its
// node's queue and marking (a host's: unbounded, none). n.mu held.
func (n *Network) link(a, b *node, l Link) (ab, ba *port) {
	l = l.sane()
	ab = &port{from: a, to: b, link: l, capacity: a.cfg.QueueBytes, red: a.cfg.ECN}
	ba = &port{from: b, to: a, link: l, capacity: b.cfg.QueueBytes, red: b.cfg.ECN}
	a.ports = append(a.ports, ab)
	b.ports = append(b.ports, ba)
	n.fabric.routed = false
	return ab, ba
}

// route computes every switch's egress port towards every host: a
// breadth-first search from each host, ports taken in the order they were
// made, so the shortest path with the earliest links wins. n.mu held.
func (f *fabric) route() {
	if f.routed {
		return
	}
	for _, s := range f.switches {
		clear(s.routes)
	}
	for addr, h := range f.hosts {
		seen := map[*node]bool{h: true}
		frontier := []*node{h}
		for len(frontier) > 0 {
			v := frontier[0]
			frontier = frontier[1:]
			for _, out := range v.ports {
				u := out.to
				if seen[u] || u.routes == nil { // visited, or a host
					continue
				}
				seen[u] = true
				for _, back := range u.ports {
					if back.to == v {
						u.routes[addr] = back
						break
					}
				}
				frontier = append(frontier, u)
			}
		}
	}
	f.routed = true
}

// arrive carries out p's arrival at p.node at p.at: its source host puts it on
// its link, a switch on the egress port towards its destination, and its
// destination host delivers it. n.mu held.
func (n *Network) arrive(p *packet) {
	nd := p.node
	switch {
	case nd.routes == nil && nd.host == p.dst.Addr():
		p.node = nil
		n.deliver(p)
	case nd.routes == nil: // the source host
		if len(nd.ports) == 0 {
			n.stats.NoRoute++
			return
		}
		n.transmit(nd.ports[0], p)
	default:
		n.fabric.route()
		out := nd.routes[p.dst.Addr()]
		if out == nil {
			n.stats.NoRoute++
			return
		}
		n.transmit(out, p)
	}
}

// transmit queues p at port pt at time p.at: drop when the queue is full,
// mark CE by RED, then schedule its arrival at the far end when its
// transmission ends plus the link's delay. Every random number is drawn
// whatever its use, so one datagram's fate does not shift another's. n.mu held.
func (n *Network) transmit(pt *port, p *packet) {
	now := p.at
	pt.drain(now)
	mark, lose := n.rng.Float64(), n.rng.Float64()
	size := WireSize(p.dst.Addr(), len(p.data))
	if pt.capacity > 0 && pt.queued+size > pt.capacity {
		pt.stats.TailDrop++
		n.stats.TailDrop++
		return
	}
	pt.stats.MaxQueue = max(pt.stats.MaxQueue, pt.queued)
	if !pt.red.OnDequeue {
		n.mark(pt, p, mark, pt.queued)
	}
	start := now
	if pt.busyUntil.After(start) {
		start = pt.busyUntil
	}
	pt.busyUntil = start.Add(txTime(size, pt.link.Bandwidth))
	if start.After(now) {
		pt.waiting = append(pt.waiting, waiter{start, size})
		pt.queued += size
	}
	pt.stats.Datagrams++
	pt.stats.Bytes += uint64(size)
	if pt.red.OnDequeue && pt.red.Kmax > 0 {
		// Decide at the start of transmission; the draws are made then.
		p.at, p.deq = start, pt
		n.push(p)
		return
	}
	n.onLink(pt, p, lose, pt.busyUntil)
}

// mark marks p CE with RED's probability for a queue of q bytes, given the
// uniform draw u. n.mu held.
func (n *Network) mark(pt *port, p *packet, u float64, q int) {
	if p.ecn.ECT() && p.ecn != netio.ECNCE && u < pt.red.Prob(q) {
		p.ecn = netio.ECNCE
		pt.stats.Marked++
		n.stats.Marked++
	}
}

// dequeue is the start of p's transmission at a port that marks on dequeue:
// mark by the bytes waiting now, then send it on. n.mu held.
func (n *Network) dequeue(p *packet) {
	pt := p.deq
	p.deq = nil
	pt.drain(p.at)
	mark, lose := n.rng.Float64(), n.rng.Float64()
	n.mark(pt, p, mark, pt.queued)
	n.onLink(pt, p, lose, p.at.Add(txTime(WireSize(p.dst.Addr(), len(p.data)), pt.link.Bandwidth)))
}

// onLink puts p on pt's link: lost with the draw u, or arriving at the far end
// the link's delay after its transmission ends at end. n.mu held.
func (n *Network) onLink(pt *port, p *packet, u float64, end time.Time) {
	if u < pt.link.Loss {
		pt.stats.LinkLoss++
		n.stats.LinkLoss++
		return
	}
	p.at = end.Add(pt.link.Delay)
	p.node = pt.to
	n.push(p)
}

// txTime is how long size wire bytes take at bandwidth bits per second (0: no
// time), rounded to the nanosecond and at most an hour.
func txTime(size int, bandwidth float64) time.Duration {
	if !(bandwidth > 0) {
		return 0
	}
	return time.Duration(math.Round(min(float64(size)*8/bandwidth*1e9, float64(time.Hour))))
}

// drain forgets the datagrams whose transmission has started by now.
func (pt *port) drain(now time.Time) {
	for pt.head < len(pt.waiting) && !pt.waiting[pt.head].start.After(now) {
		pt.queued -= pt.waiting[pt.head].size
		pt.head++
	}
	if pt.head == len(pt.waiting) {
		pt.waiting, pt.head = pt.waiting[:0], 0
	} else if pt.head > 1024 && pt.head > len(pt.waiting)/2 {
		pt.waiting = append(pt.waiting[:0], pt.waiting[pt.head:]...)
		pt.head = 0
	}
}

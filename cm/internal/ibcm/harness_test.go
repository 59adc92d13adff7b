package ibcm

import (
	"math/rand/v2"
	"net/netip"
	"testing"
	"time"

	"github.com/goverbs/goverbs/cm/mad"
)

// node is one agent on the test network.
type node struct {
	a      *Agent
	addr   netip.Addr
	events []Event
}

// packet is a MAD on its way.
type packet struct {
	from netip.Addr
	out  Out
}

// testNet carries MADs between agents with a virtual clock; deliver decides
// each packet's fate (0: lost, 1: delivered, 2: delivered twice).
type testNet struct {
	t       testing.TB
	now     time.Time
	nodes   map[netip.Addr]*node
	deliver func(p packet) int
	reorder *rand.Rand // when set, each flush delivers in a shuffled order
	sent    map[mad.AttrID]int
	errs    []error // what Input returned
}

var (
	addrA = netip.MustParseAddr("10.0.0.1")
	addrB = netip.MustParseAddr("10.0.0.2")
)

const svc = 0x0000000001061C06 // rdma_cm TCP port 7174

// fastConfig keeps virtual timeouts short: 4.096 µs × 2^10 ≈ 4 ms.
func fastConfig(seed uint64) Config {
	r := rand.New(rand.NewPCG(seed, 1))
	return Config{CAGUID: 0x0200000000000000 | seed, TIDHigh: uint32(seed), Rand: r.Uint32,
		ResponseTimeout: 10, MaxRetries: 3, PacketLifetime: 8, MRAServiceTimeout: 14}
}

func newNet(t testing.TB) *testNet {
	n := &testNet{t: t, now: time.Unix(1e9, 0), nodes: map[netip.Addr]*node{}, sent: map[mad.AttrID]int{}}
	n.add(addrA, fastConfig(1))
	n.add(addrB, fastConfig(2))
	return n
}

func (n *testNet) add(addr netip.Addr, cfg Config) *node {
	nd := &node{a: New(cfg), addr: addr}
	n.nodes[addr] = nd
	return nd
}

func (n *testNet) A() *node { return n.nodes[addrA] }
func (n *testNet) B() *node { return n.nodes[addrB] }

// flush delivers every queued MAD, and those the deliveries cause, until
// the network is quiet.
func (n *testNet) flush() {
	for range 1000 {
		var q []packet
		for _, nd := range n.nodes {
			for _, o := range nd.a.TakeOutputs() {
				q = append(q, packet{nd.addr, o})
			}
			nd.events = append(nd.events, nd.a.TakeEvents()...)
		}
		if len(q) == 0 {
			return
		}
		if n.reorder != nil {
			n.reorder.Shuffle(len(q), func(i, j int) { q[i], q[j] = q[j], q[i] })
		}
		for _, p := range q {
			attr := mad.MAD(p.out.MAD[:]).Header().AttrID()
			n.sent[attr]++
			copies := 1
			if n.deliver != nil {
				copies = n.deliver(p)
			}
			for range copies {
				if dst, ok := n.nodes[p.out.To]; ok {
					if err := dst.a.Input(n.now, p.from, p.out.MAD[:]); err != nil {
						n.errs = append(n.errs, err)
					}
				}
			}
		}
	}
	n.t.Fatal("network never went quiet")
}

// advance moves the clock by d, runs the timers and flushes.
func (n *testNet) advance(d time.Duration) {
	n.now = n.now.Add(d)
	for _, nd := range n.nodes {
		nd.a.Tick(n.now)
	}
	n.flush()
}

// toNextDeadline jumps to the earliest timer of any agent; false if none.
func (n *testNet) toNextDeadline() bool {
	var next time.Time
	found := false
	for _, nd := range n.nodes {
		if t, ok := nd.a.NextDeadline(); ok && (!found || t.Before(next)) {
			next, found = t, true
		}
	}
	if !found {
		return false
	}
	n.advance(next.Sub(n.now))
	return true
}

// takeEvent removes and returns nd's oldest event of kind k.
func (nd *node) takeEvent(t *testing.T, k EventKind) Event {
	t.Helper()
	for i, e := range nd.events {
		if e.Kind == k {
			nd.events = append(nd.events[:i], nd.events[i+1:]...)
			return e
		}
	}
	t.Fatalf("%v: no %v event in %v", nd.addr, k, kinds(nd.events))
	return Event{}
}

func (nd *node) noEvents(t *testing.T) {
	t.Helper()
	if len(nd.events) != 0 {
		t.Fatalf("%v: unexpected events %v", nd.addr, kinds(nd.events))
	}
}

func kinds(es []Event) []EventKind {
	var k []EventKind
	for _, e := range es {
		k = append(k, e.Kind)
	}
	return k
}

// req is a REQ as rdma_cm on RoCE would send it from QPN qpn.
func req(qpn uint32, pd []byte) *mad.REQFields {
	return &mad.REQFields{ServiceID: svc, LocalQPN: qpn, ResponderResources: 1, InitiatorDepth: 1,
		TransportServiceType: mad.TransportRC, StartingPSN: 0x123456, RetryCount: 7, PKey: 0xffff,
		PathMTU: 3, RNRRetryCount: 7,
		Primary: mad.Path{LocalLID: 0xffff, RemoteLID: 0xffff, LocalGID: addrA.As16(), RemoteGID: addrB.As16(),
			HopLimit: 64, LocalACKTimeout: 19},
		PrivateData: pd}
}

func rep(qpn uint32, pd []byte) *mad.REPFields {
	return &mad.REPFields{LocalQPN: qpn, StartingPSN: 0x654321, ResponderResources: 1, InitiatorDepth: 1,
		TargetACKDelay: 15, RNRRetryCount: 7, PrivateData: pd}
}

// connect runs a whole handshake from A (QPN 32) to B (QPN 28) and returns
// both ends, established.
func (n *testNet) connect(t *testing.T) (ca, cb *Conn) {
	t.Helper()
	A, B := n.A(), n.B()
	ca, err := A.a.Connect(n.now, addrB, req(32, []byte("hello")))
	if err != nil {
		t.Fatal(err)
	}
	n.flush()
	cb = B.takeEvent(t, EventRequest).Conn
	if err := B.a.Accept(n.now, cb, rep(28, []byte("welcome"))); err != nil {
		t.Fatal(err)
	}
	n.flush()
	if e := A.takeEvent(t, EventReply); e.Conn != ca {
		t.Fatal("reply for another connection")
	}
	if err := A.a.RTU(n.now, ca, nil); err != nil {
		t.Fatal(err)
	}
	n.flush()
	B.takeEvent(t, EventEstablished)
	if ca.State() != StateEstablished || cb.State() != StateEstablished {
		t.Fatalf("states %v %v", ca.State(), cb.State())
	}
	return ca, cb
}

// request starts the handshake most tests begin with: B listens on svc, A (QPN 32)
// sends it a REQ, and both ends are returned as B's EventRequest leaves them.
func (n *testNet) request(t *testing.T) (ca, cb *Conn) {
	t.Helper()
	A, B := n.A(), n.B()
	if err := B.a.Listen(svc, 8); err != nil {
		t.Fatal(err)
	}
	ca, err := A.a.Connect(n.now, addrB, req(32, nil))
	if err != nil {
		t.Fatal(err)
	}
	n.flush()
	return ca, B.takeEvent(t, EventRequest).Conn
}

// runTimers jumps from deadline to deadline until no agent has a timer left.
func (n *testNet) runTimers() {
	for n.toNextDeadline() {
	}
}

// noConns fails the test if any agent on the network still holds a connection.
func (n *testNet) noConns(t *testing.T) {
	t.Helper()
	for addr, nd := range n.nodes {
		if c := nd.a.Conns(); c != 0 {
			t.Fatalf("%v still holds %d connections", addr, c)
		}
	}
}

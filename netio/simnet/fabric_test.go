package simnet

import (
	"encoding/binary"
	"fmt"
	"math"
	"net/netip"
	"testing"
	"testing/synctest"
	"time"

	"github.com/goverbs/goverbs/netio"
)

var start = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// star is a manual Network with one switch and hosts 10.0.0.1.. attached by
// links of bw and delay; it returns the switch's ports towards each host.
func star(t *testing.T, seed uint64, hosts int, bw float64, delay time.Duration, cfg SwitchConfig) (*Network, []netio.Conn, []*Port) {
	t.Helper()
	n := NewManual(seed, Faults{}, start)
	sw := n.AddSwitch("tor", cfg)
	var conns []netio.Conn
	var down []*Port
	for i := range hosts {
		a := netip.AddrFrom4([4]byte{10, 0, 0, byte(i + 1)})
		_, d, err := n.Attach(a, sw, Link{Bandwidth: bw, Delay: delay})
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, mustListen(t, n, netip.AddrPortFrom(a, 4791)))
		down = append(down, d)
	}
	return n, conns, down
}

func send(t *testing.T, c netio.Conn, to netio.Conn, size int, ecn netio.ECN, seq int) {
	t.Helper()
	b := make([]byte, size)
	binary.BigEndian.PutUint32(b, uint32(seq))
	if _, err := c.WriteBatch([]netio.Message{{Buf: b, N: size, Addr: to.LocalAddr(), ECN: ecn}}); err != nil {
		t.Fatal(err)
	}
}

// poll reads what c holds now.
func poll(t *testing.T, c netio.Conn) []netio.Message {
	t.Helper()
	ms := make([]netio.Message, 64)
	for i := range ms {
		ms[i].Buf = make([]byte, 9000)
	}
	k, err := c.(netio.Poller).PollBatch(ms)
	if err != nil {
		t.Fatal(err)
	}
	return ms[:k]
}

// TestFabricTiming: a datagram crosses each link in its wire size at the link's
// bandwidth plus the propagation delay; a second one behind it waits for the
// first's transmission.
func TestFabricTiming(t *testing.T) {
	n, c, _ := star(t, 1, 2, 10e9, time.Microsecond, SwitchConfig{})
	defer n.Close()
	send(t, c[0], c[1], 1000, netio.ECNECT0, 0)
	send(t, c[0], c[1], 1000, netio.ECNECT0, 1)
	hop := 853 * time.Nanosecond // 1066 wire bytes at 10 Gb/s: 852.8 ns
	first := start.Add(2*hop + 2*time.Microsecond)
	for i, want := range []time.Time{first, first.Add(hop)} {
		at, ok := n.NextEvent()
		for ok && at.Before(want) {
			n.Advance(at)
			if got := poll(t, c[1]); len(got) > 0 {
				t.Fatalf("datagram %d arrived at %v, before %v", i, at.Sub(start), want.Sub(start))
			}
			at, ok = n.NextEvent()
		}
		n.Advance(want)
		got := poll(t, c[1])
		if len(got) != 1 || binary.BigEndian.Uint32(got[0].Buf) != uint32(i) || got[0].ECN != netio.ECNECT0 || got[0].Addr != c[0].LocalAddr() {
			t.Fatalf("at %v: got %d datagrams %+v", want.Sub(start), len(got), got)
		}
	}
}

// TestFabricQueue: two hosts sending at line rate into one port fill its queue:
// ECN-capable datagrams are marked by RED (always above Kmax), the others never;
// the queue overflows into tail drops; every datagram is accounted for, and the same
// seed gives the same counts.
func TestFabricQueue(t *testing.T) {
	run := func() (Stats, PortStats, map[netio.ECN]int) {
		cfg := SwitchConfig{QueueBytes: 40 << 10, ECN: RED{Kmin: 5 << 10, Kmax: 10 << 10, Pmax: 0.2}}
		n, c, down := star(t, 7, 4, 10e9, time.Microsecond, cfg)
		defer n.Close()
		for i := range 100 {
			send(t, c[0], c[3], 1000, netio.ECNECT0, i)
			send(t, c[1], c[3], 1000, netio.ECNECT0, i)
			send(t, c[2], c[3], 1000, netio.ECNNotECT, i)
		}
		got := map[netio.ECN]int{}
		for {
			at, ok := n.NextEvent()
			if !ok {
				break
			}
			n.Advance(at)
			for _, m := range poll(t, c[3]) {
				if m.Addr == c[2].LocalAddr() && m.ECN != netio.ECNNotECT {
					t.Fatalf("a Not-ECT datagram arrived %v", m.ECN)
				}
				got[m.ECN]++
			}
		}
		return n.Stats(), down[3].Stats(), got
	}
	st, ps, got := run()
	t.Logf("network %+v\nport %+v\narrived by codepoint %v", st, ps, got)
	if st.Sent != 300 || st.Delivered+st.TailDrop != 300 || ps.TailDrop != st.TailDrop || ps.Datagrams != st.Delivered {
		t.Errorf("datagrams unaccounted for: %+v, port %+v", st, ps)
	}
	if st.TailDrop == 0 || st.Marked == 0 || uint64(got[netio.ECNCE]) != st.Marked || ps.Marked != st.Marked {
		t.Errorf("tail drops %d, marks %d, CE arrivals %d", st.TailDrop, st.Marked, got[netio.ECNCE])
	}
	if ps.MaxQueue > 40<<10 {
		t.Errorf("queue reached %d bytes, over its capacity", ps.MaxQueue)
	}
	st2, ps2, got2 := run()
	if st2 != st || ps2 != ps || fmt.Sprint(got2) != fmt.Sprint(got) {
		t.Errorf("a second run differs: %+v %+v %v", st2, ps2, got2)
	}
}

// TestRED: the marking probability rises linearly from Kmin to Kmax and is 1 above.
func TestRED(t *testing.T) {
	r := RED{Kmin: 100, Kmax: 300, Pmax: 0.1}
	for _, c := range []struct {
		q    int
		want float64
	}{{0, 0}, {100, 0}, {200, 0.05}, {300, 0.1}, {301, 1}, {1 << 30, 1}} {
		if got := r.Prob(c.q); got != c.want {
			t.Errorf("Prob(%d) = %v, want %v", c.q, got, c.want)
		}
	}
	if (RED{}).Prob(1<<30) != 0 {
		t.Error("marking off marks")
	}
}

// TestFabricLinkLoss: a lossy link loses about its share, by the seed, the same way
// every time.
func TestFabricLinkLoss(t *testing.T) {
	run := func() uint64 {
		n := NewManual(3, Faults{}, start)
		defer n.Close()
		n.SetQueueLimit(10000)
		sw := n.AddSwitch("s", SwitchConfig{})
		a, b := netip.MustParseAddr("10.0.0.1"), netip.MustParseAddr("10.0.0.2")
		if _, _, err := n.Attach(a, sw, Link{Bandwidth: 1e9, Loss: 0.01}); err != nil {
			t.Fatal(err)
		}
		if _, _, err := n.Attach(b, sw, Link{Bandwidth: 1e9}); err != nil {
			t.Fatal(err)
		}
		ca, cb := mustListen(t, n, netip.AddrPortFrom(a, 1)), mustListen(t, n, netip.AddrPortFrom(b, 1))
		for i := range 10000 {
			send(t, ca, cb, 100, 0, i)
		}
		n.Advance(start.Add(time.Second))
		st := n.Stats()
		if st.Delivered+st.LinkLoss != 10000 {
			t.Errorf("%+v", st)
		}
		return st.LinkLoss
	}
	lost := run()
	if lost < 60 || lost > 140 || run() != lost {
		t.Errorf("lost %d of 10000 at 1%%, or a second run differs", lost)
	}
}

// TestFabricTwoSwitches: routes are found across switches; each link adds its time.
func TestFabricTwoSwitches(t *testing.T) {
	n := NewManual(1, Faults{}, start)
	defer n.Close()
	s1, s2 := n.AddSwitch("s1", SwitchConfig{}), n.AddSwitch("s2", SwitchConfig{})
	a, b := netip.MustParseAddr("fd00::1"), netip.MustParseAddr("fd00::2")
	l := Link{Delay: 5 * time.Microsecond} // no bandwidth: no transmission time
	n.Attach(a, s1, l)
	n.Attach(b, s2, l)
	ab, _, err := n.Connect(s1, s2, l)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := n.Connect(s1, s1, l); err == nil {
		t.Error("a switch connected to itself")
	}
	ca, cb := mustListen(t, n, netip.AddrPortFrom(a, 1)), mustListen(t, n, netip.AddrPortFrom(b, 1))
	send(t, ca, cb, 100, netio.ECNCE, 0)
	n.Advance(start.Add(15*time.Microsecond - 1))
	if len(poll(t, cb)) != 0 {
		t.Fatal("arrived early")
	}
	n.Advance(start.Add(15 * time.Microsecond))
	if got := poll(t, cb); len(got) != 1 || got[0].ECN != netio.ECNCE {
		t.Fatalf("got %+v", got)
	}
	if ab.Stats().Datagrams != 1 || ab.String() != "s1->s2" {
		t.Errorf("port %v: %+v", ab, ab.Stats())
	}
	// A host not attached is reached directly, as without a fabric.
	cc := mustListen(t, n, netip.MustParseAddrPort("[fd00::9]:1"))
	send(t, ca, cc, 100, 0, 1)
	if len(poll(t, cc)) != 1 {
		t.Error("an unattached host did not get its datagram at once")
	}
}

// TestFabricSynctest: a fabric on a timer-driven Network delivers under synctest at
// the fabric's times, to a blocking reader.
func TestFabricSynctest(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := New(1, Faults{})
		defer n.Close()
		sw := n.AddSwitch("s", SwitchConfig{})
		n.Attach(addrA.Addr(), sw, Link{Bandwidth: 1e9, Delay: 10 * time.Microsecond})
		n.Attach(addrB.Addr(), sw, Link{Bandwidth: 1e9, Delay: 10 * time.Microsecond})
		a, b := mustListen(t, n, addrA), mustListen(t, n, addrB)
		t0 := time.Now()
		send(t, a, b, 1000-FrameOverhead4, netio.ECNECT0, 0) // 1000 wire bytes: 8 µs a hop
		ms := make([]netio.Message, 1)
		ms[0].Buf = make([]byte, 2000)
		if k, err := b.ReadBatch(ms); k != 1 || err != nil {
			t.Fatal(k, err)
		}
		if d := time.Since(t0); d != 36*time.Microsecond {
			t.Errorf("arrived after %v, want 36µs", d)
		}
	})
}

// TestFabricHostileLinks: nonsense link settings neither panic nor run time
// backwards.
func TestFabricHostileLinks(t *testing.T) {
	n := NewManual(1, Faults{}, start)
	defer n.Close()
	sw := n.AddSwitch("s", SwitchConfig{QueueBytes: -5, ECN: RED{Kmin: 10, Kmax: 5, Pmax: math.NaN()}})
	links := []Link{
		{Bandwidth: math.NaN(), Delay: -time.Hour, Loss: -1},
		{Bandwidth: 1e-300, Delay: 1, Loss: math.NaN()},
		{Bandwidth: math.Inf(1)},
		{Bandwidth: -1e9, Loss: 2},
	}
	var conns []netio.Conn
	for i, l := range links {
		a := netip.AddrFrom4([4]byte{10, 9, 0, byte(i + 1)})
		if _, _, err := n.Attach(a, sw, l); err != nil {
			t.Fatal(err)
		}
		conns = append(conns, mustListen(t, n, netip.AddrPortFrom(a, 1)))
	}
	if _, _, err := n.Attach(netip.Addr{}, sw, Link{}); err == nil {
		t.Error("attached an invalid address")
	}
	if _, _, err := n.Attach(netip.MustParseAddr("10.9.0.1"), sw, Link{}); err == nil {
		t.Error("attached a host twice")
	}
	for i, c := range conns {
		send(t, c, conns[(i+1)%len(conns)], 100, netio.ECNECT0, i)
	}
	last := n.Now()
	for {
		at, ok := n.NextEvent()
		if !ok {
			break
		}
		if at.Before(last) {
			t.Fatalf("an event at %v, before %v", at.Sub(start), last.Sub(start))
		}
		n.Advance(at)
		last = at
	}
	t.Logf("%+v", n.Stats())
}

//go:build linux

package netio

import (
	"bytes"
	"net/netip"
	"testing"
	"time"

	"github.com/goverbs/goverbs/internal/testaddr"
)

// Two Conns on different loopback addresses join one group at the same port: a datagram
// sent to the group from a third reaches both, with the group as the receiving Conn's
// address; after one member leaves (Close), the other still receives.
func TestJoinGroupLoopback(t *testing.T) {
	a := listen(t, "127.0.0.1:0", UDPOptions{})
	port := a.LocalAddr().Port()
	b := listen(t, netip.AddrPortFrom(netip.MustParseAddr("127.0.0.2"), port).String(), UDPOptions{})
	sender := listen(t, "127.0.0.3:0", UDPOptions{})
	group := testaddr.Group(testaddr.NetIO)
	dst := netip.AddrPortFrom(group, port)

	ga, err := a.(Multicaster).JoinGroup(group)
	if err != nil {
		t.Fatal(err)
	}
	defer ga.Close()
	gb, err := b.(Multicaster).JoinGroup(group)
	if err != nil {
		t.Fatal(err)
	}
	if ga.LocalAddr() != dst || ga.SourceAddr() != a.SourceAddr() {
		t.Fatalf("group Conn: local %v source %v, want %v and %v", ga.LocalAddr(), ga.SourceAddr(), dst, a.SourceAddr())
	}
	send := func(payload string) {
		t.Helper()
		if _, err := sender.WriteBatch([]Message{{Buf: []byte(payload), N: len(payload), Addr: dst}}); err != nil {
			t.Fatal(err)
		}
	}
	send("to both")
	for _, g := range []Conn{ga, gb} {
		got, from := readN(t, g, 1, 2*time.Second)
		if len(got) != 1 || !bytes.Equal(got[0], []byte("to both")) || from[0] != sender.SourceAddr() {
			t.Fatalf("%v read %q from %v", g.LocalAddr(), got, from)
		}
	}
	gb.Close()
	send("to a only")
	if got, _ := readN(t, ga, 1, 2*time.Second); len(got) != 1 || string(got[0]) != "to a only" {
		t.Fatalf("member a read %q", got)
	}
}

// JoinGroup refuses a unicast address and one of the other family.
func TestJoinGroupRefuses(t *testing.T) {
	c := listen(t, "127.0.0.1:0", UDPOptions{})
	for _, g := range []string{"127.0.0.9", "ff0e::1", "10.1.2.3"} {
		if gc, err := c.(Multicaster).JoinGroup(netip.MustParseAddr(g)); err == nil {
			gc.Close()
			t.Errorf("JoinGroup(%s) succeeded", g)
		}
	}
}

// A Tee joins through to the Conn underneath and records the group's datagrams with the
// group as their destination.
func TestTeeJoinGroupRecords(t *testing.T) {
	c := listen(t, "127.0.0.1:0", UDPOptions{})
	rec := &fakeRecorder{}
	tc := Tee(c, rec)
	m, ok := AsMulticaster(tc)
	if !ok {
		t.Fatal("a Tee over a UDP Conn is no Multicaster")
	}
	group := testaddr.Group(testaddr.NetIO)
	g, err := m.JoinGroup(group)
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	dst := netip.AddrPortFrom(group, c.LocalAddr().Port())
	if _, err := tc.WriteBatch([]Message{{Buf: []byte("hello"), N: 5, Addr: dst}}); err != nil {
		t.Fatal(err)
	}
	if got, _ := readN(t, g, 1, 2*time.Second); len(got) != 1 {
		t.Fatalf("group read %q", got)
	}
	rec.mu.Lock()
	recs := rec.recs
	rec.mu.Unlock()
	if len(recs) != 2 || recs[0].dst != dst || recs[1].dst != dst || recs[1].src != c.SourceAddr() {
		t.Fatalf("recorded %+v, want the send and the read, both to %v", recs, dst)
	}
}

// A group's Conn reports the ECN codepoint of what it receives, as its parent (opened
// with ECN) does.
func TestJoinGroupECN(t *testing.T) {
	a := listen(t, "127.0.0.1:0", UDPOptions{ECN: true})
	sender := listen(t, "127.0.0.3:0", UDPOptions{ECN: true})
	group := testaddr.Group(testaddr.NetIO)
	g, err := a.(Multicaster).JoinGroup(group)
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	if !g.Caps().ECN {
		t.Fatal("a group's Conn reports no ECN")
	}
	b := []byte("marked")
	if _, err := sender.WriteBatch([]Message{{Buf: b, N: len(b), Addr: g.LocalAddr(), ECN: ECNCE}}); err != nil {
		t.Fatal(err)
	}
	got := make(chan Message, 1)
	go func() {
		ms := []Message{{Buf: make([]byte, 64)}}
		if n, err := g.ReadBatch(ms); n == 1 && err == nil {
			got <- ms[0]
		}
		close(got)
	}()
	select {
	case m, ok := <-got:
		if !ok || m.ECN != ECNCE || string(m.Buf[:m.N]) != "marked" {
			t.Fatalf("read %q with %v", m.Buf[:m.N], m.ECN)
		}
	case <-time.After(2 * time.Second):
		t.Fatal("nothing arrived")
	}
}

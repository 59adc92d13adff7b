package verbs_test

import (
	"encoding/binary"
	"errors"
	"net/netip"
	"testing"
	"time"

	"github.com/goverbs/goverbs/verbs"
)

type gotMAD struct {
	from netip.Addr
	mad  []byte
}

func madOf(base, class, version, method uint8, tid uint64) []byte {
	m := make([]byte, 256)
	m[0], m[1], m[2], m[3] = base, class, version, method
	binary.BigEndian.PutUint64(m[8:], tid)
	return m
}

func collect(g *verbs.GSI) chan gotMAD {
	ch := make(chan gotMAD, 16)
	g.SetHandler(func(from netip.Addr, mad []byte) {
		ch <- gotMAD{from, append([]byte(nil), mad...)}
	})
	return ch
}

func expectMAD(t *testing.T, ch chan gotMAD, what string) gotMAD {
	t.Helper()
	select {
	case m := <-ch:
		return m
	case <-time.After(5 * time.Second):
		t.Fatalf("%s: no MAD", what)
	}
	return gotMAD{}
}

func expectNone(t *testing.T, ch chan gotMAD, what string) {
	t.Helper()
	select {
	case m := <-ch:
		t.Fatalf("%s: unexpected MAD class %#x method %#x", what, m.mad[1], m.mad[3])
	case <-time.After(100 * time.Millisecond):
	}
}

// QP1 is shared by management class: two classes on one device each get their own
// MADs; the same class twice, or the whole QP1 beside a class, is ErrGSIBusy; a Get of
// a class nobody serves is answered with the "not supported" status and counted, and
// nothing else is answered.
func TestGSIClassDispatch(t *testing.T) {
	a, b := newHost(t), newHost(t)
	cm, err := a.Dev.OpenGSIClass(0x07, 2)
	if err != nil {
		t.Fatal(err)
	}
	defer cm.Close()
	ping, err := a.Dev.OpenGSIClass(0x32, 1)
	if err != nil {
		t.Fatal(err)
	}
	defer ping.Close()
	if _, err := a.Dev.OpenGSIClass(0x07, 2); !errors.Is(err, verbs.ErrGSIBusy) {
		t.Fatalf("second holder of class 0x07: %v", err)
	}
	if _, err := a.Dev.OpenGSI(); !errors.Is(err, verbs.ErrGSIBusy) {
		t.Fatalf("whole QP1 beside two classes: %v", err)
	}
	cmCh, pingCh := collect(cm), collect(ping)

	peer, err := b.Dev.OpenGSI()
	if err != nil {
		t.Fatal(err)
	}
	defer peer.Close()
	peerCh := collect(peer)
	aAddr := a.GID.Addr()

	send := func(m []byte) {
		t.Helper()
		if err := peer.Send(aAddr, m); err != nil {
			t.Fatal(err)
		}
	}
	send(madOf(1, 0x07, 2, 0x03, 1))
	if m := expectMAD(t, cmCh, "CM class"); m.mad[1] != 0x07 || m.from != b.GID.Addr() {
		t.Fatalf("CM handler got class %#x from %v", m.mad[1], m.from)
	}
	send(madOf(1, 0x32, 1, 0x01, 2))
	if m := expectMAD(t, pingCh, "vendor class"); m.mad[1] != 0x32 {
		t.Fatalf("vendor handler got class %#x", m.mad[1])
	}
	expectNone(t, cmCh, "CM handler after a vendor MAD")

	// A Get of a class nobody serves: answered, with the request's TID.
	send(madOf(1, 0x33, 1, 0x01, 3))
	r := expectMAD(t, peerCh, "answer to an unknown class")
	if r.mad[1] != 0x33 || r.mad[3] != 0x81 || binary.BigEndian.Uint16(r.mad[4:]) != 0x0004 ||
		binary.BigEndian.Uint64(r.mad[8:]) != 3 {
		t.Fatalf("answer: class %#x method %#x status %#x tid %d", r.mad[1], r.mad[3],
			binary.BigEndian.Uint16(r.mad[4:]), binary.BigEndian.Uint64(r.mad[8:]))
	}
	// Not answered: a Send of a known class in an unknown version, a response of an
	// unknown class, a MAD of another base version (malformed).
	send(madOf(1, 0x07, 1, 0x03, 4))
	send(madOf(1, 0x34, 1, 0x81, 5))
	send(madOf(2, 0x07, 2, 0x03, 6))
	expectNone(t, peerCh, "peer after MADs that need no answer")
	expectNone(t, cmCh, "CM handler after a wrong version")

	want := verbs.GSICounters{Delivered: 2, UnknownClass: 3, Unsupported: 1, Malformed: 1}
	deadline := time.Now().Add(5 * time.Second)
	for a.Dev.GSICounters() != want && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if got := a.Dev.GSICounters(); got != want {
		t.Fatalf("counters %+v, want %+v", got, want)
	}

	cm.Close()
	if g, err := a.Dev.OpenGSIClass(0x07, 2); err != nil {
		t.Fatalf("class 0x07 after its holder closed: %v", err)
	} else {
		g.Close()
	}
	ping.Close()
	g, err := a.Dev.OpenGSI()
	if err != nil {
		t.Fatalf("whole QP1 after every class closed: %v", err)
	}
	if _, err := a.Dev.OpenGSIClass(0x32, 1); !errors.Is(err, verbs.ErrGSIBusy) {
		t.Fatalf("a class beside the whole QP1: %v", err)
	}
	g.Close()
}

//go:build linux

package netio

import (
	"errors"
	"testing"
	"time"
)

// TestPollThenBlock: a default-mode Conn read by PollBatch, its watch stopped
// (Unwatch), and then by a blocking ReadBatch loses nothing: a datagram queued while
// nobody watched is returned at once, one that arrives while the ReadBatch is parked
// wakes it, and PollBatch finds nothing without waiting when nothing is queued. An
// Interrupt still ends a ReadBatch after polls.
func TestPollThenBlock(t *testing.T) {
	c := listen(t, "127.0.0.2:0", UDPOptions{})
	peer := listen(t, "127.0.0.3:0", UDPOptions{})
	p, ok := AsPoller(c)
	if !ok {
		t.Fatal("a default-mode UDP Conn is not a Poller")
	}
	msgs := newMsgs(4, MaxGROSize)
	send := func(s string) {
		t.Helper()
		if _, err := peer.WriteBatch([]Message{{Buf: []byte(s), N: len(s), Addr: c.LocalAddr()}}); err != nil {
			t.Fatal(err)
		}
	}
	read := func() (int, error) {
		done := make(chan struct{})
		var n int
		var err error
		go func() { n, err = c.ReadBatch(msgs); close(done) }()
		select {
		case <-done:
			return n, err
		case <-time.After(5 * time.Second):
			t.Fatal("ReadBatch still blocked")
			return 0, nil
		}
	}
	got := func(n int) string { return string(msgs[0].Buf[:msgs[0].N]) }

	if n, err := p.PollBatch(msgs); n != 0 || err != nil {
		t.Fatalf("PollBatch on an empty socket = %d, %v; want 0, nil", n, err)
	}
	send("one")
	deadline := time.Now().Add(5 * time.Second)
	n := 0
	for n == 0 && time.Now().Before(deadline) {
		var err error
		if n, err = p.PollBatch(msgs); err != nil {
			t.Fatal(err)
		}
	}
	if n != 1 || got(n) != "one" {
		t.Fatalf("PollBatch = %d %q; want the datagram", n, got(n))
	}
	u, ok := AsUnwatcher(c)
	if !ok {
		t.Fatal("a default-mode UDP Conn is not an Unwatcher")
	}
	// Queued while the socket is out of the netpoller's watch.
	u.Unwatch()
	send("two")
	time.Sleep(10 * time.Millisecond)
	if n, err := read(); n != 1 || got(n) != "two" {
		t.Fatalf("ReadBatch after polls, a datagram queued = %d, %v; want it", n, err)
	}
	// Arriving while parked.
	p.PollBatch(msgs)
	u.Unwatch()
	go func() { time.Sleep(20 * time.Millisecond); send("three") }()
	if n, err := read(); n != 1 || got(n) != "three" {
		t.Fatalf("ReadBatch after polls, a datagram arriving = %d, %v; want it", n, err)
	}
	p.PollBatch(msgs)
	u.Unwatch()
	in, _ := AsInterrupter(c)
	go func() { time.Sleep(20 * time.Millisecond); in.Interrupt() }()
	if n, err := read(); n != 0 || !errors.Is(err, ErrInterrupted) {
		t.Fatalf("ReadBatch after polls and an Interrupt = %d, %v; want 0, ErrInterrupted", n, err)
	}
	c.Close()
	if _, err := p.PollBatch(msgs); err == nil {
		t.Error("PollBatch on a closed Conn succeeded")
	}
}

// TestUnwatchReadAllocatesNothing: the way back from polling to a blocking read (Unwatch,
// then a ReadBatch that watches the socket again) allocates nothing.
func TestUnwatchReadAllocatesNothing(t *testing.T) {
	c := listen(t, "127.0.0.2:0", UDPOptions{})
	peer := listen(t, "127.0.0.3:0", UDPOptions{})
	u, _ := AsUnwatcher(c)
	msgs := newMsgs(1, MaxGROSize)
	out := []Message{{Buf: []byte("x"), N: 1, Addr: c.LocalAddr()}}
	allocs := testing.AllocsPerRun(100, func() {
		u.Unwatch()
		if _, err := peer.WriteBatch(out); err != nil {
			t.Fatal(err)
		}
		if n, err := c.ReadBatch(msgs); n != 1 || err != nil {
			t.Fatalf("ReadBatch = %d, %v", n, err)
		}
	})
	if allocs != 0 {
		t.Errorf("Unwatch and ReadBatch: %v allocations a round, want 0", allocs)
	}
}

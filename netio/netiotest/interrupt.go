package netiotest

import (
	"errors"
	"testing"
	"time"

	"github.com/goverbs/goverbs/netio"
)

// ReadWithin runs c.ReadBatch(msgs) and returns what it returned, failing the test if it
// is still blocked after d.
func ReadWithin(t testing.TB, c netio.Conn, msgs []netio.Message, d time.Duration) (int, error) {
	t.Helper()
	type result struct {
		n   int
		err error
	}
	done := make(chan result, 1)
	go func() { n, err := c.ReadBatch(msgs); done <- result{n, err} }()
	select {
	case r := <-done:
		return r.n, r.err
	case <-time.After(d):
		t.Fatal("ReadBatch still blocked")
		return 0, nil
	}
}

// TestInterrupt checks the netio.Interrupter of c, a Conn in a blocking (default) mode:
// Interrupt ends a ReadBatch blocked in the netpoller with netio.ErrInterrupted, or else
// the next ReadBatch; the ReadBatch after that waits for and returns a datagram. send
// makes a datagram with the given payload arrive at c; it is called on a goroutine of its
// own once the read has had time to block.
func TestInterrupt(t *testing.T, c netio.Conn, send func(payload string)) {
	t.Helper()
	in, ok := netio.AsInterrupter(c)
	if !ok {
		t.Fatal("not an Interrupter")
	}
	msgs := []netio.Message{{Buf: make([]byte, netio.MaxGROSize)}}
	read := func() (int, error) { return ReadWithin(t, c, msgs, 5*time.Second) }

	go func() { time.Sleep(20 * time.Millisecond); in.Interrupt() }()
	if n, err := read(); n != 0 || !errors.Is(err, netio.ErrInterrupted) {
		t.Fatalf("blocked ReadBatch after Interrupt = %d, %v; want 0, ErrInterrupted", n, err)
	}
	in.Interrupt() // before the read: the next one returns at once
	if n, err := read(); n != 0 || !errors.Is(err, netio.ErrInterrupted) {
		t.Fatalf("ReadBatch after an earlier Interrupt = %d, %v; want 0, ErrInterrupted", n, err)
	}
	// The deadline is cleared: the next read waits for and gets a datagram.
	go func() { time.Sleep(20 * time.Millisecond); send("after") }()
	if n, err := read(); n != 1 || string(msgs[0].Buf[:msgs[0].N]) != "after" {
		t.Fatalf("ReadBatch after an interrupted one = %d, %v; want the datagram", n, err)
	}
}

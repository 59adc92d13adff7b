//go:build linux

package netio

import (
	"errors"
	"testing"
	"time"
)

// TestInterrupt: Interrupt ends a ReadBatch blocked in the netpoller with ErrInterrupted,
// or else the next ReadBatch; the Conn then reads as before. A busy-poll Conn is not
// interruptible; a Tee over an interruptible Conn is.
func TestInterrupt(t *testing.T) {
	c := listen(t, "127.0.0.2:0", UDPOptions{})
	peer := listen(t, "127.0.0.3:0", UDPOptions{})
	in, ok := AsInterrupter(c)
	if !ok {
		t.Fatal("a default-mode UDP Conn is not an Interrupter")
	}
	msgs := newMsgs(4, MaxGROSize)
	read := func() (int, error) {
		type result struct {
			n   int
			err error
		}
		done := make(chan result, 1)
		go func() { n, err := c.ReadBatch(msgs); done <- result{n, err} }()
		select {
		case r := <-done:
			return r.n, r.err
		case <-time.After(5 * time.Second):
			t.Fatal("ReadBatch still blocked")
			return 0, nil
		}
	}

	go func() { time.Sleep(20 * time.Millisecond); in.Interrupt() }()
	if n, err := read(); n != 0 || !errors.Is(err, ErrInterrupted) {
		t.Fatalf("blocked ReadBatch after Interrupt = %d, %v; want 0, ErrInterrupted", n, err)
	}
	in.Interrupt() // before the read: the next one returns at once
	if n, err := read(); n != 0 || !errors.Is(err, ErrInterrupted) {
		t.Fatalf("ReadBatch after an earlier Interrupt = %d, %v; want 0, ErrInterrupted", n, err)
	}
	// The deadline is cleared: the next read waits for and gets a datagram.
	go func() {
		time.Sleep(20 * time.Millisecond)
		peer.WriteBatch([]Message{{Buf: []byte("after"), N: 5, Addr: c.LocalAddr()}})
	}()
	if n, err := read(); n != 1 || string(msgs[0].Buf[:msgs[0].N]) != "after" {
		t.Fatalf("ReadBatch after an interrupted one = %d, %v; want the datagram", n, err)
	}

	if _, ok := AsInterrupter(listen(t, "127.0.0.2:0", UDPOptions{BusyPoll: true})); ok {
		t.Error("a busy-poll Conn claims to be an Interrupter")
	}
	if _, ok := AsInterrupter(Tee(c, nil)); !ok {
		t.Error("a Tee over an interruptible Conn is not an Interrupter")
	}
}

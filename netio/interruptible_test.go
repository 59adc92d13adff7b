package netio

import "testing"

// fakeInterruptible is a Conn of "another package" that can or cannot be interrupted.
type fakeInterruptible struct {
	Conn
	can bool
}

func (f *fakeInterruptible) Interrupt()         {}
func (f *fakeInterruptible) CanInterrupt() bool { return f.can }

// TestInterruptibleConn: AsInterrupter finds a backend outside netio through
// InterruptibleConn, only when it says it can be interrupted, and through a Tee.
func TestInterruptibleConn(t *testing.T) {
	if _, ok := AsInterrupter(&fakeInterruptible{can: true}); !ok {
		t.Error("an InterruptibleConn that can be interrupted is not an Interrupter")
	}
	if _, ok := AsInterrupter(&fakeInterruptible{can: false}); ok {
		t.Error("an InterruptibleConn that cannot be interrupted is an Interrupter")
	}
	if _, ok := AsInterrupter(Tee(&fakeInterruptible{can: true}, nil)); !ok {
		t.Error("a Tee over an InterruptibleConn is not an Interrupter")
	}
}

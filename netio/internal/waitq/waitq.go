// Package waitq is the wait the in-memory Conns (netiotest's pipe, simnet) share for
// netio.Poller's WaitReadable: until a datagram is queued, the Conn closes or a timeout
// passes, woken by a coalescing ready channel.
package waitq

import "time"

// Readable waits until state reports a datagram queued or the Conn closed, checking
// it first and again whenever ready or done is signalled, or until timeout passes
// (never when it is negative). It returns state's last answer.
func Readable(timeout time.Duration, ready, done <-chan struct{}, state func() (queued, closed bool)) (queued, closed bool) {
	var expired <-chan time.Time
	if timeout >= 0 {
		t := time.NewTimer(timeout)
		defer t.Stop()
		expired = t.C
	}
	for {
		if queued, closed = state(); queued || closed {
			return queued, closed
		}
		select {
		case <-ready:
		case <-done:
		case <-expired:
			return state()
		}
	}
}

// Transmit hand-off: a stream's requester runs on the receive goroutine (the ACKs that
// open its window arrive there), and the send that carries its packets, the kernel's
// whole path to the peer's socket, is most of that goroutine's time. Over a veth pair
// that goroutine was busy all the time and bound the stream while the other core was
// half idle (docs/congestion.md, "Where the lossy rounds' time goes"). So the receive
// goroutine builds a large batch and leaves its send to the device's sender goroutine,
// then goes on taking ACKs: the two run on two cores.

package engine

import (
	"sync"
	"sync/atomic"
)

// txQueue holds the request batches the receive goroutine handed to the sender goroutine,
// oldest first. Any send while one waits goes after it (flushTx), so that a QP's packets
// leave in PSN order whichever goroutine built them.
type txQueue struct {
	mu      sync.Mutex // batches
	batches []*txBatch
	// order is held while queued batches are sent; a send that finds batches pending
	// takes it, sends them itself and then its own. Taken with or without a QP's mu held,
	// never the other way round.
	order   sync.Mutex
	pending atomic.Int32 // batches queued and not yet sent
}

// handMin is how many packets a requester run on the receive goroutine must have built
// for their send to be handed to the sender goroutine. A few packets' send costs less
// than the hand-off (a wake-up of the sender when it sleeps), and a ping-pong sends
// nothing from there at all: its replies are posted by the application.
var handMin = 8

// handTx queues tx, built by a requester run on the receive goroutine, for the sender
// goroutine to send, and wakes it.
func (d *Device) handTx(tx *txBatch) {
	q := &d.txq
	q.mu.Lock()
	q.batches = append(q.batches, tx)
	q.pending.Add(1)
	q.mu.Unlock()
	d.sender.kick()
}

// sendHanded sends the queued batches in order, as long as any are queued. q.order is held.
func (d *Device) sendHanded() {
	q := &d.txq
	for {
		q.mu.Lock()
		if len(q.batches) == 0 {
			q.mu.Unlock()
			return
		}
		tx := q.batches[0]
		n := copy(q.batches, q.batches[1:])
		q.batches[n] = nil
		q.batches = q.batches[:n]
		q.mu.Unlock()
		d.writeTx(tx)
		d.txPool.Put(tx)
		q.pending.Add(-1) // after the send: a send that sees none pending goes after it
	}
}

// drainHanded sends what the receive goroutine handed over: the sender goroutine's work.
func (d *Device) drainHanded() {
	if d.txq.pending.Load() == 0 {
		return
	}
	d.txq.order.Lock()
	d.sendHanded()
	d.txq.order.Unlock()
}

// handWorthy reports whether tx, a requester run's batch, is large enough to hand off
// (handMin).
func (b *txBatch) handWorthy() bool {
	segs := 0
	for i := range b.msgs[:b.n] {
		segs += b.msgs[i].NumSegments()
		if segs >= handMin {
			return true
		}
	}
	return false
}

// Transmit deferral to a goroutine: the device's sender sends what was left for later
// off the caller's thread: the rest of a long READ's responses (responses.go), a default-mode
// stream's batched posts (PostSend, deferPost), and where a busy-poll doorbell has no
// alarm, the posts it deferred. doorbell.go is the other kind of deferral, to the
// application's next poll.

package engine

import (
	"sync"

	"github.com/goverbs/goverbs/verbs/driver"
)

// sender is a device's goroutine that finishes what response bursts left, sends the
// posts PostSend batched on a default-mode device, and, where a busy-poll device's
// doorbell has no alarm, the posts that doorbell deferred (doorbell.go).
type sender struct {
	mu  sync.Mutex
	qps []*QP
	// busy is held while the goroutine works through what it took from qps, so that
	// flush, which holds it too, returns only when every post queued before it has
	// been sent, by the one or the other.
	busy sync.Mutex
	wake chan struct{}
	stop chan struct{}
	done chan struct{}
}

func (s *sender) init() {
	s.wake = make(chan struct{}, 1)
	s.stop = make(chan struct{})
	s.done = make(chan struct{})
}

func (s *sender) add(qp *QP) {
	s.mu.Lock()
	s.qps = append(s.qps, qp)
	s.mu.Unlock()
	s.kick()
}

// kick wakes the sender goroutine.
func (s *sender) kick() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

func (s *sender) run(db *doorbell) {
	defer close(s.done)
	var work []*QP
	for {
		select {
		case <-s.wake:
		case <-s.stop:
			return
		}
		s.busy.Lock()
		db.flush()
		for {
			s.mu.Lock()
			work, s.qps = s.qps, work[:0]
			s.mu.Unlock()
			if len(work) == 0 {
				break
			}
			for i, qp := range work {
				qp.mu.Lock()
				more := false
				switch {
				case qp.closed || qp.state == driver.QPStateReset:
					qp.resp.out.queued, qp.txQueued = false, false
				default:
					if qp.resp.out.queued {
						if more = qp.pump(respBurst); !more {
							qp.resp.out.queued = false
						}
					}
					qp.sendQueued()
				}
				if more {
					s.mu.Lock()
					s.qps = append(s.qps, qp) // more to send: round-robin with other QPs
					s.mu.Unlock()
				}
				qp.mu.Unlock()
				work[i] = nil
			}
		}
		s.busy.Unlock()
	}
}

// flush sends the posts queued for the goroutine now, on the caller's thread, and waits
// for those the goroutine is sending: a verb that must see every completion of what was
// posted before it (CQ.Resize) calls it. The QPs stay queued, for the response bursts
// only the goroutine sends; their posts are gone, so the goroutine finds nothing of
// them to send.
func (s *sender) flush() {
	s.busy.Lock()
	defer s.busy.Unlock()
	s.mu.Lock()
	qps := append([]*QP(nil), s.qps...)
	s.mu.Unlock()
	for _, qp := range qps {
		qp.mu.Lock()
		if !qp.closed && qp.state != driver.QPStateReset {
			qp.sendQueued()
		}
		qp.mu.Unlock()
	}
}

// Shared receive queues (IBTA 10.2.9): one pool of receive WQEs for many QPs, with the
// srq_limit event.

package engine

import (
	"sync"

	"github.com/goverbs/goverbs/verbs/driver"
)

var (
	ErrSRQLimit = driver.NewError(driver.ErrInvalidAttr, "SRQ limit must be below max_wr")
	ErrSRQBusy  = driver.NewError(driver.ErrBusy, "shared receive queue is still used by a queue pair")
)

// SRQ is a shared receive queue: one pool of receive WQEs for many QPs (IBTA 10.2.9).
type SRQ struct {
	dev    *Device
	pd     *PD
	maxSGE int
	num    uint32 // the number an XRCETH names (every SRQ has one; ibv_get_srq_num)
	// An XRC SRQ's domain open and CQ (Annex A14); nil for a basic SRQ.
	xrcd *XRCD
	cq   *CQ

	mu     sync.Mutex
	ring   recvQueue
	limit  uint32 // srq_limit; 0 = not armed
	refs   int
	closed bool
}

// CreateSRQ creates a shared receive queue (driver.PD), armed when attr has a limit.
func (pd *PD) CreateSRQ(attr driver.SRQAttr) (driver.SRQ, error) {
	srq, err := pd.dev.CreateSRQ(pd, int(attr.MaxWR), int(attr.MaxSGE))
	if err != nil {
		return nil, err
	}
	if attr.SRQLimit > 0 {
		if err := srq.Arm(attr.SRQLimit); err != nil {
			srq.Close()
			return nil, err
		}
	}
	return srq, nil
}

// CreateSRQ creates a shared receive queue of maxWR WQEs of up to maxSGE elements each.
func (d *Device) CreateSRQ(pd *PD, maxWR, maxSGE int) (*SRQ, error) {
	if d.closed.Load() {
		return nil, ErrDeviceClosed
	}
	if maxWR < 1 || maxWR > MaxQPWR || maxSGE > MaxSGE {
		return nil, ErrQPCap
	}
	if maxSGE < 1 {
		maxSGE = 1
	}
	s := &SRQ{dev: d, pd: pd, maxSGE: maxSGE}
	s.ring.init(uint32(maxWR))
	sges := make([]driver.SGE, len(s.ring.wqes)*maxSGE)
	for i := range s.ring.wqes {
		s.ring.wqes[i].sgeStore = sges[i*maxSGE : i*maxSGE : (i+1)*maxSGE]
	}
	if err := d.numberSRQ(s); err != nil {
		return nil, err
	}
	pd.refs.Add(1)
	return s, nil
}

// PostRecv adds receive WQEs to the pool.
func (s *SRQ) PostRecv(wrs []driver.RecvWR) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return ErrQPClosed
	}
	for i := range wrs {
		if s.ring.full() {
			return &driver.PostError{Index: i, Err: ErrRecvQueueFull}
		}
		if len(wrs[i].SGL) > s.maxSGE {
			return &driver.PostError{Index: i, Err: ErrTooManySGE}
		}
		w := s.ring.at(s.ring.tail)
		w.id = wrs[i].ID
		w.sgeStore = append(w.sgeStore[:0], wrs[i].SGL...)
		s.ring.tail++
	}
	return nil
}

// Arm sets srq_limit: when fewer than limit WQEs remain, one SRQ_LIMIT_REACHED event is
// raised and the limit disarms (IBTA 10.2.9.1, 11.5.2.2). 0 disarms.
func (s *SRQ) Arm(limit uint32) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if limit >= uint32(len(s.ring.wqes)) {
		return ErrSRQLimit
	}
	s.limit = limit
	return nil
}

// Query returns the SRQ's size, its element limit and the armed limit.
func (s *SRQ) Query() driver.SRQAttr {
	s.mu.Lock()
	defer s.mu.Unlock()
	return driver.SRQAttr{MaxWR: uint32(len(s.ring.wqes)), MaxSGE: uint32(s.maxSGE), SRQLimit: s.limit}
}

// Len returns the number of posted WQEs not yet consumed.
func (s *SRQ) Len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return int(s.ring.tail - s.ring.head)
}

// take moves the oldest WQE into dst (owned by the consuming QP).
func (s *SRQ) take(dst *recvWQE) bool {
	s.mu.Lock()
	// An XRC SRQ may close while an XRC_RECV QP is between naming it and taking from it
	// (no QP holds it, as a basic SRQ's QPs do): then it has nothing to give.
	if s.ring.head == s.ring.tail || s.closed {
		s.mu.Unlock()
		return false
	}
	w := s.ring.at(s.ring.head)
	dst.id = w.id
	dst.sgeStore = append(dst.sgeStore[:0], w.sgeStore...)
	s.ring.head++
	fire := s.limit > 0 && s.ring.tail-s.ring.head < uint64(s.limit)
	if fire {
		s.limit = 0
	}
	s.mu.Unlock()
	if fire {
		s.dev.raise(driver.AsyncEvent{Type: driver.EventSRQLimitReached, SRQ: s})
	}
	return true
}

// Close destroys the SRQ; it fails while QPs use it.
func (s *SRQ) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.refs > 0 {
		return ErrSRQBusy
	}
	if !s.closed {
		s.closed = true
		s.pd.refs.Add(-1)
		s.dev.forgetSRQ(s)
		if s.xrcd != nil {
			s.cq.ref(-1)
			s.xrcd.release()
		}
	}
	return nil
}

func (s *SRQ) isClosed() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.closed
}

func (s *SRQ) ref(delta int) {
	s.mu.Lock()
	s.refs += delta
	s.mu.Unlock()
}

//go:build linux

package server

import (
	"errors"
	"runtime"
	"time"

	"golang.org/x/sys/unix"

	"github.com/goverbs/goverbs/internal/attach"
	"github.com/goverbs/goverbs/verbs/driver"
)

// The pump is a client's data path in the daemon: it takes the WQEs the client wrote
// into its rings and posts them to the engine, and copies the engine's completions
// into the client's CQ rings. It spins while there is work (cfg.Spin after the last),
// then sleeps on the client's doorbell eventfd, which the client writes only when a
// ring it published to said the pump sleeps.
//
// Completions are moved by the engine's CQ events (completed), which stay armed: the
// pump polls an engine CQ only when the client's ring was full. (A pump that polled
// every CQ in its spin would look to the engine like a program spinning on its CQs,
// whose ACKs and posts the engine holds for that program's next poll.)
func (s *session) pump() {
	defer close(s.pumped)
	spin := s.d.srv.cfg.Spin
	var idleSince time.Time
	spins := 0
	for {
		s.mu.Lock()
		if s.closing {
			s.mu.Unlock()
			return
		}
		if s.step() {
			s.mu.Unlock()
			idleSince = time.Time{}
			continue
		}
		if idleSince.IsZero() {
			idleSince = time.Now()
		}
		if spin > 0 && time.Since(idleSince) < spin {
			s.mu.Unlock()
			// A spinning pump reads the device's socket itself, as a busy poller does:
			// goroutines that only yield to each other starve Go's netpoller, which
			// the scheduler then checks only every few milliseconds.
			s.d.dev.Progress()
			// Give the core away now and then, not only to other goroutines: on a
			// machine with fewer cores than spinners (two clients busy-polling their
			// CQs and this pump), a pump that only yields to Go's scheduler keeps its
			// core for a whole time slice while the client it serves waits for one
			// (1.5 ms one-way on 2 cores); sched_yield hands the core to a waiting
			// client at once, as the clients' empty polls hand it to the daemon.
			if spins++; spins%16 == 0 {
				unix.RawSyscall(unix.SYS_SCHED_YIELD, 0, 0, 0)
			} else {
				runtime.Gosched()
			}
			continue
		}
		// Say we sleep, then look once more: a post published before the flag was
		// seen is found now, one after it writes the doorbell.
		s.sleeping(true)
		if s.step() {
			s.sleeping(false)
			s.mu.Unlock()
			idleSince = time.Time{}
			continue
		}
		stuck := false
		for _, c := range s.cqs {
			stuck = stuck || len(c.carry) > 0
		}
		if s.loopTok != 0 {
			// The daemon's event loop serves the session until the pump is needed again
			// (rung): it waits for the doorbell with the devices' sockets, and the
			// rings' sleeping flags stay set meanwhile.
			s.parked = true
			s.mu.Unlock()
			if stuck {
				time.AfterFunc(100*time.Microsecond, s.signal)
			}
			<-s.resume
			s.mu.Lock()
			s.parked = false
			s.sleeping(false)
			s.mu.Unlock()
			idleSince = time.Time{}
			continue
		}
		s.mu.Unlock()
		var t *time.Timer
		if stuck {
			// A CQ ring is full and the client does not say when it polls: look again
			// soon.
			t = time.AfterFunc(100*time.Microsecond, s.signal)
		}
		err := s.db.Wait()
		if t != nil {
			t.Stop()
		}
		if err != nil {
			return
		}
		s.mu.Lock()
		s.sleeping(false)
		s.mu.Unlock()
		idleSince = time.Time{}
	}
}

// sleeping sets or clears the consumer's flag of every ring the pump reads, and
// arms the engine's CQs so that a completion wakes the pump.
func (s *session) sleeping(on bool) {
	for _, q := range s.qps {
		if on {
			q.sq.Sleep()
		} else {
			q.sq.Awake()
		}
		if q.rq != nil && !(on && q.lazyRecv && s.loopTok != 0) {
			q.rq.sleeping(on)
		}
	}
	for _, q := range s.srqs {
		q.rq.sleeping(on)
	}
}

func (q *recvQueue) sleeping(on bool) {
	if on {
		q.ring.Sleep()
	} else {
		q.ring.Awake()
	}
}

// completed is the engine's CQ event: the goroutine that completed the work moves
// the completions to the client itself, which saves waking the pump for them, and
// arms the CQ again. If the pump holds the session, it is told to (c.due) and woken.
func (s *session) completed(c *cqObj) {
	if !s.mu.TryLock() {
		c.due.Store(true)
		s.signal()
		return
	}
	if !s.closing && c.cq != nil {
		c.drain(s)
	}
	s.mu.Unlock()
}

// drain moves what the engine's CQ holds and arms it again; s.mu is held.
func (c *cqObj) drain(s *session) bool {
	c.due.Store(false)
	did := c.move(s)
	c.cq.RequestNotify(false)
	if c.move(s) {
		did = true
	}
	return did
}

// step does what work there is and reports whether there was any.
func (s *session) step() bool {
	// Receives first: a program posts its receive before the send whose answer it
	// expects, and the answer must not find the receive still in the ring (RNR).
	did := false
	for _, q := range s.srqs {
		if q.rq.drain(s, q.srq.PostRecv, nil) {
			did = true
		}
	}
	for _, q := range s.qps {
		if q.rq != nil && q.rq.drain(s, q.qp.PostRecv, q) {
			did = true
		}
	}
	for _, q := range s.qps {
		if q.drainSend(s) {
			did = true
		}
	}
	for _, c := range s.cqs {
		if (c.due.Load() || len(c.carry) > 0 || len(c.extra) > 0) && c.drain(s) {
			did = true
		}
	}
	return did
}

// fail puts a QP whose rings the client corrupted into the error state: its work
// requests flush, and only its own.
func (q *qpObj) fail(s *session) {
	if q.broken {
		return
	}
	q.broken = true
	q.qp.Modify(&driver.QPAttr{State: driver.QPStateErr}, driver.QPAttrState)
	s.event(uint32(driver.EventQPFatal), attach.EventQP, q.h)
}

// drainSend posts what the client wrote into the send ring.
func (q *qpObj) drainSend(s *session) bool {
	if q.broken {
		return false
	}
	did := false
	for {
		for q.pending < batch {
			slot, err := q.sq.Peek()
			if err != nil {
				q.fail(s)
				return did
			}
			if slot == nil {
				break
			}
			copy(q.scratch, slot) // the client may rewrite the slot while we parse it
			q.sq.Release()
			did = true
			i := q.pending
			wr := &q.send[i]
			h, b, ok := attach.ParseSendWQE(q.scratch, wr, q.sendSGL[i][:q.maxSGE])
			if !ok {
				q.sq.Publish()
				q.fail(s)
				return did
			}
			if !q.resolve(s, i, h, b) {
				q.refuse(wr)
				continue
			}
			q.pending++
		}
		q.sq.Publish()
		if q.pending == 0 {
			return did
		}
		err := q.qp.PostSend(q.send[:q.pending])
		if err == nil {
			q.pending = 0
			continue
		}
		idx, full := refused(err, q.pending)
		if full {
			q.shift(idx) // the engine's queue is full: retry when it has room
			return did
		}
		q.refuse(&q.send[idx])
		q.shift(idx + 1)
	}
}

// refused says which of n posted work requests the engine refused (a PostError's
// index; the first for any other error) and whether because its queue was full.
func refused(err error, n int) (idx int, full bool) {
	var pe *driver.PostError
	if errors.As(err, &pe) && pe.Index >= 0 && pe.Index < n {
		idx = pe.Index
	}
	return idx, errors.Is(err, driver.ErrQueueFull)
}

// resolve turns the handles of WQE i into the session's objects; a handle that is
// not the client's own fails the WQE.
func (q *qpObj) resolve(s *session, i int, h attach.SendWQE, b attach.SendBind) bool {
	wr := &q.send[i]
	if q.typ == driver.QPTypeXRCSend {
		// The WQE's remote_qpn word is an XRC initiator's remote_srqn.
		wr.RemoteSRQN, wr.RemoteQPN = wr.RemoteQPN, 0
	}
	if h.AH != 0 {
		a, err := get[*ahObj](s, h.AH)
		if err != nil {
			return false
		}
		wr.AH = a
	}
	if wr.Opcode == driver.WRBindMW {
		mw, err := get[*mwObj](s, h.BindMW)
		if err != nil {
			return false
		}
		q.binds[i] = driver.MWBindWR{MW: mw, RKey: b.RKey, MWBind: driver.MWBind{Addr: b.Addr, Length: b.Length,
			Access: driver.Access(b.Access)}}
		if h.BindMR != 0 {
			mr, err := get[*mrObj](s, h.BindMR)
			if err != nil {
				return false
			}
			q.binds[i].MR = mr
		}
		wr.Bind = &q.binds[i]
	}
	return true
}

// shift drops the first n pending WQEs, keeping the rest in order; each entry keeps
// its own SGE array and binding.
func (q *qpObj) shift(n int) {
	k := 0
	for j := n; j < q.pending; j, k = j+1, k+1 {
		q.send[k], q.send[j] = q.send[j], q.send[k]
		q.sendSGL[k], q.sendSGL[j] = q.sendSGL[j], q.sendSGL[k]
		q.binds[k] = q.binds[j]
		if q.send[k].Bind != nil {
			q.send[k].Bind = &q.binds[k]
		}
	}
	q.pending = k
}

// refuse completes a WQE the engine would not take with a local QP operation error,
// as a hardware RNIC reports a malformed WQE.
func (q *qpObj) refuse(wr *driver.SendWR) {
	q.scq.fault(driver.WC{ID: wr.ID, Status: driver.WCLocQPOpErr, Opcode: driver.WCSend, QPN: q.qp.QPN()})
}

// fault queues a completion the pump makes itself; a client that keeps feeding bad
// WQEs to a CQ it does not poll overruns it.
func (c *cqObj) fault(wc driver.WC) {
	if len(c.extra) >= 4096 {
		c.overflow.Store(1)
		return
	}
	c.extra = append(c.extra, wc)
}

// drain posts what the client wrote into a receive ring; qp is nil for an SRQ.
func (q *recvQueue) drain(s *session, post func([]driver.RecvWR) error, qp *qpObj) bool {
	if q.broken {
		return false
	}
	did := false
	for {
		for q.pending < batch {
			slot, err := q.ring.Peek()
			if err != nil {
				q.corrupt(s, qp)
				return did
			}
			if slot == nil {
				break
			}
			copy(q.scratch, slot)
			q.ring.Release()
			did = true
			if !attach.ParseRecvWQE(q.scratch, &q.wrs[q.pending], q.sgl[q.pending][:max(q.maxSGE, 1)]) {
				q.ring.Publish()
				q.corrupt(s, qp)
				return did
			}
			q.pending++
		}
		if q.pending == 0 {
			q.ring.Publish()
			return did
		}
		err := post(q.wrs[:q.pending])
		// The tail moves once the engine has the receives, so that a client that waits
		// for it knows they are posted (a UD or UC message finding none is dropped).
		q.ring.Publish()
		if err == nil {
			q.pending = 0
			continue
		}
		idx, full := refused(err, q.pending)
		if !full {
			idx++ // the refused one is dropped: a receive the engine refused cannot complete
		}
		k := 0
		for j := idx; j < q.pending; j, k = j+1, k+1 {
			q.wrs[k], q.wrs[j] = q.wrs[j], q.wrs[k]
			q.sgl[k], q.sgl[j] = q.sgl[j], q.sgl[k]
		}
		q.pending = k
		if full {
			return did
		}
	}
}

func (q *recvQueue) corrupt(s *session, qp *qpObj) {
	q.broken = true
	if qp != nil {
		qp.fail(s)
	}
}

// move copies the engine's completions into the client's ring, as many as it has
// room for, and fires the client's completion channel if the CQ is armed.
func (c *cqObj) move(s *session) bool {
	if c.broken {
		return false
	}
	did := false
	for {
		if len(c.carry) == 0 {
			if len(c.extra) > 0 {
				n := copy(c.wcs[:], c.extra)
				c.extra = c.extra[:copy(c.extra, c.extra[n:])]
				c.carry = c.wcs[:n]
			} else {
				n, err := c.eng.Take(c.wcs[:])
				if err != nil {
					c.overflow.Store(1)
				}
				if n == 0 {
					break
				}
				c.carry = c.wcs[:n]
			}
		}
		full := false
		for len(c.carry) > 0 {
			slot, ok, err := c.prod.Slot()
			if err != nil {
				// The client wrote an impossible tail into its own CQ's ring.
				c.broken = true
				s.event(uint32(driver.EventCQErr), attach.EventCQ, c.h)
				return did
			}
			if !ok {
				full = true
				break
			}
			attach.PutCQE(slot, &c.carry[0])
			c.prod.Commit()
			c.carry = c.carry[1:]
			did = true
		}
		if full {
			break
		}
	}
	if did {
		c.prod.Publish()
		// Solicited-only arming fires on any completion too: a spurious event is
		// harmless to a program, which polls after every event.
		if a := c.arm.Load(); a != 0 && c.arm.CompareAndSwap(a, 0) {
			c.ev.Signal()
		}
	}
	return did
}

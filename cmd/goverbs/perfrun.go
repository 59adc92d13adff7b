package main

import (
	"fmt"
	"net"
	"os"
	"runtime"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/goverbs/goverbs/verbs"
)

// progress reports a long run's steps on stderr.
func (s *perfSide) progress(i, n, size int) {
	if n > 1 {
		fmt.Fprintf(os.Stderr, "goverbs %s: [%d/%d] %d bytes\n", s.p.test, i+1, n, size)
	}
}

// runClient runs the active side over every size and prints its rows. It returns the
// number of messages sent, for the server's accounting.
func (s *perfSide) runClient() (int, error) {
	sizes := s.p.sizes(s.t)
	total := 0
	for i, size := range sizes {
		s.progress(i, len(sizes), size)
		if s.lat {
			row, err := s.latClient(size)
			if err != nil {
				return 0, err
			}
			s.out.latRow(row)
			total += s.p.iters
			continue
		}
		row, sent, err := s.bwClient(size)
		if err != nil {
			return 0, err
		}
		total += sent
		s.out.bwRow(row)
	}
	return total, nil
}

// runServer runs the passive side until the client says it is done.
func (s *perfSide) runServer(c net.Conn) error {
	if s.lat && (s.t == testSend || s.t == testWrite) {
		for _, size := range s.p.sizes(s.t) {
			row, err := s.latServer(size)
			if err != nil {
				return err
			}
			s.out.latRow(row)
		}
		_, err := readDone(c)
		return err
	}
	if s.t == testSend && !s.lat {
		return s.bwSendServer(c)
	}
	_, err := readDone(c) // READ, WRITE and atomics need nothing from the server's CPU
	return err
}

// wr builds the work request of this test for QP i and size bytes.
func (s *perfSide) wr(i, size int) verbs.SendWR {
	r := s.remote[i]
	base := i * s.slot
	wr := verbs.SendWR{RemoteAddr: r.vaddr, RKey: r.rkey}
	switch s.t {
	case testSend:
		wr.Opcode = verbs.WRSend
		wr.SGL = []verbs.SGE{s.mr.SGE(base+s.half, size)}
		if s.p.conn == "UD" {
			wr.AH, wr.RemoteQPN, wr.RemoteQKey = s.ah[i], r.qpn, udQKey
		}
	case testWrite:
		wr.Opcode = verbs.WRRDMAWrite
		wr.SGL = []verbs.SGE{s.mr.SGE(base+s.half, size)}
	case testRead:
		wr.Opcode = verbs.WRRDMARead
		wr.SGL = []verbs.SGE{s.mr.SGE(base, size)}
	case testAtomic:
		wr.Opcode = verbs.WRAtomicFetchAdd
		wr.SGL = []verbs.SGE{s.mr.SGE(base, 8)}
		wr.CompareAdd = 1
	}
	if (s.t == testSend || s.t == testWrite) && size <= s.o.inline {
		wr.Flags |= verbs.SendInline
	}
	return wr
}

// bwClient streams iters messages of size bytes on every QP, keeping tx-depth in
// flight and asking for a completion every cq-mod requests, as perftest does.
func (s *perfSide) bwClient(size int) (bwRow, int, error) {
	n := len(s.qps)
	txDepth := s.o.txDepth
	cqMod := min(s.o.cqMod, txDepth)
	iters := s.p.iters
	posted, completed, lastSig := make([]int, n), make([]int, n), make([]int, n)
	wrs := make([]verbs.SendWR, n)
	for i := range wrs {
		wrs[i] = s.wr(i, size)
		lastSig[i] = -1
	}
	duration := s.p.duration > 0
	var deadline time.Time
	start := time.Now()
	if duration {
		deadline = start.Add(time.Duration(s.p.duration) * time.Second)
	}
	marks := []mark{{0, start}}
	totalDone := 0
	stopped := false
	for {
		if duration && !stopped && time.Now().After(deadline) {
			stopped = true
		}
		finished := true
		for i := range s.qps {
			for !stopped && posted[i]-completed[i] < txDepth && (duration || posted[i] < iters) {
				w := wrs[i]
				w.ID = uint64(posted[i])
				w.Flags &^= verbs.SendSignaled
				if (posted[i]+1)%cqMod == 0 || !duration && posted[i] == iters-1 {
					w.Flags |= verbs.SendSignaled
					lastSig[i] = posted[i]
				}
				if err := s.qps[i].PostSend(w); err != nil {
					return bwRow{}, 0, fmt.Errorf("couldn't post send: %v", err)
				}
				posted[i]++
			}
			if duration {
				if !stopped || completed[i] < lastSig[i]+1 {
					finished = false
				}
			} else if completed[i] < iters {
				finished = false
			}
		}
		if finished {
			break
		}
		wcs, err := s.scq.wait()
		if err != nil {
			return bwRow{}, 0, err
		}
		for j := range wcs {
			wc := &wcs[j]
			if wc.Status != verbs.WCSuccess {
				return bwRow{}, 0, wcError(wc)
			}
			i, ok := s.index[wc.QPN]
			if !ok {
				return bwRow{}, 0, fmt.Errorf("completion for unknown QPN 0x%06x", wc.QPN)
			}
			done := int(wc.ID) + 1
			totalDone += done - completed[i]
			completed[i] = done
		}
		marks = append(marks, mark{totalDone, time.Now()})
	}
	sent := 0
	for i := range posted {
		sent += completed[i]
	}
	row := bwStats(size, marks, duration)
	if !duration {
		row.Iterations = iters // perftest reports the iterations per QP
	}
	return row, sent, nil
}

// bwSendServer receives the client's messages, reposting receives, and reports the
// receive bandwidth per size when the client is done.
func (s *perfSide) bwSendServer(c net.Conn) error {
	type sizeStat struct {
		size  int
		marks []mark
	}
	var stats []*sizeStat
	doneCh := make(chan error, 1)
	var total atomic.Int64
	total.Store(-1)
	go func() {
		n, err := readDone(c)
		total.Store(int64(n))
		doneCh <- err
	}()
	grh := 0
	if s.p.conn == "UD" {
		grh = verbs.GRHLen
	}
	received := 0
	lossy := s.p.conn != "RC"
	lastRx := time.Now()
	clientDone := false
	for {
		if !clientDone {
			select {
			case err := <-doneCh:
				if err != nil {
					return err
				}
				clientDone = true
			default:
			}
		}
		if clientDone {
			want := int(total.Load())
			if received >= want || lossy && time.Since(lastRx) > 200*time.Millisecond {
				break
			}
		}
		wcs, err := s.rcq.tryPoll()
		if err != nil {
			return err
		}
		if len(wcs) == 0 {
			if time.Since(lastRx) > stallTimeout && received > 0 && !clientDone {
				return errStall
			}
			if !s.ep.busy { // --busy-poll never sleeps: this poll is what reads the socket
				time.Sleep(20 * time.Microsecond)
			}
			continue
		}
		now := time.Now()
		lastRx = now
		for j := range wcs {
			wc := &wcs[j]
			if wc.Status != verbs.WCSuccess {
				return wcError(wc)
			}
			size := int(wc.ByteLen) - grh
			if len(stats) == 0 || stats[len(stats)-1].size != size {
				stats = append(stats, &sizeStat{size: size, marks: []mark{{0, now}}})
			}
			st := stats[len(stats)-1]
			st.marks = append(st.marks, mark{st.marks[len(st.marks)-1].n + 1, now})
			received++
			if err := s.postRecv(int(wc.ID)); err != nil {
				return err
			}
		}
	}
	for _, st := range stats {
		// The first arrival opens the interval; count it as one message of the run.
		row := bwStats(st.size, st.marks, s.p.duration > 0)
		s.out.bwRow(row)
	}
	return nil
}

// latClient measures iters operations of size bytes one at a time.
func (s *perfSide) latClient(size int) (latRow, error) {
	iters := s.p.iters
	samples := make([]time.Duration, 0, iters)
	wr := s.wr(0, size)
	wr.Flags |= verbs.SendSignaled
	buf := s.mr.Buf()
	outstanding := 0
	// One clock read per iteration: it ends a sample and starts the next (a read costs
	// tens of nanoseconds here, on the path between the reply and the next post).
	t0 := time.Now()
	sample := func() {
		now := time.Now()
		samples = append(samples, now.Sub(t0))
		t0 = now
	}
	switch s.t {
	case testSend:
		for i := 0; i < iters; i++ {
			if err := s.qps[0].PostSend(wr); err != nil {
				return latRow{}, fmt.Errorf("couldn't post send: %v", err)
			}
			outstanding++
			// Reap send completions while the reply is on its way, as perftest does
			// after each post, not between the reply and the next post.
			if err := s.drainSends(&outstanding, 32); err != nil {
				return latRow{}, err
			}
			if err := s.waitRecv(); err != nil {
				return latRow{}, err
			}
			sample()
		}
		return latStats(size, iters, samples, 2), s.drainSends(&outstanding, 0)
	case testWrite:
		flag := s.half + size - 1
		for i := 0; i < iters; i++ {
			v := byte(i + 1)
			buf[flag] = v
			if err := s.qps[0].PostSend(wr); err != nil {
				return latRow{}, fmt.Errorf("couldn't post write: %v", err)
			}
			outstanding++
			if err := s.drainSends(&outstanding, 32); err != nil {
				return latRow{}, err
			}
			if err := s.waitByte(buf, size-1, v); err != nil {
				return latRow{}, err
			}
			sample()
		}
		return latStats(size, iters, samples, 2), s.drainSends(&outstanding, 0)
	}
	// READ and atomics: the full operation's latency.
	for i := 0; i < iters; i++ {
		if err := s.qps[0].PostSend(wr); err != nil {
			return latRow{}, fmt.Errorf("couldn't post %s: %v", s.t.verb(), err)
		}
		outstanding++
		if err := s.drainSends(&outstanding, 0); err != nil {
			return latRow{}, err
		}
		sample()
	}
	return latStats(size, iters, samples, 1), nil
}

// latServer answers the client's ping-pong: it waits for each message, then replies.
// Its samples are the round trips from its reply to the client's next message.
func (s *perfSide) latServer(size int) (latRow, error) {
	iters := s.p.iters
	samples := make([]time.Duration, 0, iters)
	wr := s.wr(0, size)
	wr.Flags |= verbs.SendSignaled
	buf := s.mr.Buf()
	outstanding := 0
	var t0 time.Time
	for i := 0; i < iters; i++ {
		v := byte(i + 1)
		if s.t == testSend {
			if err := s.waitRecv(); err != nil {
				return latRow{}, err
			}
		} else if err := s.waitByte(buf, size-1, v); err != nil {
			return latRow{}, err
		}
		now := time.Now() // one clock read: it ends a sample and starts the next
		if i > 0 {
			samples = append(samples, now.Sub(t0))
		}
		t0 = now
		if s.t == testWrite {
			buf[s.half+size-1] = v
		}
		if err := s.qps[0].PostSend(wr); err != nil {
			return latRow{}, fmt.Errorf("couldn't post send: %v", err)
		}
		outstanding++
		if err := s.drainSends(&outstanding, 32); err != nil {
			return latRow{}, err
		}
	}
	return latStats(size, iters, samples, 2), s.drainSends(&outstanding, 0)
}

// waitRecv waits for one receive completion and reposts the receive.
func (s *perfSide) waitRecv() error {
	wcs, err := s.rcq.wait()
	if err != nil {
		return err
	}
	if len(wcs) > 1 {
		return fmt.Errorf("unexpected: %d receives at once in a ping-pong", len(wcs))
	}
	wc := &wcs[0]
	if wc.Status != verbs.WCSuccess {
		return wcError(wc)
	}
	return s.postRecv(int(wc.ID))
}

// drainSends polls send completions until at most keep are outstanding.
func (s *perfSide) drainSends(outstanding *int, keep int) error {
	for {
		var wcs []verbs.WC
		var err error
		if *outstanding > keep {
			wcs, err = s.scq.wait()
		} else {
			wcs, err = s.scq.tryPoll()
		}
		if err != nil {
			return err
		}
		for j := range wcs {
			if wcs[j].Status != verbs.WCSuccess {
				return wcError(&wcs[j])
			}
		}
		*outstanding -= len(wcs)
		if len(wcs) == 0 && *outstanding <= keep {
			return nil
		}
	}
}

// waitByte waits until buf[off] holds v, as perftest's write latency test polls the
// last byte of its buffer. The device writes the buffer from its own goroutine, so the
// byte is read atomically through its aligned 32-bit word. A busy-poll device is driven
// from this loop (Device.Progress); otherwise the loop yields to the device's goroutine.
func (s *perfSide) waitByte(buf []byte, off int, v byte) error {
	word := (*uint32)(unsafe.Add(unsafe.Pointer(unsafe.SliceData(buf)), off&^3))
	shift := uint(off&3) * 8
	start := time.Now()
	for spins := 0; ; spins++ {
		if byte(atomic.LoadUint32(word)>>shift) == v {
			return nil
		}
		if s.ep.dev.Progress() {
			continue // busy-poll: this loop drives the device
		}
		if spins%64 != 63 {
			continue
		}
		// Spin a while (a reply usually comes within microseconds), yielding so the
		// device's goroutine can run; then sleep, so that two processes on a small
		// machine do not take every core from the kernel threads that deliver packets.
		el := time.Since(start)
		if el > stallTimeout {
			return errStall
		}
		if el < spinBudget {
			runtime.Gosched()
		} else {
			time.Sleep(time.Microsecond)
		}
	}
}

// spinBudget is how long a latency test spins before it sleeps between checks.
const spinBudget = 50 * time.Microsecond

package perftest

import (
	"fmt"
	"net"
	"os"
	"runtime"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/goverbs/goverbs/cmd/goverbs/internal/exchange/goverbsperf"
	"github.com/goverbs/goverbs/cmd/goverbs/internal/tool"
	"github.com/goverbs/goverbs/verbs"
)

// progress reports a long run's steps on stderr.
func (s *perfSide) progress(i, n, size int) {
	if n > 1 {
		fmt.Fprintf(os.Stderr, "goverbs %s: [%d/%d] %d bytes\n", s.p.Test, i+1, n, size)
	}
}

// printLat prints one latency row (and its histogram with -H) and keeps it for --out_json.
func (s *perfSide) printLat(row latRow) {
	s.out.latRow(row)
	s.lastResult = latResults(row)
	if s.o.hist {
		s.out.histogram(row, !s.o.unsorted)
	}
}

// latRun runs a latency test over every size, and a last DONE each way keeps either
// side from closing its QP under the other.
func (s *perfSide) latRun(c net.Conn) error {
	sizes := s.sizes()
	for i, size := range sizes {
		if err := s.latSize(i, size); err != nil {
			return err
		}
	}
	total := 0
	if s.isClient {
		total = len(sizes) * s.p.Iters
	}
	if err := goverbsperf.WriteDone(c, goverbsperf.Done{Sent: total}); err != nil {
		return err
	}
	_, err := goverbsperf.ReadDone(c)
	return err
}

// latSize runs one size of a latency test, whichever exchange set it up: the side that
// initiates measures, the other answers (SEND and WRITE are ping-pongs), and each
// prints its row; in READ and atomic tests the server's CPU takes no part.
func (s *perfSide) latSize(i, size int) error {
	if s.isClient {
		s.progress(i, len(s.sizes()), size)
	}
	var row latRow
	var err error
	switch {
	case s.initiates():
		row, err = s.latClient(size)
	case s.t == testSend || s.t == testWrite:
		row, err = s.latServer(size)
	default:
		return nil
	}
	if err != nil {
		return err
	}
	s.printLat(row)
	return nil
}

// wr builds the work request of this test for QP i and size bytes.
func (s *perfSide) wr(i, size int) verbs.SendWR {
	r := s.remote[i]
	base := i * s.slot
	wr := verbs.SendWR{RemoteAddr: r.VAddr, RKey: r.RKey}
	switch s.t {
	case testSend:
		wr.Opcode = verbs.WRSend
		wr.SGL = []verbs.SGE{s.mr.SGE(base+s.half, size)}
		if s.p.Conn == "UD" {
			wr.AH, wr.RemoteQPN, wr.RemoteQKey = s.ah[i], r.QPN, udQKey
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
		if s.p.Atomic == "CMP_AND_SWAP" {
			wr.Opcode = verbs.WRAtomicCmpAndSwp
			wr.CompareAdd, wr.Swap = 0, 0 // perftest's operands: the target stays 0
		}
	}
	if (s.t == testSend || s.t == testWrite) && size <= s.o.inline {
		wr.Flags |= verbs.SendInline
	}
	return wr
}

// initiates reports whether this side makes the first move of a latency test, which
// then runs latClient; the other side answers with latServer. As in perftest, the
// client initiates, except in write_lat, where the server writes first and the client
// writes each value back once it has seen it (run_iter_lat_write).
func (s *perfSide) initiates() bool {
	if s.t == testWrite {
		return !s.isClient
	}
	return s.isClient
}

// latClient measures iters operations of size bytes one at a time.
func (s *perfSide) latClient(size int) (latRow, error) {
	iters := s.p.Iters
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
			// Reap send completions after each post, while the reply is on its way,
			// not between the reply and the next post (see sendsKept).
			if err := s.drainSends(&outstanding, s.sendsKept()); err != nil {
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
			if err := s.drainSends(&outstanding, s.sendsKept()); err != nil {
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
	iters := s.p.Iters
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
		if err := s.drainSends(&outstanding, s.sendsKept()); err != nil {
			return latRow{}, err
		}
	}
	return latStats(size, iters, samples, 2), s.drainSends(&outstanding, 0)
}

// waitRecv waits for one receive completion and reposts the receive.
func (s *perfSide) waitRecv() error {
	wcs, err := s.rcq.Wait()
	if err != nil {
		return err
	}
	if len(wcs) > 1 {
		return fmt.Errorf("unexpected: %d receives at once in a ping-pong", len(wcs))
	}
	wc := &wcs[0]
	if wc.Status != verbs.WCSuccess {
		return tool.WCError(wc)
	}
	return s.postRecv(int(wc.ID))
}

// sendsKept is how many send completions a latency loop leaves outstanding after a
// post. perftest's latency tools (tx depth 1, a completion per send) wait for each one
// before they look for the reply (--wait-send does too); by default goverbs' reap them
// while the next reply is on its way. On a software device the difference is a whole
// datagram per one-way trip: the ACK travels behind the peer's reply, in the same
// sendmmsg, and a tool that waits for it waits for the second datagram too.
func (s *perfSide) sendsKept() int {
	if s.o.waitSend {
		return 0
	}
	return 32
}

// drainSends polls send completions until at most keep are outstanding.
func (s *perfSide) drainSends(outstanding *int, keep int) error {
	for {
		var wcs []verbs.WC
		var err error
		if *outstanding > keep {
			wcs, err = s.scq.Wait()
		} else {
			wcs, err = s.scq.TryPoll()
		}
		if err != nil {
			return err
		}
		for j := range wcs {
			if wcs[j].Status != verbs.WCSuccess {
				return tool.WCError(&wcs[j])
			}
		}
		*outstanding -= len(wcs)
		if len(wcs) == 0 && *outstanding <= keep {
			return nil
		}
	}
}

// waitByte waits until buf[off] holds v, as perftest's write latency test polls the
// last byte of its buffer. The device may write the buffer from its own goroutine, so the
// byte is read atomically through its aligned 32-bit word. The loop drives the device
// (Device.Progress): a busy-poll device only from here; a default-mode one from here
// while the loop spins, and from its own goroutine once the loop sleeps.
func (s *perfSide) waitByte(buf []byte, off int, v byte) error {
	word := (*uint32)(unsafe.Add(unsafe.Pointer(unsafe.SliceData(buf)), off&^3))
	shift := uint(off&3) * 8
	start := time.Now()
	for spins := 0; ; spins++ {
		if byte(atomic.LoadUint32(word)>>shift) == v {
			return nil
		}
		if s.ep.Dev.Progress() && s.ep.Busy {
			continue // busy-poll: this loop drives the device
		}
		if spins%64 != 63 {
			continue
		}
		// Spin a while (a reply usually comes within microseconds), yielding so the
		// device's goroutine can run; then sleep, so that two processes on a small
		// machine do not take every core from the kernel threads that deliver packets.
		// runtime.Gosched alone keeps this thread on its CPU (the Go scheduler finds this
		// goroutine again); the thread the netpoller wakes for the WRITE then waits for
		// a CPU while both processes spin. sched_yield hands it the CPU (default-mode
		// write_lat 8 B one-way about 70 -> 25 us, same run, indicative).
		// Measured and rejected: sleeping from the start (45 us: timer wake-ups), and
		// sched_yield on every spin (51 us).
		el := time.Since(start)
		if el > tool.StallTimeout {
			return tool.ErrStall
		}
		if el < tool.SpinBudget {
			runtime.Gosched()
			tool.YieldCPU()
		} else {
			time.Sleep(time.Microsecond)
		}
	}
}

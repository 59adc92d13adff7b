package perftest

import (
	"fmt"
	"runtime"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/goverbs/goverbs/cmd/goverbs/internal/tool"
	"github.com/goverbs/goverbs/verbs"
)

// latency is a side's latency loop: one operation at a time, on its first QP.
type latency struct {
	res      *resources
	op       operation
	iters    int
	waitSend bool // --wait-send
	busy     bool // --busy-poll: this loop drives the device
	dev      *verbs.Device
}

// initiate measures iters operations of size bytes one at a time.
func (l *latency) initiate(size int) (latRow, error) {
	iters := l.iters
	samples := make([]time.Duration, 0, iters)
	wr := l.res.wr(0, size)
	wr.Flags |= verbs.SendSignaled
	buf := l.res.mr.Buf()
	outstanding := 0
	// One clock read per iteration: it ends a sample and starts the next (a read costs
	// tens of nanoseconds here, on the path between the reply and the next post).
	t0 := time.Now()
	sample := func() {
		now := time.Now()
		samples = append(samples, now.Sub(t0))
		t0 = now
	}
	switch l.op {
	case opSend:
		for i := 0; i < iters; i++ {
			if err := l.res.qps[0].PostSend(wr); err != nil {
				return latRow{}, fmt.Errorf("couldn't post send: %v", err)
			}
			outstanding++
			// Reap send completions after each post, while the reply is on its way,
			// not between the reply and the next post (see sendsKept).
			if err := l.drainSends(&outstanding, l.sendsKept()); err != nil {
				return latRow{}, err
			}
			if err := l.waitRecv(); err != nil {
				return latRow{}, err
			}
			sample()
		}
		return latStats(size, iters, samples, 2), l.drainSends(&outstanding, 0)
	case opWrite:
		flag := l.res.half + size - 1
		for i := 0; i < iters; i++ {
			v := byte(i + 1)
			buf[flag] = v
			if err := l.res.qps[0].PostSend(wr); err != nil {
				return latRow{}, fmt.Errorf("couldn't post write: %v", err)
			}
			outstanding++
			if err := l.drainSends(&outstanding, l.sendsKept()); err != nil {
				return latRow{}, err
			}
			if err := l.waitByte(buf, size-1, v); err != nil {
				return latRow{}, err
			}
			sample()
		}
		return latStats(size, iters, samples, 2), l.drainSends(&outstanding, 0)
	}
	// READ and atomics: the full operation's latency.
	for i := 0; i < iters; i++ {
		if err := l.res.qps[0].PostSend(wr); err != nil {
			return latRow{}, fmt.Errorf("couldn't post %s: %v", l.op.verb(), err)
		}
		outstanding++
		if err := l.drainSends(&outstanding, 0); err != nil {
			return latRow{}, err
		}
		sample()
	}
	return latStats(size, iters, samples, 1), nil
}

// answer answers the client's ping-pong: it waits for each message, then replies.
// Its samples are the round trips from its reply to the client's next message.
func (l *latency) answer(size int) (latRow, error) {
	iters := l.iters
	samples := make([]time.Duration, 0, iters)
	wr := l.res.wr(0, size)
	wr.Flags |= verbs.SendSignaled
	buf := l.res.mr.Buf()
	outstanding := 0
	var t0 time.Time
	for i := 0; i < iters; i++ {
		v := byte(i + 1)
		if l.op == opSend {
			if err := l.waitRecv(); err != nil {
				return latRow{}, err
			}
		} else if err := l.waitByte(buf, size-1, v); err != nil {
			return latRow{}, err
		}
		now := time.Now() // one clock read: it ends a sample and starts the next
		if i > 0 {
			samples = append(samples, now.Sub(t0))
		}
		t0 = now
		if l.op == opWrite {
			buf[l.res.half+size-1] = v
		}
		if err := l.res.qps[0].PostSend(wr); err != nil {
			return latRow{}, fmt.Errorf("couldn't post send: %v", err)
		}
		outstanding++
		if err := l.drainSends(&outstanding, l.sendsKept()); err != nil {
			return latRow{}, err
		}
	}
	return latStats(size, iters, samples, 2), l.drainSends(&outstanding, 0)
}

// waitRecv waits for one receive completion and reposts the receive.
func (l *latency) waitRecv() error {
	wcs, err := l.res.rcq.Wait()
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
	return l.res.postRecv(int(wc.ID))
}

// sendsKept is how many send completions a latency loop leaves outstanding after a
// post. perftest's latency tools (tx depth 1, a completion per send) wait for each one
// before they look for the reply (--wait-send does too); by default goverbs' reap them
// while the next reply is on its way. On a software device the difference is a whole
// datagram per one-way trip: the ACK travels behind the peer's reply, in the same
// sendmmsg, and a tool that waits for it waits for the second datagram too.
func (l *latency) sendsKept() int {
	if l.waitSend {
		return 0
	}
	return 32
}

// drainSends polls send completions until at most keep are outstanding.
func (l *latency) drainSends(outstanding *int, keep int) error {
	for {
		var wcs []verbs.WC
		var err error
		if *outstanding > keep {
			wcs, err = l.res.scq.Wait()
		} else {
			wcs, err = l.res.scq.TryPoll()
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
func (l *latency) waitByte(buf []byte, off int, v byte) error {
	word := (*uint32)(unsafe.Add(unsafe.Pointer(unsafe.SliceData(buf)), off&^3))
	shift := uint(off&3) * 8
	start := time.Now()
	for spins := 0; ; spins++ {
		if byte(atomic.LoadUint32(word)>>shift) == v {
			return nil
		}
		if l.dev.Progress() && l.busy {
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
		// a CPU while both processes spin, and sched_yield hands it the CPU. Sleeping
		// from the start (timer wake-ups) and sched_yield on every spin were slower
		// (docs/DESIGN.md, "a program that polls reads the socket").
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

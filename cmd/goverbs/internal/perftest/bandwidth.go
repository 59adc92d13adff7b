package perftest

import (
	"context"
	"fmt"
	"runtime"
	"time"

	"github.com/goverbs/goverbs/cmd/goverbs/internal/exchange/goverbsperf"
	"github.com/goverbs/goverbs/cmd/goverbs/internal/tool"
	"github.com/goverbs/goverbs/verbs"
)

// bandwidth is a side's bandwidth loop: it streams messages over every QP and reaps
// their completions (send), or reaps and reposts a SEND test's receives (recv), and
// measures either as a result row.
type bandwidth struct {
	res  *resources
	o    *options            // -l, -Q, --rate_limit, -N, --cpu_util
	p    *goverbsperf.Params // iterations, -D, --run_infinitely, the connection type
	busy bool                // --busy-poll: never sleep
	rep  *reporter           // --run_infinitely's periodic rows
}

// send streams iters messages of size bytes on every QP (or, with -D, for that long),
// keeping tx-depth in flight and asking for a completion every cq-mod requests, as
// perftest does; -l posts lists, --rate_limit paces the posting. Ctrl-C (ctx) stops
// the posting: the row covers what was sent until then. It returns the row and the
// number of messages sent.
func (b *bandwidth) send(ctx context.Context, size int) (bwRow, int, error) {
	n := len(b.res.qps)
	txDepth := b.res.sq
	list := b.o.postList
	cqMod := min(b.o.cqMod, txDepth)
	iters := b.p.Iters
	posted, completed, lastSig := make([]int, n), make([]int, n), make([]int, n)
	// toSig counts down to a QP's next signaled request, every cqMod-th as perftest
	// signals them: (id+1)%cqMod == 0, a division per request in this loop otherwise.
	toSig := make([]int, n)
	lists := make([][]verbs.SendWR, n)
	for i := range lists {
		lists[i] = make([]verbs.SendWR, list)
		for k := range lists[i] {
			lists[i][k] = b.res.wr(i, size)
		}
		lastSig[i] = -1
		toSig[i] = cqMod
	}
	duration := b.p.Duration > 0
	start := time.Now()
	cpu0 := tool.ProcessCPU()
	deadline := start.Add(time.Duration(b.p.Duration) * time.Second)
	marks := []mark{{0, start}}
	period := 0 // --run_infinitely: the marks of the current period start here
	// Every mark is kept only for the peak (addMark).
	peak := !duration && !b.o.noPeak
	totalDone, totalPosted := 0, 0
	stopped := false
	rate, perMsg := b.o.rateBytes()
	for {
		now := time.Now()
		if !stopped && (ctx.Err() != nil || duration && !b.p.Infinite && now.After(deadline)) {
			stopped = true
		}
		if b.p.Infinite && now.After(deadline) {
			b.rep.printBW(bwStats(size, marks[period:], true))
			period = len(marks) - 1
			deadline = deadline.Add(time.Duration(b.p.Duration) * time.Second)
		}
		finished := true
		paced := false
		for i := range b.res.qps {
			for !stopped && posted[i]-completed[i]+list <= txDepth && (duration || posted[i]+list <= iters) {
				if rate > 0 && b.ahead(rate, perMsg, totalPosted+list, size, start) {
					paced = true
					break
				}
				l := lists[i]
				for k := range l {
					id := posted[i] + k
					l[k].ID = uint64(id)
					l[k].Flags &^= verbs.SendSignaled
					toSig[i]--
					sig := toSig[i] == 0
					if sig {
						toSig[i] = cqMod
					}
					if sig || !duration && id == iters-1 {
						l[k].Flags |= verbs.SendSignaled
						lastSig[i] = id
					}
				}
				if err := b.res.qps[i].PostSend(l...); err != nil {
					return bwRow{}, 0, fmt.Errorf("couldn't post send: %v", err)
				}
				posted[i] += list
				totalPosted += list
			}
			if stopped || duration {
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
		var wcs []verbs.WC
		var err error
		if paced {
			// Ahead of the pace: the next signaled request may not be posted yet, so
			// do not block on the CQ; look, and let time pass.
			if wcs, err = b.res.scq.TryPoll(); err == nil && len(wcs) == 0 {
				time.Sleep(20 * time.Microsecond)
				continue
			}
		} else {
			wcs, err = b.res.scq.WaitStream(totalPosted - totalDone)
		}
		if err != nil {
			return bwRow{}, 0, err
		}
		for j := range wcs {
			wc := &wcs[j]
			if wc.Status != verbs.WCSuccess {
				return bwRow{}, 0, tool.WCError(wc)
			}
			i, ok := b.res.index[wc.QPN]
			if !ok {
				return bwRow{}, 0, fmt.Errorf("completion for unknown QPN 0x%06x", wc.QPN)
			}
			done := int(wc.ID) + 1
			totalDone += done - completed[i]
			completed[i] = done
		}
		marks = addMark(marks, period+1, mark{totalDone, time.Now()}, peak)
	}
	sent := 0
	for i := range posted {
		sent += completed[i]
	}
	row := bwStats(size, marks[period:], duration || stopped || b.o.noPeak)
	if !duration && !stopped {
		// perftest's print_report_bw counts every QP's: -n 100 -q 4 reports 400.
		row.Iterations = iters * n
	}
	if b.o.cpuUtil {
		row.CPU = cpuPercent(cpu0, tool.ProcessCPU(), time.Since(start))
	}
	return row, sent, nil
}

// ahead reports whether posting next more messages would exceed the --rate_limit pace.
func (b *bandwidth) ahead(rate float64, perMsg bool, next, size int, start time.Time) bool {
	amount := float64(next)
	if !perMsg {
		amount *= float64(size)
	}
	return amount > rate*time.Since(start).Seconds()+rate/1000 // a millisecond's burst
}

// goSleep is what a short time.Sleep lasts once the Go runtime's threads block: the
// netpoller's wait is in milliseconds (measured 1.1 ms for a 20-50 µs sleep on the 2-core
// VMs).
const goSleep = 1200 * time.Microsecond

// sleepFills reports whether, at the rate of n messages in el, one sleep (goSleep) lets
// more than half of depth receives be consumed: then the receiver must not sleep.
func sleepFills(n int, el time.Duration, depth int) bool {
	return el > 0 && float64(n)*float64(goSleep)/float64(el) > float64(depth)/2
}

// recv reaps a SEND test's receives and reposts them until the sender's count
// arrives on target and that many have come, or, with idleEnd, until none came for
// 200 ms (UC and UD lose messages; a perftest sender of a -D run sends no count).
func (b *bandwidth) recv(size int, target <-chan int, idleEnd bool) (bwRow, error) {
	grh := 0
	if b.p.Conn == "UD" {
		grh = verbs.GRHLen
	}
	lossy := idleEnd
	want := -1
	received := 0
	var marks []mark
	lastRx := time.Now()
	idle := 0     // empty polls in a row
	fast := false // a sleep's worth of messages would fill half the receive queues
	for {
		if want < 0 {
			select {
			case want = <-target:
			default:
			}
		}
		if want >= 0 && (received >= want || lossy && time.Since(lastRx) > 200*time.Millisecond) {
			break
		}
		wcs, err := b.res.rcq.TryPoll()
		if err != nil {
			return bwRow{}, err
		}
		if len(wcs) == 0 {
			if (received > 0 || want > 0) && time.Since(lastRx) > tool.StallTimeout {
				return bwRow{}, tool.ErrStall
			}
			// --busy-poll never sleeps: this poll is what reads the socket. Otherwise
			// it sleeps, unless messages come so fast that a sleep's worth of them
			// would fill half the receive queue (fast): then it spins, yielding, for
			// tool.SpinBudget after the last completion, as CQWaiter.Wait does. A
			// receiver that slept there (Go's 20 µs sleep lasts about a millisecond)
			// reposted nothing meanwhile, and an 8 B stream ran through its receive
			// queue into RNR NAKs, some 500 a second, each a go-back-N window resent.
			// A 64 KiB stream's messages fit many sleeps, and spinning only took the
			// core the receive goroutine copies them on (0.88-0.94x).
			if !b.busy {
				if idle++; fast && time.Since(lastRx) < tool.SpinBudget {
					runtime.Gosched()
					if idle%64 == 0 {
						tool.YieldCPU()
					}
				} else {
					time.Sleep(20 * time.Microsecond)
				}
			}
			continue
		}
		now := time.Now()
		lastRx, idle = now, 0
		if len(marks) == 0 {
			marks = append(marks, mark{0, now}) // the first arrival opens the interval
		}
		for j := range wcs {
			wc := &wcs[j]
			if wc.Status != verbs.WCSuccess {
				return bwRow{}, tool.WCError(wc)
			}
			if int(wc.ByteLen)-grh == size { // not a straggler of an earlier round (UC, UD)
				received++
			}
			if err := b.res.postRecv(int(wc.ID)); err != nil {
				return bwRow{}, err
			}
		}
		marks = addMark(marks, 1, mark{received, now}, b.p.Duration == 0 && !b.o.noPeak)
		fast = sleepFills(received, now.Sub(marks[0].t), b.res.rxDepth*len(b.res.qps))
	}
	if len(marks) == 0 {
		return bwRow{Bytes: size}, nil
	}
	return bwStats(size, marks, b.p.Duration > 0 || b.o.noPeak), nil
}

// sumRows adds the other direction's figures to this one's, as perftest reports a
// bidirectional run.
func sumRows(a, b bwRow) bwRow {
	a.PeakMiB += b.PeakMiB
	a.AvgMiB += b.AvgMiB
	a.MsgRate += b.MsgRate
	return a
}

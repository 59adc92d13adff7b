package perftest

import (
	"context"
	"fmt"
	"net"
	"time"

	"github.com/goverbs/goverbs/cmd/goverbs/internal/exchange/goverbsperf"
	"github.com/goverbs/goverbs/cmd/goverbs/internal/tool"
	"github.com/goverbs/goverbs/verbs"
)

// The bandwidth tests run one round per message size. In a round the sending side
// (the client; with -b both sides) streams messages while the receiving side of a SEND
// test (the server; with -b both) reaps and reposts receives. Then each side tells the
// other how many messages it sent (so that a receiver knows when it has them all, and
// whether this was the last round: Ctrl-C ends a run early), and the two exchange
// their result rows, so that each side prints what perftest prints: a unidirectional
// server the client's figures (or, for SEND, its own receive figures), a bidirectional
// side the sum of both directions.

// bwRound runs one size and prints its row. It reports whether the run is over early
// (Ctrl-C here or on the other side).
func (s *perfSide) bwRound(ctx context.Context, c net.Conn, size int) (last bool, err error) {
	sends := s.isClient || s.p.Bidir
	recvs := s.t == testSend && (!s.isClient || s.p.Bidir)
	type peerDone struct {
		msg goverbsperf.Done
		err error
	}
	peer := make(chan peerDone, 1)
	go func() {
		d, err := goverbsperf.ReadDone(c)
		peer <- peerDone{d, err}
	}()
	target := make(chan int, 1)
	type recvResult struct {
		row bwRow
		err error
	}
	recvd := make(chan recvResult, 1)
	if recvs {
		go func() {
			row, err := s.bwRecv(size, target, s.p.Conn != "RC")
			recvd <- recvResult{row, err}
		}()
	}
	var mine bwRow
	sent := 0
	if sends {
		s.intr.SetGraceful(true)
		mine, sent, err = s.bwSend(ctx, size)
		s.intr.SetGraceful(false)
		if err != nil {
			return true, err
		}
	}
	interrupted := ctx.Err() != nil
	if err := goverbsperf.WriteDone(c, goverbsperf.Done{Sent: sent, Last: interrupted}); err != nil {
		return true, err
	}
	var pd peerDone
	select {
	case pd = <-peer:
	case r := <-recvd: // the receive loop failed before the peer finished
		if r.err != nil {
			return true, r.err
		}
		pd = <-peer
	}
	if pd.err != nil {
		return true, pd.err
	}
	if recvs {
		target <- pd.msg.Sent
		r := <-recvd
		if r.err != nil {
			return true, r.err
		}
		if !sends {
			mine = r.row
		}
	}
	if err := goverbsperf.WriteReport(c, goverbsperf.Report(mine)); err != nil {
		return true, err
	}
	report, err := goverbsperf.ReadReport(c)
	if err != nil {
		return true, err
	}
	theirs := bwRow(report)
	row := mine
	switch {
	case s.p.Bidir:
		row = sumRows(mine, theirs)
	case !s.isClient && s.t != testSend:
		row = theirs // the server of WRITE, READ and atomics did nothing itself
	}
	s.printBW(row)
	return interrupted || pd.msg.Last, nil
}

// bwSend streams iters messages of size bytes on every QP (or, with -D, for that long),
// keeping tx-depth in flight and asking for a completion every cq-mod requests, as
// perftest does; -l posts lists, --rate_limit paces the posting. Ctrl-C (ctx) stops
// the posting: the row covers what was sent until then. It returns the row and the
// number of messages sent.
func (s *perfSide) bwSend(ctx context.Context, size int) (bwRow, int, error) {
	n := len(s.qps)
	txDepth := s.sq
	list := s.o.postList
	cqMod := min(s.o.cqMod, txDepth)
	iters := s.p.Iters
	posted, completed, lastSig := make([]int, n), make([]int, n), make([]int, n)
	lists := make([][]verbs.SendWR, n)
	for i := range lists {
		lists[i] = make([]verbs.SendWR, list)
		for k := range lists[i] {
			lists[i][k] = s.wr(i, size)
		}
		lastSig[i] = -1
	}
	duration := s.p.Duration > 0
	start := time.Now()
	cpu0 := tool.ProcessCPU()
	deadline := start.Add(time.Duration(s.p.Duration) * time.Second)
	marks := []mark{{0, start}}
	period := 0 // --run_infinitely: the marks of the current period start here
	totalDone, totalPosted := 0, 0
	stopped := false
	rate, perMsg := s.o.rateBytes()
	for {
		now := time.Now()
		if !stopped && (ctx.Err() != nil || duration && !s.p.Infinite && now.After(deadline)) {
			stopped = true
		}
		if s.p.Infinite && now.After(deadline) {
			s.printBW(bwStats(size, marks[period:], true))
			period = len(marks) - 1
			deadline = deadline.Add(time.Duration(s.p.Duration) * time.Second)
		}
		finished := true
		paced := false
		for i := range s.qps {
			for !stopped && posted[i]-completed[i]+list <= txDepth && (duration || posted[i]+list <= iters) {
				if rate > 0 && s.ahead(rate, perMsg, totalPosted+list, size, start) {
					paced = true
					break
				}
				l := lists[i]
				for k := range l {
					id := posted[i] + k
					l[k].ID = uint64(id)
					l[k].Flags &^= verbs.SendSignaled
					if (id+1)%cqMod == 0 || !duration && id == iters-1 {
						l[k].Flags |= verbs.SendSignaled
						lastSig[i] = id
					}
				}
				if err := s.qps[i].PostSend(l...); err != nil {
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
			if wcs, err = s.scq.TryPoll(); err == nil && len(wcs) == 0 {
				time.Sleep(20 * time.Microsecond)
				continue
			}
		} else {
			wcs, err = s.scq.Wait()
		}
		if err != nil {
			return bwRow{}, 0, err
		}
		for j := range wcs {
			wc := &wcs[j]
			if wc.Status != verbs.WCSuccess {
				return bwRow{}, 0, tool.WCError(wc)
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
	row := bwStats(size, marks[period:], duration || stopped || s.o.noPeak)
	if !duration && !stopped {
		// perftest's print_report_bw counts every QP's: -n 100 -q 4 reports 400.
		row.Iterations = iters * n
	}
	if s.o.cpuUtil {
		row.CPU = cpuPercent(cpu0, tool.ProcessCPU(), time.Since(start))
	}
	return row, sent, nil
}

// ahead reports whether posting next more messages would exceed the --rate_limit pace.
func (s *perfSide) ahead(rate float64, perMsg bool, next, size int, start time.Time) bool {
	amount := float64(next)
	if !perMsg {
		amount *= float64(size)
	}
	return amount > rate*time.Since(start).Seconds()+rate/1000 // a millisecond's burst
}

// bwRecv reaps a SEND test's receives and reposts them until the sender's count
// arrives on target and that many have come, or, with idleEnd, until none came for
// 200 ms (UC and UD lose messages; a perftest sender of a -D run sends no count).
func (s *perfSide) bwRecv(size int, target <-chan int, idleEnd bool) (bwRow, error) {
	grh := 0
	if s.p.Conn == "UD" {
		grh = verbs.GRHLen
	}
	lossy := idleEnd
	want := -1
	received := 0
	var marks []mark
	lastRx := time.Now()
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
		wcs, err := s.rcq.TryPoll()
		if err != nil {
			return bwRow{}, err
		}
		if len(wcs) == 0 {
			if (received > 0 || want > 0) && time.Since(lastRx) > tool.StallTimeout {
				return bwRow{}, tool.ErrStall
			}
			if !s.ep.Busy { // --busy-poll never sleeps: this poll is what reads the socket
				time.Sleep(20 * time.Microsecond)
			}
			continue
		}
		now := time.Now()
		lastRx = now
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
			if err := s.postRecv(int(wc.ID)); err != nil {
				return bwRow{}, err
			}
		}
		marks = append(marks, mark{received, now})
	}
	if len(marks) == 0 {
		return bwRow{Bytes: size}, nil
	}
	return bwStats(size, marks, s.p.Duration > 0 || s.o.noPeak), nil
}

// sumRows adds the other direction's figures to this one's, as perftest reports a
// bidirectional run.
func sumRows(a, b bwRow) bwRow {
	a.PeakMiB += b.PeakMiB
	a.AvgMiB += b.AvgMiB
	a.MsgRate += b.MsgRate
	return a
}

// printBW prints a row and checks it against -w and -y.
func (s *perfSide) printBW(row bwRow) {
	s.out.bwRow(row)
	s.lastResult = bwResults(row, s.o.gbits, s.o.cpuUtil)
	avg := row.AvgMiB
	if s.o.gbits {
		avg = gbits(avg)
	}
	if s.o.limitBW > 0 && avg < s.o.limitBW && s.limitErr == nil {
		s.limitErr = fmt.Errorf("the bandwidth %.2f is below the limit %.2f (-w)", avg, s.o.limitBW)
	}
	if s.o.limitMR > 0 && row.MsgRate < s.o.limitMR && s.limitErr == nil {
		s.limitErr = fmt.Errorf("the message rate %.6f Mpps is below the limit %.6f (-y)", row.MsgRate, s.o.limitMR)
	}
}

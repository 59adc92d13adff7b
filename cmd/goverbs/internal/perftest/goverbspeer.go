package perftest

import (
	"context"
	"fmt"
	"net"

	"github.com/goverbs/goverbs/cmd/goverbs/internal/exchange/goverbsperf"
)

// goverbsPeer is a side facing another goverbs tool: the server adopts the client's
// parameters (package goverbsperf), and each bandwidth round ends with both sides'
// counts and rows.
type goverbsPeer struct {
	*side
	c net.Conn
}

// client sends this side's parameters and QPs, takes the server's, and runs the test.
func (s *goverbsPeer) client() error {
	c := s.c
	s.p = s.params()
	if err := s.setup(); err != nil {
		return err
	}
	defer s.close()
	if err := goverbsperf.WriteHeader(c, s.p); err != nil {
		return err
	}
	if err := goverbsperf.WriteDests(c, s.res.local); err != nil {
		return err
	}
	if _, err := goverbsperf.ReadHeader(c); err != nil {
		return err
	}
	var err error
	if s.res.remote, err = goverbsperf.ReadDests(c, s.p.QPs); err != nil {
		return err
	}
	if err := s.res.rts(); err != nil {
		return err
	}
	// Both sides are ready to receive now: say so, for a server that sends first
	// (write_lat, -b) must not send before this side's QPs are in RTR (UC and UD
	// would lose it), as perftest's handshake after RTR ensures.
	if err := goverbsperf.WriteReady(c); err != nil {
		return err
	}
	s.printHeader()
	if err := s.runSizes(); err != nil {
		return err
	}
	return s.rep.finish(s.testInfo)
}

// serve takes the client's parameters and QPs, answers with this side's, and runs
// the test.
func (s *goverbsPeer) serve() error {
	c := s.c
	want := s.params()
	p, err := goverbsperf.ReadHeader(c)
	if err != nil {
		return err
	}
	if p.Test != want.Test {
		return fmt.Errorf("the client runs %s but this server runs %s", p.Test, want.Test)
	}
	if p.Conn != want.Conn {
		return fmt.Errorf("the client uses connection type %s but this server %s (-c)", p.Conn, want.Conn)
	}
	if p.Atomic != want.Atomic {
		return fmt.Errorf("the client runs atomic type %s but this server %s (-A)", p.Atomic, want.Atomic)
	}
	if p.MTU == 0 {
		p.MTU = want.MTU
	}
	p.Infinite = false // the client prints the periodic rows
	s.p = p            // the client's sizes, iterations, QP count and direction rule
	if err := s.setup(); err != nil {
		return err
	}
	defer s.close()
	if s.res.remote, err = goverbsperf.ReadDests(c, s.p.QPs); err != nil {
		return err
	}
	if err := s.res.rts(); err != nil {
		return err
	}
	if err := goverbsperf.WriteHeader(c, s.p); err != nil {
		return err
	}
	if err := goverbsperf.WriteDests(c, s.res.local); err != nil {
		return err
	}
	if err := goverbsperf.ReadReady(c); err != nil {
		return err
	}
	s.printHeader()
	if err := s.runSizes(); err != nil {
		return err
	}
	return s.rep.finish(s.testInfo)
}

// runSizes runs the test over every size of the run.
func (s *goverbsPeer) runSizes() error {
	if s.lat {
		return s.latRun()
	}
	sizes := s.sizes()
	for i, size := range sizes {
		if s.isClient {
			s.rep.progress(i, len(sizes), size)
		}
		last, err := s.bwRound(s.intr.Context(), size)
		if err != nil {
			return err
		}
		if last {
			break
		}
	}
	return nil
}

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
func (s *goverbsPeer) bwRound(ctx context.Context, size int) (last bool, err error) {
	sends := s.isClient || s.p.Bidir
	recvs := s.op == opSend && (!s.isClient || s.p.Bidir)
	type peerDone struct {
		msg goverbsperf.Done
		err error
	}
	peer := make(chan peerDone, 1)
	go func() {
		d, err := goverbsperf.ReadDone(s.c)
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
			row, err := s.bandwidth().recv(size, target, s.p.Conn != "RC")
			recvd <- recvResult{row, err}
		}()
	}
	var mine bwRow
	sent := 0
	if sends {
		s.intr.SetGraceful(true)
		mine, sent, err = s.bandwidth().send(ctx, size)
		s.intr.SetGraceful(false)
		if err != nil {
			return true, err
		}
	}
	interrupted := ctx.Err() != nil
	if err := goverbsperf.WriteDone(s.c, goverbsperf.Done{Sent: sent, Last: interrupted}); err != nil {
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
	if err := goverbsperf.WriteReport(s.c, goverbsperf.Report(mine)); err != nil {
		return true, err
	}
	report, err := goverbsperf.ReadReport(s.c)
	if err != nil {
		return true, err
	}
	theirs := bwRow(report)
	row := mine
	switch {
	case s.p.Bidir:
		row = sumRows(mine, theirs)
	case !s.isClient && s.op != opSend:
		row = theirs // the server of WRITE, READ and atomics did nothing itself
	}
	s.rep.printBW(row)
	return interrupted || pd.msg.Last, nil
}

// latRun runs a latency test over every size, and a last DONE each way keeps either
// side from closing its QP under the other.
func (s *goverbsPeer) latRun() error {
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
	if err := goverbsperf.WriteDone(s.c, goverbsperf.Done{Sent: total}); err != nil {
		return err
	}
	_, err := goverbsperf.ReadDone(s.c)
	return err
}

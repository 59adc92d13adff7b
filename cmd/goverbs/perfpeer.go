package main

import (
	"math"
)

// perftestRun runs the test against a real perftest peer, in the order of messages
// that perftest's program for this test uses (write_bw.c, send_bw.c, send_lat.c, ...).
// Both sides run with their own flags, as perftest does: its flags marked SYMMETRIC
// must be given alike on both sides.
func (s *perfSide) perftestRun(w *pwire) error {
	s.p = s.params()
	s.p.infinite = s.o.infinite
	cycle, err := w.sysData()
	if err != nil {
		return err
	}
	mine := s.ep.port.ActiveMTU
	if s.o.mtu != 0 {
		if mine, err = parseMTU(s.o.mtu); err != nil {
			return err
		}
	}
	m, err := w.mtu(mine)
	if err != nil {
		return err
	}
	s.p.mtu, s.cycle = m.Bytes(), cycle
	if err := s.setup(); err != nil {
		return err
	}
	defer s.close()
	if s.o.rdmaCM {
		// create_rdma_cm_connection: a handshake either side of the CM's connections.
		if err := s.handshake(w); err != nil {
			return err
		}
		if err := s.cmConnect(); err != nil {
			return err
		}
		if err := s.handshake(w); err != nil {
			return err
		}
	}
	var run func() error
	switch {
	case !s.lat && s.t == testSend:
		run = func() error { return s.perftestSendBW(w) }
	case !s.lat:
		run = func() error { return s.perftestRDMABW(w) }
	case s.t == testSend:
		run = func() error { return s.perftestSendLat(w) }
	default:
		run = func() error { return s.perftestLat(w) }
	}
	if err := run(); err != nil {
		return err
	}
	s.out.textf("%s\n", resultLine)
	return s.finish()
}

// connectKeys: the QP records, the move to RTS (not with -R: the CM has connected the
// QPs), and the records again (perftest prints the second set).
func (s *perfSide) connectKeys(w *pwire, between func() error) error {
	if err := s.keys(w); err != nil {
		return err
	}
	if !s.o.rdmaCM {
		if err := s.rts(); err != nil {
			return err
		}
	}
	if between != nil {
		if err := between(); err != nil {
			return err
		}
	}
	if err := s.keys(w); err != nil {
		return err
	}
	s.printHeader()
	return nil
}

// perftestRDMABW: write_bw, read_bw and atomic_bw. The server only waits; at the end
// the client sends its report, which the server prints.
func (s *perfSide) perftestRDMABW(w *pwire) error {
	if err := s.connectKeys(w, nil); err != nil {
		return err
	}
	if err := s.handshake(w); err != nil {
		return err
	}
	if s.p.bidir {
		return s.perftestBidir(w)
	}
	var last bwRow
	if s.isClient {
		for i, size := range s.p.sizes(s.t) {
			s.progress(i, len(s.p.sizes(s.t)), size)
			row, err := s.sendRow(size, true)
			if err != nil {
				return err
			}
			last = row
			if s.intr.ctx.Err() != nil {
				break
			}
		}
	}
	if err := s.handshake(w); err != nil {
		return err
	}
	theirs, err := s.xchgReport(w, last)
	if err != nil {
		return err
	}
	if !s.isClient {
		s.printBW(theirs)
	}
	return s.handshake(w) // ctx_close_connection
}

// sendRow streams one size and, with print, prints its row.
func (s *perfSide) sendRow(size int, print bool) (bwRow, error) {
	s.intr.graceful.Store(true)
	row, _, err := s.bwSend(s.intr.ctx, size)
	s.intr.graceful.Store(false)
	if err != nil {
		return bwRow{}, err
	}
	if print && !s.p.infinite {
		s.printBW(row)
	}
	return row, nil
}

// perftestBidir: write_bw, read_bw and atomic_bw with -b. Per size both sides stream
// between two handshakes (the second only in an -a sweep, as perftest 4.6 and later),
// then exchange reports and print the sum of both directions.
func (s *perfSide) perftestBidir(w *pwire) error {
	sizes := s.p.sizes(s.t)
	for i, size := range sizes {
		if err := s.handshake(w); err != nil {
			return err
		}
		s.progress(i, len(sizes), size)
		mine, err := s.sendRow(size, false)
		if err != nil {
			return err
		}
		if s.p.all {
			if err := s.handshake(w); err != nil {
				return err
			}
		}
		theirs, err := s.xchgReport(w, mine)
		if err != nil {
			return err
		}
		s.printBW(sumRows(mine, theirs))
	}
	return s.handshake(w)
}

// bidirSend runs one size of send_bw -b: this side sends and receives at once, as
// perftest's run_iter_bi, and returns its sending row.
func (s *perfSide) bidirSend(size int) (bwRow, error) {
	target := make(chan int, 1)
	want := s.p.iters * s.p.qps
	if s.p.duration > 0 {
		want = math.MaxInt
	}
	target <- want
	type result struct {
		row bwRow
		err error
	}
	recvd := make(chan result, 1)
	go func() {
		row, err := s.bwRecv(size, target, s.p.conn != "RC" || s.p.duration > 0)
		recvd <- result{row, err}
	}()
	mine, err := s.sendRow(size, false)
	r := <-recvd
	if err != nil {
		return bwRow{}, err
	}
	return mine, r.err
}

// perftestSendBW: send_bw. Each side prints its own figures; the receiver expects
// iterations × QPs messages (or, with -D, receives until the sender stops).
func (s *perfSide) perftestSendBW(w *pwire) error {
	if err := s.connectKeys(w, func() error { return s.handshake(w) }); err != nil {
		return err
	}
	sizes := s.p.sizes(s.t)
	for i, size := range sizes {
		if err := s.handshake(w); err != nil {
			return err
		}
		switch {
		case s.p.bidir:
			s.progress(i, len(sizes), size)
			mine, err := s.bidirSend(size)
			if err != nil {
				return err
			}
			if s.p.duration > 0 { // perftest exchanges no reports in a -D run
				s.printBW(mine)
				break
			}
			theirs, err := s.xchgReport(w, mine)
			if err != nil {
				return err
			}
			s.printBW(sumRows(mine, theirs))
		case s.isClient:
			s.progress(i, len(sizes), size)
			if _, err := s.sendRow(size, true); err != nil {
				return err
			}
		default:
			target := make(chan int, 1)
			want := s.p.iters * s.p.qps
			if s.p.duration > 0 {
				want = math.MaxInt // until the sender stops
			}
			target <- want
			row, err := s.bwRecv(size, target, s.p.conn != "RC" || s.p.duration > 0)
			if err != nil {
				return err
			}
			s.printBW(row)
		}
		if s.p.all {
			if err := s.handshake(w); err != nil {
				return err
			}
		}
	}
	return s.handshake(w)
}

// perftestSendLat: send_lat, a ping-pong in which both sides print.
func (s *perfSide) perftestSendLat(w *pwire) error {
	if err := s.connectKeys(w, func() error { return s.handshake(w) }); err != nil {
		return err
	}
	for i, size := range s.p.sizes(s.t) {
		if err := s.handshake(w); err != nil {
			return err
		}
		if err := s.latSize(i, size); err != nil {
			return err
		}
	}
	return s.handshake(w)
}

// perftestLat: write_lat (a ping-pong) and read_lat, atomic_lat (only the client runs).
func (s *perfSide) perftestLat(w *pwire) error {
	if err := s.keys(w); err != nil { // the early handshake carries the records too
		return err
	}
	if err := s.connectKeys(w, nil); err != nil {
		return err
	}
	if err := s.handshake(w); err != nil {
		return err
	}
	for i, size := range s.p.sizes(s.t) {
		if err := s.latSize(i, size); err != nil { // a read_lat or atomic_lat server only waits
			return err
		}
	}
	if s.t == testWrite {
		// perftest's write_lat ends without ctx_close_connection: the ping-pong's last
		// write, seen by both sides, is the end.
		return nil
	}
	return s.handshake(w)
}

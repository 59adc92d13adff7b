package perftest

import (
	"math"

	"github.com/goverbs/goverbs/cmd/goverbs/internal/exchange/perftestcomm"
	"github.com/goverbs/goverbs/cmd/goverbs/internal/tool"
)

// perftestPeer is a side facing a real perftest (or a goverbs tool with
// --perftest-exchange): it runs the test in the order of messages of perftest's
// program for it, over perftest's exchange w.
type perftestPeer struct {
	*side
	w *perftestcomm.Exchange
}

// run runs the test against a real perftest peer, in the order of messages
// that perftest's program for this test uses (write_bw.c, send_bw.c, send_lat.c, ...).
// Both sides run with their own flags, as perftest does: its flags marked SYMMETRIC
// must be given alike on both sides.
func (s *perftestPeer) run() error {
	s.p = s.params()
	s.p.Infinite = s.o.infinite
	cycle, err := s.w.SysData()
	if err != nil {
		return err
	}
	mine := s.ep.Port.ActiveMTU
	if s.o.mtu != 0 {
		if mine, err = tool.ParseMTU(s.o.mtu); err != nil {
			return err
		}
	}
	m, err := s.w.MTU(mine)
	if err != nil {
		return err
	}
	s.p.MTU, s.cycle = m.Bytes(), cycle
	if err := s.setup(); err != nil {
		return err
	}
	defer s.close()
	if s.o.rdmaCM {
		// create_rdma_cm_connection: a handshake either side of the CM's connections.
		if err := s.handshake(); err != nil {
			return err
		}
		if err := s.cmConnect(); err != nil {
			return err
		}
		if err := s.handshake(); err != nil {
			return err
		}
	}
	var run func() error
	switch {
	case !s.lat && s.op == opSend:
		run = func() error { return s.runSendBW() }
	case !s.lat:
		run = func() error { return s.runRDMABW() }
	case s.op == opSend:
		run = func() error { return s.runSendLat() }
	default:
		run = func() error { return s.runLat() }
	}
	if err := run(); err != nil {
		return err
	}
	return s.rep.finish(s.testInfo)
}

// connectKeys: the QP records, the move to RTS (not with -R: the CM has connected the
// QPs), and the records again (perftest prints the second set).
func (s *perftestPeer) connectKeys(between func() error) error {
	if err := s.keys(); err != nil {
		return err
	}
	if !s.o.rdmaCM {
		if err := s.res.rts(); err != nil {
			return err
		}
	}
	if between != nil {
		if err := between(); err != nil {
			return err
		}
	}
	if err := s.keys(); err != nil {
		return err
	}
	s.printHeader()
	return nil
}

// runRDMABW: write_bw, read_bw and atomic_bw. The server only waits; at the end
// the client sends its report, which the server prints.
func (s *perftestPeer) runRDMABW() error {
	if err := s.connectKeys(nil); err != nil {
		return err
	}
	if err := s.handshake(); err != nil {
		return err
	}
	if s.p.Bidir {
		return s.runBidir()
	}
	var last bwRow
	if s.isClient {
		for i, size := range s.sizes() {
			s.rep.progress(i, len(s.sizes()), size)
			row, err := s.sendRow(size, true)
			if err != nil {
				return err
			}
			last = row
			if s.intr.Context().Err() != nil {
				break
			}
		}
	}
	if err := s.handshake(); err != nil {
		return err
	}
	theirs, err := s.xchgReport(last)
	if err != nil {
		return err
	}
	if !s.isClient {
		s.rep.printBW(theirs)
	}
	return s.handshake() // ctx_close_connection
}

// runBidir: write_bw, read_bw and atomic_bw with -b. Per size both sides stream
// between two handshakes (the second only in an -a sweep, as perftest 4.6 and later),
// then exchange reports and print the sum of both directions.
func (s *perftestPeer) runBidir() error {
	sizes := s.sizes()
	for i, size := range sizes {
		if err := s.handshake(); err != nil {
			return err
		}
		s.rep.progress(i, len(sizes), size)
		mine, err := s.sendRow(size, false)
		if err != nil {
			return err
		}
		if s.p.All {
			if err := s.handshake(); err != nil {
				return err
			}
		}
		theirs, err := s.xchgReport(mine)
		if err != nil {
			return err
		}
		s.rep.printBW(sumRows(mine, theirs))
	}
	return s.handshake()
}

// runSendBW: send_bw. Each side prints its own figures; the receiver expects
// iterations × QPs messages (or, with -D, receives until the sender stops).
func (s *perftestPeer) runSendBW() error {
	if err := s.connectKeys(func() error { return s.handshake() }); err != nil {
		return err
	}
	sizes := s.sizes()
	for i, size := range sizes {
		if err := s.handshake(); err != nil {
			return err
		}
		switch {
		case s.p.Bidir:
			s.rep.progress(i, len(sizes), size)
			mine, err := s.bidirSend(size)
			if err != nil {
				return err
			}
			if s.p.Duration > 0 { // perftest exchanges no reports in a -D run
				s.rep.printBW(mine)
				break
			}
			theirs, err := s.xchgReport(mine)
			if err != nil {
				return err
			}
			s.rep.printBW(sumRows(mine, theirs))
		case s.isClient:
			s.rep.progress(i, len(sizes), size)
			if _, err := s.sendRow(size, true); err != nil {
				return err
			}
		default:
			target := make(chan int, 1)
			want := s.p.Iters * s.p.QPs
			if s.p.Duration > 0 {
				want = math.MaxInt // until the sender stops
			}
			target <- want
			row, err := s.bandwidth().recv(size, target, s.p.Conn != "RC" || s.p.Duration > 0)
			if err != nil {
				return err
			}
			s.rep.printBW(row)
		}
		if s.p.All {
			if err := s.handshake(); err != nil {
				return err
			}
		}
	}
	return s.handshake()
}

// runSendLat: send_lat, a ping-pong in which both sides print.
func (s *perftestPeer) runSendLat() error {
	if err := s.connectKeys(func() error { return s.handshake() }); err != nil {
		return err
	}
	for i, size := range s.sizes() {
		if err := s.handshake(); err != nil {
			return err
		}
		if err := s.latSize(i, size); err != nil {
			return err
		}
	}
	return s.handshake()
}

// runLat: write_lat (a ping-pong) and read_lat, atomic_lat (only the client runs).
func (s *perftestPeer) runLat() error {
	if err := s.keys(); err != nil { // the early handshake carries the records too
		return err
	}
	if err := s.connectKeys(nil); err != nil {
		return err
	}
	if err := s.handshake(); err != nil {
		return err
	}
	for i, size := range s.sizes() {
		if err := s.latSize(i, size); err != nil { // a read_lat or atomic_lat server only waits
			return err
		}
	}
	if s.op == opWrite {
		// perftest's write_lat ends without ctx_close_connection: the ping-pong's last
		// write, seen by both sides, is the end.
		return nil
	}
	return s.handshake()
}

// keys exchanges every QP's record and keeps the peer's.
func (s *perftestPeer) keys() error {
	s.res.remote = make([]perftestcomm.Dest, len(s.res.local))
	for i, d := range s.res.local {
		r, err := s.w.Key(d, "QP record")
		if err != nil {
			return err
		}
		s.res.remote[i] = r
	}
	return nil
}

// handshake is perftest's ctx_hand_shake used as a barrier: QP 0's record once more.
func (s *perftestPeer) handshake() error {
	_, err := s.w.Key(s.res.local[0], "handshake")
	return err
}

// xchgReport exchanges bandwidth reports (xchg_bw_reports) in the unit this side
// prints (MiB/s, or Gb/s with --report_gbits: perftest's flag is SYMMETRIC).
func (s *perftestPeer) xchgReport(mine bwRow) (bwRow, error) {
	unit := func(mib float64) float64 {
		if s.o.gbits {
			return gbits(mib)
		}
		return mib
	}
	mib := func(v float64) float64 {
		if s.o.gbits {
			return v * 1e9 / 8 / (1 << 20)
		}
		return v
	}
	r, err := s.w.Report(perftestcomm.Report{Bytes: mine.Bytes, Iterations: mine.Iterations,
		Peak: unit(mine.PeakMiB), Avg: unit(mine.AvgMiB), MsgRate: mine.MsgRate})
	if err != nil {
		return bwRow{}, err
	}
	return bwRow{Bytes: r.Bytes, Iterations: r.Iterations, PeakMiB: mib(r.Peak), AvgMiB: mib(r.Avg), MsgRate: r.MsgRate}, nil
}

// sendRow streams one size and, with print, prints its row.
func (s *perftestPeer) sendRow(size int, print bool) (bwRow, error) {
	s.intr.SetGraceful(true)
	row, _, err := s.bandwidth().send(s.intr.Context(), size)
	s.intr.SetGraceful(false)
	if err != nil {
		return bwRow{}, err
	}
	if print && !s.p.Infinite {
		s.rep.printBW(row)
	}
	return row, nil
}

// bidirSend runs one size of send_bw -b: this side sends and receives at once, as
// perftest's run_iter_bi, and returns its sending row.
func (s *perftestPeer) bidirSend(size int) (bwRow, error) {
	target := make(chan int, 1)
	want := s.p.Iters * s.p.QPs
	if s.p.Duration > 0 {
		want = math.MaxInt
	}
	target <- want
	type result struct {
		row bwRow
		err error
	}
	recvd := make(chan result, 1)
	go func() {
		row, err := s.bandwidth().recv(size, target, s.p.Conn != "RC" || s.p.Duration > 0)
		recvd <- result{row, err}
	}()
	mine, err := s.sendRow(size, false)
	r := <-recvd
	if err != nil {
		return bwRow{}, err
	}
	return mine, r.err
}

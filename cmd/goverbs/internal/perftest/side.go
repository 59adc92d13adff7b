package perftest

import (
	"fmt"
	"net"

	"github.com/goverbs/goverbs/cm"
	"github.com/goverbs/goverbs/cmd/goverbs/internal/exchange/goverbsperf"
	"github.com/goverbs/goverbs/cmd/goverbs/internal/exchange/perftestcomm"
	"github.com/goverbs/goverbs/cmd/goverbs/internal/tool"
)

// side is one side of a perf test: what it runs and with whom, and the parts that do
// the work, each in a file of its own: the verbs resources (resources.go), the
// bandwidth and latency loops (bandwidth.go, latency.go), what it prints (report.go,
// header.go, output.go, jsonfile.go), and the exchange with a goverbs peer
// (goverbspeer.go) or a perftest one (perftestpeer.go).
type side struct {
	op       operation
	lat      bool
	o        options
	p        goverbsperf.Params // the run's parameters: this side's flags, or a goverbs client's
	ep       *tool.Endpoint
	intr     *tool.Interrupter
	isClient bool
	cycle    int        // a perftest peer's cycle buffer: the span of our area it addresses
	res      *resources // from setup to close
	rep      *reporter
	cm       *perfCM // -R
}

// newSide makes a side of test op (lat: a latency test) on ep, printing to out.
func newSide(op operation, lat bool, o options, ep *tool.Endpoint, out *printer, intr *tool.Interrupter, client bool) *side {
	s := &side{op: op, lat: lat, o: o, ep: ep, intr: intr, isClient: client}
	s.rep = &reporter{out: out, name: op.name(lat), o: &s.o}
	return s
}

// params are the run's parameters as this side's flags give them: what a client
// sends a goverbs server, and what a side facing perftest runs with.
func (s *side) params() goverbsperf.Params {
	return goverbsperf.Params{Test: s.op.name(s.lat), Conn: s.o.conn, QPs: s.o.numQP, Size: s.o.size, Iters: s.o.iters,
		All: s.o.all, Duration: s.o.duration, MTU: s.o.mtu, Bidir: s.o.bidir, Infinite: s.o.infinite, Atomic: s.o.atomic}
}

// sizes are the message sizes of the run: -s, or 2..2^23 with -a.
func (s *side) sizes() []int {
	if !s.p.All || s.op == opAtomic {
		return []int{s.p.Size}
	}
	var out []int
	for size := 2; size <= 1<<23; size *= 2 {
		out = append(out, size)
	}
	return out
}

// maxSize is the largest message of the run.
func (s *side) maxSize() int {
	sizes := s.sizes()
	return sizes[len(sizes)-1]
}

// client runs the client's side over c: the versions first, then perftest's exchange
// or, with a goverbs server, goverbs' own (-R and --perftest-exchange: perftest's only).
func (s *side) client(c net.Conn) error {
	goverbs, ver, err := perftestcomm.Hello(c, true, s.o.perftest || s.o.rdmaCM)
	if err != nil {
		return err
	}
	if !goverbs {
		return (&perftestPeer{s, perftestcomm.NewExchange(c, true, ver)}).run()
	}
	return (&goverbsPeer{s, c}).client()
}

// serve runs the server's side over c, as client does.
func (s *side) serve(c net.Conn) error {
	goverbs, ver, err := perftestcomm.Hello(c, false, s.o.perftest || s.o.rdmaCM)
	if err != nil {
		return err
	}
	if !goverbs {
		return (&perftestPeer{s, perftestcomm.NewExchange(c, false, ver)}).run()
	}
	return (&goverbsPeer{s, c}).serve()
}

// cmConnect connects the QPs through the CM (-R), as perftest's
// create_rdma_cm_connection.
func (s *side) cmConnect() error {
	qps := s.res.qps
	return s.cm.connect(s.intr.Context(), qps, func(i int) *cm.Param { return cmParam(qps[i], s.op, s.o.outs) })
}

// closeCM ends -R's connections and stops the CM, once.
func (s *side) closeCM() {
	if s.cm != nil {
		s.cm.close(s.ep.Stats())
		s.cm = nil
	}
}

// close disconnects the CM (before the QPs go) and closes the verbs resources.
func (s *side) close() {
	s.closeCM()
	s.res.close()
}

// setup settles the MTU and the message size of the run (parameters s.p) and creates
// the side's resources for them: the PD, buffer, CQs and QPs (in INIT).
func (s *side) setup() error {
	active := s.ep.Port.ActiveMTU
	mtu := active
	if s.p.MTU != 0 {
		m, err := tool.ParseMTU(s.p.MTU)
		if err != nil {
			return err
		}
		if m > active {
			return fmt.Errorf("MTU %d is larger than the port's active MTU %d", s.p.MTU, active.Bytes())
		}
		mtu = m
	}
	if s.p.Conn == "UD" && s.maxSize() > mtu.Bytes() {
		// As perftest's check_mtu: a size the user did not ask for (the default, or
		// -a's sweep) is lowered to the MTU; a size asked for with -s is an error.
		if s.o.sizeSet && !s.p.All {
			return fmt.Errorf("size %d is larger than the MTU %d: UD messages are one packet", s.p.Size, mtu.Bytes())
		}
		s.rep.warnf("max msg size in UD is the MTU %d: changing to this size", mtu.Bytes())
		s.p.Size, s.p.All = mtu.Bytes(), false
	}
	s.res = &resources{op: s.op, lat: s.lat, conn: s.p.Conn, qpCount: s.p.QPs, maxSize: s.maxSize(), cycle: s.cycle,
		cas: s.p.Atomic == "CMP_AND_SWAP", o: &s.o, ep: s.ep, rep: s.rep, mtu: mtu}
	return s.res.open()
}

// latSize runs one size of a latency test, whichever exchange set it up: the side that
// initiates measures, the other answers (SEND and WRITE are ping-pongs), and each
// prints its row; in READ and atomic tests the server's CPU takes no part.
func (s *side) latSize(i, size int) error {
	if s.isClient {
		s.rep.progress(i, len(s.sizes()), size)
	}
	var row latRow
	var err error
	switch {
	case s.initiates():
		row, err = s.latency().initiate(size)
	case s.op == opSend || s.op == opWrite:
		row, err = s.latency().answer(size)
	default:
		return nil
	}
	if err != nil {
		return err
	}
	s.rep.printLat(row)
	return nil
}

// initiates reports whether this side makes the first move of a latency test, which
// then runs latency.initiate; the other side answers with latency.answer. As in perftest, the
// client initiates, except in write_lat, where the server writes first and the client
// writes each value back once it has seen it (run_iter_lat_write).
func (s *side) initiates() bool {
	if s.op == opWrite {
		return !s.isClient
	}
	return s.isClient
}

// latency returns the side's latency loop; the resources must exist.
func (s *side) latency() *latency {
	return &latency{res: s.res, op: s.op, iters: s.p.Iters, waitSend: s.o.waitSend, busy: s.ep.Busy, dev: s.ep.Dev}
}

// bandwidth returns the side's bandwidth loop; the resources must exist.
func (s *side) bandwidth() *bandwidth {
	return &bandwidth{res: s.res, o: &s.o, p: &s.p, busy: s.ep.Busy, rep: s.rep}
}

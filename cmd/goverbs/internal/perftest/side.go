package perftest

import (
	"github.com/goverbs/goverbs/cmd/goverbs/internal/exchange/goverbsperf"
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

// close disconnects the CM (before the QPs go) and closes the verbs resources.
func (s *side) close() {
	s.closeCM()
	s.res.close()
}

// Package perftest is the perftest tools: ib_{send,write,read,atomic}_{bw,lat} with
// perftest's flags, banner, result tables and out-of-band exchanges, so that either side
// may be a real perftest.
package perftest

import (
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/netip"
	"os"

	"github.com/goverbs/goverbs/cmd/goverbs/internal/exchange"
	"github.com/goverbs/goverbs/cmd/goverbs/internal/exchange/goverbsperf"
	"github.com/goverbs/goverbs/cmd/goverbs/internal/exchange/perftestcomm"
	"github.com/goverbs/goverbs/cmd/goverbs/internal/tool"
	"github.com/goverbs/goverbs/verbs"
)

// The perftest-style benchmarks: ib_{send,write,read,atomic}_{bw,lat} with perftest's
// flags (perfopts.go), header, result tables and out-of-band exchange, so that each
// side may be a real perftest. This file opens the device and the connection, builds
// a side's verbs resources and brings its QPs up; perfbw.go and perfrun.go run the
// tests.

// udQKey is the Q_Key of UD tests, perftest's DEF_QKEY.
const udQKey = 0x11111111

// perfTest is the operation a test measures.
type perfTest int

const (
	testSend perfTest = iota
	testWrite
	testRead
	testAtomic
)

func (t perfTest) verb() string { return [...]string{"send", "write", "read", "atomic"}[t] }

func (t perfTest) title(lat bool, atomic string) string {
	s := [...]string{"Send", "RDMA_Write", "RDMA_Read", "Atomic " + atomic}[t]
	if lat {
		return s + " Latency Test"
	}
	return s + " BW Test"
}

// Test names the tool of a command: the operation and what is measured.
type Test struct {
	op  perfTest
	lat bool
}

// The tools, named as perftest's programs (ib_send_bw is SendBW).
var (
	SendBW    = Test{testSend, false}
	WriteBW   = Test{testWrite, false}
	ReadBW    = Test{testRead, false}
	AtomicBW  = Test{testAtomic, false}
	SendLat   = Test{testSend, true}
	WriteLat  = Test{testWrite, true}
	ReadLat   = Test{testRead, true}
	AtomicLat = Test{testAtomic, true}
)

// Runner returns the command of tool t.
func Runner(t Test) func(*tool.Command, []string) error {
	return func(cmd *tool.Command, args []string) error { return runPerf(cmd, t.op, t.lat, args) }
}

func (t perfTest) name(lat bool) string {
	if lat {
		return t.verb() + "_lat"
	}
	return t.verb() + "_bw"
}

func runPerf(cmd *tool.Command, t perfTest, lat bool, args []string) error {
	name := cmd.Name
	fs := tool.NewFlagSet(cmd)
	var o perfOpts
	o.register(fs, t, lat)
	pos, err := fs.ParseArgs(args)
	if err != nil {
		return err
	}
	if o.version {
		fmt.Printf("Version: %s\n", perftestcomm.Version)
		return nil
	}
	server, err := tool.OneArg(pos)
	if err != nil {
		return err
	}
	if err := o.check(t, lat, fs); err != nil {
		return err
	}
	out := &printer{w: os.Stdout, json: o.json, gbits: o.gbits, cpu: o.cpuUtil}
	intr := tool.NewInterrupter(name)
	defer intr.Stop()
	if o.loopback {
		if server != "" {
			return fmt.Errorf("--loopback runs both sides itself: give no server address")
		}
		return intr.Result(runLoopback(intr, t, lat, o, out))
	}
	ep, err := tool.OpenEndpoint(o.dev)
	if err != nil {
		return err
	}
	defer ep.Close()
	s := &perfSide{t: t, lat: lat, o: o, ep: ep, out: out, intr: intr}
	defer s.closeCM()
	if server == "" {
		if o.rdmaCM {
			if s.cm, err = newPerfCM(ep, true, o.port, netip.AddrPort{}); err != nil {
				return err
			}
			out.textf("\n************************************\n* Waiting for client to connect... *\n************************************\n")
			w, err := s.cm.accept(intr.Context())
			if err != nil {
				return intr.Result(err)
			}
			intr.OnStop(func() { w.Close() })
			return intr.Result(s.serve(w))
		}
		l, err := exchange.Listen(ep.Addr, o.port)
		if err != nil {
			return err
		}
		intr.OnStop(func() { l.Close() })
		out.textf("\n************************************\n* Waiting for client to connect... *\n************************************\n")
		c, err := exchange.Accept(l)
		if err != nil {
			return intr.Result(err)
		}
		defer c.Close()
		intr.OnStop(func() { c.Close() })
		return intr.Result(s.serve(c))
	}
	if o.rdmaCM {
		a, err := tool.ResolveHost(server)
		if err != nil {
			return err
		}
		if s.cm, err = newPerfCM(ep, false, o.port, netip.AddrPortFrom(a, uint16(o.port))); err != nil {
			return err
		}
		w, err := s.cm.dial(intr.Context())
		if err != nil {
			return intr.Result(err)
		}
		intr.OnStop(func() { w.Close() })
		s.isClient = true
		return intr.Result(s.client(w))
	}
	c, err := exchange.Dial(server, o.port)
	if err != nil {
		return err
	}
	defer c.Close()
	intr.OnStop(func() { c.Close() })
	s.isClient = true
	return intr.Result(s.client(c))
}

// sizes are the message sizes of the run: -s, or 2..2^23 with -a.
func (s *perfSide) sizes() []int {
	if !s.p.All || s.t == testAtomic {
		return []int{s.p.Size}
	}
	var out []int
	for size := 2; size <= 1<<23; size *= 2 {
		out = append(out, size)
	}
	return out
}

// maxSize is the largest message of the run.
func (s *perfSide) maxSize() int {
	sizes := s.sizes()
	return sizes[len(sizes)-1]
}

// runLoopback runs the server on one software device and the client on another, in
// this process, and prints the client's results. Without --bind it takes two free
// loopback addresses, so that several loopback runs (parallel CI jobs) coexist.
func runLoopback(intr *tool.Interrupter, t perfTest, lat bool, o perfOpts, out *printer) error {
	so, co := o, o
	so.dev.Pcap = ""   // the client's capture sees both directions
	so.outJSON = false // the client writes the report
	so.limitBW, so.limitMR = 0, 0
	if so.dev.Dev == "" {
		so.dev.Dev, co.dev.Dev = "sw0", "sw1" // two devices: their --stats lines differ
	}
	sep, cep, err := tool.OpenLoopbackPair(&so.dev, &co.dev)
	if err != nil {
		return err
	}
	defer sep.Close()
	defer cep.Close()
	a := sep.Addr.Unmap()
	l, err := net.Listen("tcp", netip.AddrPortFrom(a, 0).String())
	if err != nil {
		return fmt.Errorf("listen for the exchange: %v", err)
	}
	srv := &perfSide{t: t, lat: lat, o: so, ep: sep, out: &printer{w: io.Discard, json: true}, intr: intr}
	cli := &perfSide{t: t, lat: lat, o: co, ep: cep, out: out, intr: intr, isClient: true}
	if o.rdmaCM {
		port := l.Addr().(*net.TCPAddr).Port
		if srv.cm, err = newPerfCM(sep, true, port, netip.AddrPort{}); err != nil {
			l.Close()
			return err
		}
		if cli.cm, err = newPerfCM(cep, false, 0, netip.AddrPortFrom(a, uint16(port))); err != nil {
			l.Close()
			srv.closeCM()
			return err
		}
		defer cli.closeCM()
		l.Close() // its port number only: with -R the exchange goes over rdma_cm
		return loopbackCM(intr, srv, cli)
	}
	errc := make(chan error, 1)
	go func() {
		defer srv.closeCM() // the server's goroutine owns its CM, even when the client fails
		c, err := exchange.Accept(l)
		if err != nil {
			errc <- err
			return
		}
		defer c.Close()
		errc <- srv.serve(c)
	}()
	c, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		l.Close()
		return fmt.Errorf("connect to the loopback server: %v", err)
	}
	defer c.Close()
	intr.OnStop(func() { c.Close() })
	if err := cli.client(c); err != nil {
		return err
	}
	if err := <-errc; err != nil {
		return fmt.Errorf("loopback server: %v", err)
	}
	return nil
}

// perfSide is one side of a perf test and its verbs resources.
type perfSide struct {
	t      perfTest
	lat    bool
	o      perfOpts
	p      goverbsperf.Params
	ep     *tool.Endpoint
	out    *printer
	pd     *verbs.PD
	mr     *verbs.MR
	scq    *tool.CQWaiter
	rcq    *tool.CQWaiter
	qps    []*verbs.QP
	ah     []*verbs.AH
	index  map[uint32]int
	slot   int // bytes per QP in the buffer: receive area, then send area
	half   int
	local  []perftestcomm.Dest
	remote []perftestcomm.Dest
	mtu    verbs.MTU
	srq    *verbs.SRQ
	sq     int // send queue depth per QP
	cycle  int // a perftest peer's cycle buffer: the span of our area it addresses
	// rxDepth is the receives posted per QP: -r, lowered when the QPs would
	// overflow the receive CQ.
	rxDepth int

	isClient   bool
	intr       *tool.Interrupter
	lastResult []kv    // the last row printed, for --out_json
	limitErr   error   // -w or -y not met
	cm         *perfCM // -R
}

func (s *perfSide) params() goverbsperf.Params {
	return goverbsperf.Params{Test: s.t.name(s.lat), Conn: s.o.conn, QPs: s.o.numQP, Size: s.o.size, Iters: s.o.iters,
		All: s.o.all, Duration: s.o.duration, MTU: s.o.mtu, Bidir: s.o.bidir, Infinite: s.o.infinite, Atomic: s.o.atomic}
}

func (s *perfSide) qpType() verbs.QPType {
	switch s.p.Conn {
	case "UC":
		return verbs.QPTypeUC
	case "UD":
		return verbs.QPTypeUD
	}
	return verbs.QPTypeRC
}

// setup creates the PD, buffer, CQs and QPs (in INIT) for parameters s.p.
func (s *perfSide) setup() error {
	active := s.ep.Port.ActiveMTU
	s.mtu = active
	if s.p.MTU != 0 {
		m, err := tool.ParseMTU(s.p.MTU)
		if err != nil {
			return err
		}
		if m > active {
			return fmt.Errorf("MTU %d is larger than the port's active MTU %d", s.p.MTU, active.Bytes())
		}
		s.mtu = m
	}
	if s.p.Conn == "UD" && s.maxSize() > s.mtu.Bytes() {
		// As perftest's check_mtu: a size the user did not ask for (the default, or
		// -a's sweep) is lowered to the MTU; a size asked for with -s is an error.
		if s.o.sizeSet && !s.p.All {
			return fmt.Errorf("size %d is larger than the MTU %d: UD messages are one packet", s.p.Size, s.mtu.Bytes())
		}
		s.warnf("max msg size in UD is the MTU %d: changing to this size", s.mtu.Bytes())
		s.p.Size, s.p.All = s.mtu.Bytes(), false
	}
	dev := s.ep.Dev
	var err error
	if s.pd, err = dev.AllocPD(); err != nil {
		return fmt.Errorf("couldn't allocate PD: %v", err)
	}
	// Each QP's area holds a message and a GRH, and at least the span in which a
	// perftest peer cycles its remote address (perftest's cycle buffer).
	s.half = (max(s.maxSize()+verbs.GRHLen, s.cycle) + 63) &^ 63
	s.slot = 2 * s.half
	access := verbs.AccessLocalWrite | verbs.AccessRemoteWrite | verbs.AccessRemoteRead | verbs.AccessRemoteAtomic
	if s.mr, err = s.pd.RegMR(make([]byte, s.slot*s.p.QPs), access); err != nil {
		return fmt.Errorf("couldn't register MR: %v", err)
	}
	sq := s.o.txDepth
	if s.lat {
		sq = 64
	}
	// The CQs as perftest sizes them (create_cqs): the send CQ holds every QP's send
	// queue, and only SEND tests have receive completions, hence a receive CQ. The CQs
	// must fit the device's CQE limit; when many QPs would overflow it the queues are
	// shortened to fit (perftest would fail to create the CQ).
	maxCQE := dev.Query().MaxCQE
	if sq*s.p.QPs > maxCQE {
		sq = maxCQE / s.p.QPs
		s.warnf("tx depth lowered to %d so that %d QPs fit one CQ of %d entries", sq, s.p.QPs, maxCQE)
	}
	s.rxDepth = s.o.rxDepth
	if s.rxDepth*s.p.QPs > maxCQE {
		s.rxDepth = maxCQE / s.p.QPs
		if s.t == testSend {
			s.warnf("rx depth lowered to %d so that %d QPs fit one CQ of %d entries", s.rxDepth, s.p.QPs, maxCQE)
		}
	}
	s.sq = sq
	if s.scq, err = tool.NewCQ(dev, sq*s.p.QPs, s.o.events, s.ep.Busy); err != nil {
		return err
	}
	s.rcq = s.scq
	if s.t == testSend {
		if s.rcq, err = tool.NewCQ(dev, s.rxDepth*s.p.QPs, s.o.events, s.ep.Busy); err != nil {
			return err
		}
	}
	if s.o.srq && s.t == testSend {
		// --use-srq: every QP receives from one SRQ of --rx-depth entries, as perftest.
		s.rxDepth = min(s.o.rxDepth, maxCQE)
		if s.srq, err = s.pd.CreateSRQ(verbs.SRQAttr{MaxWR: uint32(s.rxDepth), MaxSGE: 1}); err != nil {
			return fmt.Errorf("couldn't create SRQ: %v", err)
		}
	}
	s.index = make(map[uint32]int)
	for i := 0; i < s.p.QPs; i++ {
		qp, err := s.pd.CreateQP(verbs.QPInitAttr{Type: s.qpType(), SendCQ: s.scq.CQ, RecvCQ: s.rcq.CQ, SRQ: s.srq,
			Cap: verbs.QPCap{MaxSendWR: uint32(sq), MaxRecvWR: uint32(s.rxDepth), MaxSendSGE: 1, MaxRecvSGE: 1, MaxInline: uint32(s.o.inline)}})
		if err != nil {
			return fmt.Errorf("couldn't create %v QP: %v", s.qpType(), err)
		}
		s.qps = append(s.qps, qp)
		s.ep.TrackQPs([]*verbs.QP{qp})
		s.index[qp.QPN()] = i
		init := &verbs.QPAttr{State: verbs.QPStateInit, Port: uint8(s.o.dev.IBPort), AccessFlags: access}
		mask := verbs.QPAttrState | verbs.QPAttrPKeyIndex | verbs.QPAttrPort
		if s.p.Conn == "UD" {
			init.QKey = udQKey
			mask |= verbs.QPAttrQKey
		} else {
			mask |= verbs.QPAttrAccessFlags
		}
		if err := qp.Modify(init, mask); err != nil {
			return fmt.Errorf("failed to modify QP to INIT: %v", err)
		}
		s.local = append(s.local, perftestcomm.Dest{OutReads: s.o.outs, QPN: qp.QPN(), PSN: rand.Uint32() & 0xffffff,
			RKey: s.mr.RKey(), VAddr: s.mr.AddrOf(i * s.slot), GID: s.ep.GID})
	}
	if s.t == testSend {
		qps := s.qps
		if s.srq != nil {
			qps = qps[:1] // postRecv posts to the SRQ
		}
		for i := range qps {
			for k := 0; k < s.rxDepth; k++ {
				if err := s.postRecv(i); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// warnf tells the user on stderr that a setting was changed to make the run work. The
// in-process server of --loopback stays quiet: the client says the same.
func (s *perfSide) warnf(format string, args ...any) {
	if s.out.w != io.Discard {
		fmt.Fprintf(os.Stderr, "goverbs %s: %s\n", s.p.Test, fmt.Sprintf(format, args...))
	}
}

func (s *perfSide) close() {
	s.closeCM() // disconnect before the QPs go
	s.ep.CloseQPs(s.qps)
	if s.srq != nil {
		s.srq.Close()
	}
	if s.rcq != nil && s.rcq != s.scq {
		s.rcq.Close()
	}
	if s.scq != nil {
		s.scq.Close()
	}
	if s.mr != nil {
		s.mr.Close()
	}
	if s.pd != nil {
		s.pd.Close()
	}
}

func (s *perfSide) postRecv(i int) error {
	n := s.maxSize()
	if s.p.Conn == "UD" {
		n += verbs.GRHLen
	}
	var err error
	if s.srq != nil {
		// One buffer for all: a bandwidth test does not look at the data.
		err = s.srq.PostRecv(verbs.RecvWR{ID: 0, SGL: []verbs.SGE{s.mr.SGE(0, n)}})
	} else {
		err = s.qps[i].PostRecv(verbs.RecvWR{ID: uint64(i), SGL: []verbs.SGE{s.mr.SGE(i*s.slot, n)}})
	}
	if err != nil {
		return fmt.Errorf("couldn't post receive: %v", err)
	}
	return nil
}

// rts brings every QP to RTS towards its remote.
func (s *perfSide) rts() error {
	for i, qp := range s.qps {
		r, l := s.remote[i], s.local[i]
		av := verbs.AHAttr{DGID: r.GID, SGIDIndex: uint8(s.o.dev.GIDIndex), HopLimit: 64, Port: uint8(s.o.dev.IBPort)}
		switch s.p.Conn {
		case "UD":
			if err := qp.Modify(&verbs.QPAttr{State: verbs.QPStateRTR}, verbs.QPAttrState); err != nil {
				return fmt.Errorf("failed to modify QP to RTR: %v", err)
			}
			if err := qp.Modify(&verbs.QPAttr{State: verbs.QPStateRTS, SQPSN: l.PSN}, verbs.QPAttrState|verbs.QPAttrSQPSN); err != nil {
				return fmt.Errorf("failed to modify QP to RTS: %v", err)
			}
			ah, err := s.pd.CreateAH(av)
			if err != nil {
				return fmt.Errorf("failed to create AH: %v", err)
			}
			s.ah = append(s.ah, ah)
			continue
		case "UC":
			if err := qp.Modify(&verbs.QPAttr{State: verbs.QPStateRTR, PathMTU: s.mtu, DestQPN: r.QPN, RQPSN: r.PSN, AH: av},
				verbs.QPAttrState|verbs.QPAttrAV|verbs.QPAttrPathMTU|verbs.QPAttrDestQPN|verbs.QPAttrRQPSN); err != nil {
				return fmt.Errorf("failed to modify QP to RTR: %v", err)
			}
			if err := qp.Modify(&verbs.QPAttr{State: verbs.QPStateRTS, SQPSN: l.PSN}, verbs.QPAttrState|verbs.QPAttrSQPSN); err != nil {
				return fmt.Errorf("failed to modify QP to RTS: %v", err)
			}
			continue
		}
		outs := uint8(min(s.o.outs, r.OutReads))
		if err := qp.Modify(&verbs.QPAttr{State: verbs.QPStateRTR, PathMTU: s.mtu, DestQPN: r.QPN, RQPSN: r.PSN, AH: av,
			MaxDestRdAtomic: outs, MinRNRTimer: 12},
			verbs.QPAttrState|verbs.QPAttrAV|verbs.QPAttrPathMTU|verbs.QPAttrDestQPN|verbs.QPAttrRQPSN|
				verbs.QPAttrMaxDestRdAtomic|verbs.QPAttrMinRNRTimer); err != nil {
			return fmt.Errorf("failed to modify QP to RTR: %v", err)
		}
		if err := qp.Modify(&verbs.QPAttr{State: verbs.QPStateRTS, SQPSN: l.PSN, Timeout: uint8(s.o.timeout), RetryCnt: 7, RNRRetry: 7, MaxRdAtomic: outs},
			verbs.QPAttrState|verbs.QPAttrSQPSN|verbs.QPAttrTimeout|verbs.QPAttrRetryCnt|verbs.QPAttrRNRRetry|verbs.QPAttrMaxQPRdAtomic); err != nil {
			return fmt.Errorf("failed to modify QP to RTS: %v", err)
		}
	}
	return nil
}

// printHeader prints perftest's banner and the address lines.
func (s *perfSide) printHeader() {
	o := s.out
	srq := "OFF"
	if s.srq != nil {
		srq = "ON"
	}
	o.textf("%s\n", resultLine)
	o.textf("                    %s\n", s.t.title(s.lat, s.p.Atomic))
	o.textf(" Dual-port       : OFF\t\tDevice         : %s\n", s.ep.Dev.Name())
	o.textf(" Number of qps   : %d\t\tTransport type : IB\n", s.p.QPs)
	o.textf(" Connection type : %s\t\tUsing SRQ      : %s\n", s.p.Conn, srq)
	o.textf(" TX depth        : %d\n", s.sq)
	if s.o.postList > 1 {
		o.textf(" Post List       : %d\n", s.o.postList)
	}
	if !s.lat {
		o.textf(" CQ Moderation   : %d\n", min(s.o.cqMod, s.o.txDepth))
	}
	o.textf(" Mtu             : %d[B]\n", s.mtu.Bytes())
	o.textf(" Link type       : Ethernet\n")
	o.textf(" GID index       : %d\n", s.o.dev.GIDIndex)
	if s.t == testRead || s.t == testAtomic {
		o.textf(" Outstand reads  : %d\n", s.o.outs)
	}
	o.textf(" Max inline data : %d[B]\n", s.o.inline)
	o.textf(" rdma_cm QPs\t : %s\n", onOff(s.o.rdmaCM))
	o.textf(" Data ex. method : %s\n", s.o.dataExMethod())
	o.textf("%s\n", resultLine)
	line := func(which string, d perftestcomm.Dest) {
		out := ""
		if s.t == testRead || s.t == testAtomic {
			out = fmt.Sprintf(" OUT 0x%02x", d.OutReads)
		}
		o.textf(" %s address: LID %04x QPN 0x%04x PSN 0x%06x%s RKey 0x%06x VAddr 0x%014x\n", which, d.LID, d.QPN, d.PSN, out, d.RKey, d.VAddr)
		o.textf(" GID: %s\n", gidDecimal(d.GID))
	}
	for i := range s.local {
		line("local", s.local[i])
	}
	for i := range s.remote {
		line("remote", s.remote[i])
	}
	o.textf("%s\n", resultLine)
	if s.lat {
		o.latHeader()
	} else {
		o.bwHeader()
	}
}

func (s *perfSide) client(c net.Conn) error {
	goverbs, ver, err := perftestcomm.Hello(c, true, s.o.perftest || s.o.rdmaCM) // -R: perftest's exchange only, over rdma_cm
	if err != nil {
		return err
	}
	if !goverbs {
		return s.perftestRun(perftestcomm.NewExchange(c, true, ver))
	}
	s.p = s.params()
	if err := s.setup(); err != nil {
		return err
	}
	defer s.close()
	if err := exchange.WriteAll(c, s.p.Header(), "parameters"); err != nil {
		return err
	}
	if err := goverbsperf.WriteDests(c, s.local); err != nil {
		return err
	}
	if _, err := goverbsperf.ReadHeader(c); err != nil {
		return err
	}
	if s.remote, err = goverbsperf.ReadDests(c, s.p.QPs); err != nil {
		return err
	}
	if err := s.rts(); err != nil {
		return err
	}
	// Both sides are ready to receive now: say so, for a server that sends first
	// (write_lat, -b) must not send before this side's QPs are in RTR (UC and UD
	// would lose it), as perftest's handshake after RTR ensures.
	if err := goverbsperf.WriteReady(c); err != nil {
		return err
	}
	s.printHeader()
	if err := s.runSizes(c); err != nil {
		return err
	}
	s.out.textf("%s\n", resultLine)
	return s.finish()
}

func (s *perfSide) serve(c net.Conn) error {
	goverbs, ver, err := perftestcomm.Hello(c, false, s.o.perftest || s.o.rdmaCM)
	if err != nil {
		return err
	}
	if !goverbs {
		return s.perftestRun(perftestcomm.NewExchange(c, false, ver))
	}
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
	if s.remote, err = goverbsperf.ReadDests(c, s.p.QPs); err != nil {
		return err
	}
	if err := s.rts(); err != nil {
		return err
	}
	if err := exchange.WriteAll(c, s.p.Header(), "parameters"); err != nil {
		return err
	}
	if err := goverbsperf.WriteDests(c, s.local); err != nil {
		return err
	}
	if err := goverbsperf.ReadReady(c); err != nil {
		return err
	}
	s.printHeader()
	if err := s.runSizes(c); err != nil {
		return err
	}
	s.out.textf("%s\n", resultLine)
	return s.finish()
}

// runSizes runs the test over every size of the run.
func (s *perfSide) runSizes(c net.Conn) error {
	if s.lat {
		return s.latRun(c)
	}
	sizes := s.sizes()
	for i, size := range sizes {
		if s.isClient {
			s.progress(i, len(sizes), size)
		}
		last, err := s.bwRound(s.intr.Context(), c, size)
		if err != nil {
			return err
		}
		if last {
			break
		}
	}
	return nil
}

// finish writes --out_json's file and fails the run if -w or -y was not met.
func (s *perfSide) finish() error {
	if s.o.outJSON && s.lastResult != nil {
		if err := s.writeJSONFile(); err != nil {
			return err
		}
	}
	return s.limitErr
}

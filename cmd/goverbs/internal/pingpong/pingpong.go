// Package pingpong is the four ping-pongs of libibverbs' examples (ibv_rc_pingpong,
// ibv_uc_pingpong, ibv_ud_pingpong, ibv_srq_pingpong) with their flags, output and
// out-of-band exchange, so that either side may be rdma-core's program.
package pingpong

import (
	"fmt"

	"github.com/goverbs/goverbs/cmd/goverbs/internal/exchange"
	"github.com/goverbs/goverbs/cmd/goverbs/internal/exchange/pingpongrec"
	"github.com/goverbs/goverbs/cmd/goverbs/internal/tool"
	"github.com/goverbs/goverbs/verbs"
)

// The four libibverbs example ping-pongs: rc, uc, ud and srq. They share the flags, the
// exchange and the loop of rdma-core's examples; only the QP type, the bring-up and where
// receives are posted differ.

// Kind is one of the four programs.
type Kind int

const (
	RC  Kind = iota // ibv_rc_pingpong
	UC              // ibv_uc_pingpong
	UD              // ibv_ud_pingpong
	SRQ             // ibv_srq_pingpong: RC QPs receiving from one SRQ
)

const (
	wrRecv = 1 // PINGPONG_RECV_WRID
	wrSend = 2 // PINGPONG_SEND_WRID

	udQKey = 0x11111111
	maxQP  = 256 // srq_pingpong's MAX_QP: the number of records it always exchanges
)

// Runner returns the command of kind k.
func Runner(k Kind) func(*tool.Command, []string) error {
	return func(cmd *tool.Command, args []string) error { return run(cmd, k, args) }
}

// options are the flags of rdma-core's examples.
type options struct {
	dev     tool.DevOpts
	port    int
	size    int
	mtu     int
	rxDepth int
	iters   int
	sl      int
	numQP   int
	events  bool
	chk     bool
	// rdma-core's memory and API options (see checkMemoryOpts).
	odp, iodp, prefetch, ts, dm, newSend bool
}

// side is one end of a ping-pong: its options and verbs resources.
type side struct {
	kind   Kind
	o      options
	ep     *tool.Endpoint
	pd     *verbs.PD
	mr     *verbs.MR
	cq     *tool.CQWaiter
	srq    *verbs.SRQ
	qps    []*verbs.QP
	ah     []*verbs.AH
	remote []pingpongrec.Dest
	routs  int
	mtu    verbs.MTU
}

func run(cmd *tool.Command, k Kind, args []string) error {
	fs := tool.NewFlagSet(cmd)
	var o options
	o.dev.Register(fs, "g", "gid-idx")
	defSize := 4096
	if k == UD {
		// ibv_ud_pingpong's help says 2048, but since rdma-core v26 it sends 1024 unless
		// -s says otherwise, to fit the default 1024-byte MTU; a peer sending more
		// overruns its 1024+40-byte receives (local length error).
		defSize = 1024
	}
	fs.IntOpt(&o.port, "p", "port", exchange.DefaultPort, "listen on/connect to TCP `PORT`")
	fs.IntOpt(&o.size, "s", "size", defSize, "`SIZE` of message to exchange")
	if k != UD {
		fs.IntOpt(&o.mtu, "m", "mtu", 1024, "path MTU `BYTES`")
	}
	fs.IntOpt(&o.rxDepth, "r", "rx-depth", 500, "`NUMBER` of receives to post at a time")
	fs.IntOpt(&o.iters, "n", "iters", 1000, "`NUMBER` of exchanges")
	fs.IntOpt(&o.sl, "l", "sl", 0, "service level `VALUE`")
	fs.BoolOpt(&o.events, "e", "events", "sleep on CQ events")
	if k == SRQ {
		fs.IntOpt(&o.numQP, "q", "num-qp", 16, "`NUMBER` of QPs")
	} else {
		o.numQP = 1
	}
	fs.BoolOpt(&o.chk, "c", "chk", "validate received buffer")
	if k == RC || k == SRQ {
		fs.BoolOpt(&o.odp, "o", "odp", "use on demand paging (a software device never pins memory: always so)")
	}
	if k == RC {
		fs.BoolOpt(&o.iodp, "O", "iodp", "use implicit on demand paging (not supported: see the README)")
		fs.BoolOpt(&o.prefetch, "P", "prefetch", "prefetch an ODP MR (nothing to fetch: the memory is the process's)")
		fs.BoolOpt(&o.ts, "t", "ts", "get CQE with timestamp (not supported: see the README)")
		fs.BoolOpt(&o.dm, "j", "dm", "use device memory (not supported: see the README)")
		fs.BoolOpt(&o.newSend, "N", "new_send", "use new post send WR API (the Go API has one post path)")
	}
	pos, err := fs.ParseArgs(args)
	if err != nil {
		return err
	}
	server, err := tool.OneArg(pos)
	if err != nil {
		return err
	}
	ctx := &side{kind: k, o: o}
	if err := ctx.check(); err != nil {
		return err
	}
	ctx.ep, err = tool.OpenEndpoint(o.dev)
	if err != nil {
		return err
	}
	defer ctx.ep.Close()
	if k == UD && o.size > ctx.ep.Port.ActiveMTU.Bytes() {
		return fmt.Errorf("requested size %d larger than port MTU (%d)", o.size, ctx.ep.Port.ActiveMTU.Bytes())
	}
	if err := ctx.init(); err != nil {
		return err
	}
	defer ctx.close()
	if err := ctx.connect(server); err != nil {
		return err
	}
	return ctx.loop(server != "")
}

// checkMemoryOpts applies rdma-core's rules for -o -O -P -t -j with its messages. A
// software device reads and writes the process's memory where it lies, never pinned,
// so every MR already behaves as an on-demand one (-o) and a prefetch (-P) has nothing
// to do. It has no device memory (-j) and no completion timestamps (-t), and cannot
// register the whole address space (-O: Go hands the device slices, not addresses):
// there it fails as rdma-core does on a device without the capability.
func (o *options) checkMemoryOpts() error {
	if o.iodp {
		o.odp = true
	}
	switch {
	case o.odp && o.dm:
		return fmt.Errorf("DM memory region can't be on demand")
	case !o.odp && o.prefetch:
		return fmt.Errorf("prefetch is valid only with on-demand memory region")
	case o.iodp:
		return fmt.Errorf("the device doesn't support implicit ODP")
	case o.ts:
		return fmt.Errorf("the device isn't completion timestamp capable")
	case o.dm:
		return fmt.Errorf("device doesn't support dm allocation")
	}
	return nil
}

func (c *side) check() error {
	o := &c.o
	if err := o.checkMemoryOpts(); err != nil {
		return err
	}
	if o.size < 1 || o.size > 1<<23 {
		return fmt.Errorf("invalid size %d: must be 1..8388608 bytes", o.size)
	}
	if o.iters < 1 {
		return fmt.Errorf("invalid iteration count %d", o.iters)
	}
	if o.rxDepth < 1 || o.rxDepth > 1<<14 {
		return fmt.Errorf("invalid rx depth %d", o.rxDepth)
	}
	if c.kind != UD {
		m, err := tool.ParseMTU(o.mtu)
		if err != nil {
			return err
		}
		c.mtu = m
	}
	if c.kind == SRQ {
		if o.numQP < 1 || o.numQP > maxQP {
			return fmt.Errorf("invalid number of QPs %d: must be 1..%d", o.numQP, maxQP)
		}
		if o.numQP > o.rxDepth {
			return fmt.Errorf("rx_depth %d is too small for %d QPs -- must have at least one receive per QP", o.rxDepth, o.numQP)
		}
	}
	if o.sl < 0 || o.sl > 15 {
		return fmt.Errorf("invalid service level %d", o.sl)
	}
	return nil
}

func (c *side) qpType() verbs.QPType {
	switch c.kind {
	case UC:
		return verbs.QPTypeUC
	case UD:
		return verbs.QPTypeUD
	}
	return verbs.QPTypeRC
}

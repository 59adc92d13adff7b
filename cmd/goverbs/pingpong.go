package main

import (
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"time"

	"github.com/goverbs/goverbs/verbs"
)

// The four libibverbs example ping-pongs: rc, uc, ud and srq. They share the flags, the
// exchange and the loop of rdma-core's examples; only the QP type, the bring-up and where
// receives are posted differ.

type ppKind int

const (
	ppRC ppKind = iota
	ppUC
	ppUD
	ppSRQ
)

func (k ppKind) name() string {
	return [...]string{"rc_pingpong", "uc_pingpong", "ud_pingpong", "srq_pingpong"}[k]
}

const (
	wrRecv = 1 // PINGPONG_RECV_WRID
	wrSend = 2 // PINGPONG_SEND_WRID

	udQKey = 0x11111111
	maxQP  = 256 // srq_pingpong's MAX_QP: the number of records it always exchanges
)

func pingpongCmd(k ppKind) func([]string) error {
	return func(args []string) error { return runPingpong(k, args) }
}

type ppOpts struct {
	dev     devOpts
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

type ppCtx struct {
	kind   ppKind
	o      ppOpts
	ep     *endpoint
	pd     *verbs.PD
	mr     *verbs.MR
	cq     *cqWaiter
	srq    *verbs.SRQ
	qps    []*verbs.QP
	ah     []*verbs.AH
	remote []dest
	routs  int
	mtu    verbs.MTU
}

func runPingpong(k ppKind, args []string) error {
	fs := newFlagSet(k.name())
	var o ppOpts
	o.dev.register(fs, "g", "gid-idx")
	defSize := 4096
	if k == ppUD {
		defSize = 2048
	}
	fs.intVar(&o.port, "p", "port", defaultTCPPt, "listen on/connect to TCP `PORT`")
	fs.intVar(&o.size, "s", "size", defSize, "`SIZE` of message to exchange")
	if k != ppUD {
		fs.intVar(&o.mtu, "m", "mtu", 1024, "path MTU `BYTES`")
	}
	fs.intVar(&o.rxDepth, "r", "rx-depth", 500, "`NUMBER` of receives to post at a time")
	fs.intVar(&o.iters, "n", "iters", 1000, "`NUMBER` of exchanges")
	fs.intVar(&o.sl, "l", "sl", 0, "service level `VALUE`")
	fs.boolVar(&o.events, "e", "events", "sleep on CQ events")
	if k == ppSRQ {
		fs.intVar(&o.numQP, "q", "num-qp", 16, "`NUMBER` of QPs")
	} else {
		o.numQP = 1
	}
	fs.boolVar(&o.chk, "c", "chk", "validate received buffer")
	if k == ppRC || k == ppSRQ {
		fs.boolVar(&o.odp, "o", "odp", "use on demand paging (a software device never pins memory: always so)")
	}
	if k == ppRC {
		fs.boolVar(&o.iodp, "O", "iodp", "use implicit on demand paging (not supported: see the README)")
		fs.boolVar(&o.prefetch, "P", "prefetch", "prefetch an ODP MR (nothing to fetch: the memory is the process's)")
		fs.boolVar(&o.ts, "t", "ts", "get CQE with timestamp (not supported: see the README)")
		fs.boolVar(&o.dm, "j", "dm", "use device memory (not supported: see the README)")
		fs.boolVar(&o.newSend, "N", "new_send", "use new post send WR API (the Go API has one post path)")
	}
	pos, err := fs.parse(args)
	if err != nil {
		return err
	}
	server, err := oneArg(k.name(), pos)
	if err != nil {
		return err
	}
	ctx := &ppCtx{kind: k, o: o}
	if err := ctx.check(); err != nil {
		return err
	}
	ctx.ep, err = openEndpoint(o.dev)
	if err != nil {
		return err
	}
	defer ctx.ep.close()
	if k == ppUD && o.size > ctx.ep.port.ActiveMTU.Bytes() {
		return fmt.Errorf("requested size %d larger than port MTU (%d)", o.size, ctx.ep.port.ActiveMTU.Bytes())
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
func (o *ppOpts) checkMemoryOpts() error {
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

func (c *ppCtx) check() error {
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
	if c.kind != ppUD {
		m, err := parseMTU(o.mtu)
		if err != nil {
			return err
		}
		c.mtu = m
	}
	if c.kind == ppSRQ {
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

func (c *ppCtx) qpType() verbs.QPType {
	switch c.kind {
	case ppUC:
		return verbs.QPTypeUC
	case ppUD:
		return verbs.QPTypeUD
	}
	return verbs.QPTypeRC
}

// The buffer's contents follow rdma-core's examples, so that -c works against them in
// either role: rc, uc and ud fill it with 0x7b, srq with 0. With -c the client writes 0 to
// the first byte of every page of the message before its first send, and the server checks
// at the end that the last message it received has them (rdma-core checks only those bytes;
// goverbs also checks that the rest is the fill byte, which holds for both kinds of client).

func (c *ppCtx) fillByte() byte {
	if c.kind == ppSRQ {
		return 0
	}
	return 0x7b
}

// payloadOff is where the message starts in the buffer: behind the GRH area for UD.
func (c *ppCtx) payloadOff() int {
	if c.kind == ppUD {
		return verbs.GRHLen
	}
	return 0
}

// markPages writes the -c pattern into the message (the client does this before sending).
func (c *ppCtx) markPages() {
	buf, off := c.mr.Buf(), c.payloadOff()
	for i := 0; i < c.o.size; i += os.Getpagesize() {
		buf[off+i] = 0
	}
}

// checkPages prints rdma-core's "invalid data in page N" for every page of the received
// message that does not hold the -c pattern.
func (c *ppCtx) checkPages() {
	buf, off, page := c.mr.Buf(), c.payloadOff(), os.Getpagesize()
	for i := 0; i < c.o.size; i += page {
		for j := i; j < min(i+page, c.o.size); j++ {
			want := c.fillByte()
			if j == i {
				want = 0
			}
			if buf[off+j] != want {
				fmt.Printf("invalid data in page %d\n", i/page)
				break
			}
		}
	}
}

// bufLen is the registered buffer: UD receives land behind a 40-byte GRH area.
func (c *ppCtx) bufLen() int {
	if c.kind == ppUD {
		return c.o.size + verbs.GRHLen
	}
	return c.o.size
}

func (c *ppCtx) init() error {
	var err error
	dev := c.ep.dev
	if c.pd, err = dev.AllocPD(); err != nil {
		return fmt.Errorf("couldn't allocate PD: %v", err)
	}
	buf := make([]byte, c.bufLen())
	for i := range buf {
		buf[i] = c.fillByte()
	}
	if c.mr, err = c.pd.RegMR(buf, verbs.AccessLocalWrite); err != nil {
		return fmt.Errorf("couldn't register MR: %v", err)
	}
	if c.cq, err = newCQ(dev, c.o.rxDepth+c.o.numQP, c.o.events, c.o.dev.busy); err != nil {
		return err
	}
	if c.kind == ppSRQ {
		if c.srq, err = c.pd.CreateSRQ(verbs.SRQAttr{MaxWR: uint32(c.o.rxDepth), MaxSGE: 1}); err != nil {
			return fmt.Errorf("couldn't create SRQ: %v", err)
		}
	}
	for i := 0; i < c.o.numQP; i++ {
		attr := verbs.QPInitAttr{Type: c.qpType(), SendCQ: c.cq.cq, RecvCQ: c.cq.cq, SRQ: c.srq,
			Cap: verbs.QPCap{MaxSendWR: 1, MaxRecvWR: uint32(c.o.rxDepth), MaxSendSGE: 1, MaxRecvSGE: 1}}
		if c.srq != nil {
			attr.Cap.MaxRecvWR = 0
		}
		qp, err := c.pd.CreateQP(attr)
		if err != nil {
			return fmt.Errorf("couldn't create %v QP: %v", c.qpType(), err)
		}
		c.qps = append(c.qps, qp)
		c.ep.trackQPs([]*verbs.QP{qp})
		init := &verbs.QPAttr{State: verbs.QPStateInit, Port: uint8(c.o.dev.ibPort)}
		mask := verbs.QPAttrState | verbs.QPAttrPKeyIndex | verbs.QPAttrPort
		if c.kind == ppUD {
			init.QKey = udQKey
			mask |= verbs.QPAttrQKey
		} else {
			mask |= verbs.QPAttrAccessFlags
		}
		if err := qp.Modify(init, mask); err != nil {
			return fmt.Errorf("failed to modify QP to INIT: %v", err)
		}
	}
	if c.kind == ppUD {
		// ibv_ud_pingpong moves its QP to RTS before the exchange.
		qp := c.qps[0]
		if err := qp.Modify(&verbs.QPAttr{State: verbs.QPStateRTR}, verbs.QPAttrState); err != nil {
			return fmt.Errorf("failed to modify QP to RTR: %v", err)
		}
	}
	c.routs, err = c.postRecv(c.o.rxDepth)
	if err != nil {
		return err
	}
	if c.routs < c.o.rxDepth {
		return fmt.Errorf("couldn't post receive (%d)", c.routs)
	}
	return nil
}

func (c *ppCtx) close() {
	c.ep.closeQPs(c.qps)
	if c.srq != nil {
		c.srq.Close()
	}
	if c.cq != nil {
		c.cq.close()
	}
	if c.mr != nil {
		c.mr.Close()
	}
	if c.pd != nil {
		c.pd.Close()
	}
}

// postRecv posts n receives (to the SRQ for srq_pingpong) and returns how many it posted.
func (c *ppCtx) postRecv(n int) (int, error) {
	wr := verbs.RecvWR{ID: wrRecv, SGL: []verbs.SGE{c.mr.SGE(0, c.bufLen())}}
	for i := 0; i < n; i++ {
		var err error
		if c.srq != nil {
			err = c.srq.PostRecv(wr)
		} else {
			err = c.qps[0].PostRecv(wr)
		}
		if err != nil {
			return i, fmt.Errorf("couldn't post receive: %v", err)
		}
	}
	return n, nil
}

func (c *ppCtx) postSend(i int) error {
	off := 0
	if c.kind == ppUD {
		off = verbs.GRHLen
	}
	wr := verbs.SendWR{ID: wrSend, Opcode: verbs.WRSend, Flags: verbs.SendSignaled,
		SGL: []verbs.SGE{c.mr.SGE(off, c.o.size)}}
	if c.kind == ppUD {
		wr.AH, wr.RemoteQPN, wr.RemoteQKey = c.ah[0], c.remote[0].qpn, udQKey
	}
	if err := c.qps[i].PostSend(wr); err != nil {
		return fmt.Errorf("couldn't post send: %v", err)
	}
	return nil
}

func (c *ppCtx) localDests() []dest {
	n := c.o.numQP
	if c.kind == ppSRQ {
		n = maxQP
	}
	out := make([]dest, n)
	for i, qp := range c.qps {
		out[i] = dest{qpn: qp.QPN(), psn: rand.Uint32() & 0xffffff, gid: c.ep.gid}
	}
	return out
}

// printDest prints one address line as the rdma-core examples do. ud_pingpong's local line
// has "PSN 0x...: GID" (a colon, not a comma); every other line has a comma.
func (c *ppCtx) printDest(which string, d dest) {
	sep := ","
	if c.kind == ppUD && which == "local address: " {
		sep = ":"
	}
	fmt.Printf("  %s LID 0x%04x, QPN 0x%06x, PSN 0x%06x%s GID %s\n", which, d.lid, d.qpn, d.psn, sep, gidText(d.gid))
}

// connect runs the exchange and brings every QP to RTS towards its peer.
func (c *ppCtx) connect(server string) error {
	local := c.localDests()
	var conn net.Conn
	var err error
	if server == "" {
		l, err := listen(c.ep.addr, c.o.port)
		if err != nil {
			return err
		}
		for i := range c.qps {
			c.printDest("local address: ", local[i])
		}
		if conn, err = accept(l); err != nil {
			return err
		}
		defer conn.Close()
		if c.remote, err = readRemote(conn, len(local)); err != nil {
			return err
		}
		if err := c.rts(local); err != nil {
			return err
		}
		if err := serverFinish(conn, local); err != nil {
			return err
		}
	} else {
		for i := range c.qps {
			c.printDest("local address: ", local[i])
		}
		if conn, err = dial(server, c.o.port); err != nil {
			return err
		}
		defer conn.Close()
		if c.remote, err = clientExchange(conn, local); err != nil {
			return err
		}
	}
	for i := range c.qps {
		c.printDest("remote address:", c.remote[i])
	}
	if server != "" {
		return c.rts(local)
	}
	return nil
}

// rts moves each QP to RTR and RTS with the rdma-core examples' attributes.
func (c *ppCtx) rts(local []dest) error {
	for i, qp := range c.qps {
		r := c.remote[i]
		if r.gid.IsZero() {
			return fmt.Errorf("the peer sent no GID for QP %d: RoCE needs one (run it with -g 0)", i)
		}
		if r.qpn == 0 {
			return fmt.Errorf("the peer has fewer QPs than this side (%d): use the same -q on both", c.o.numQP)
		}
		av := verbs.AHAttr{DGID: r.gid, SGIDIndex: uint8(c.o.dev.gidIdx), HopLimit: 1, SL: uint8(c.o.sl), Port: uint8(c.o.dev.ibPort)}
		if c.kind == ppUD {
			if err := qp.Modify(&verbs.QPAttr{State: verbs.QPStateRTS, SQPSN: local[i].psn}, verbs.QPAttrState|verbs.QPAttrSQPSN); err != nil {
				return fmt.Errorf("failed to modify QP to RTS: %v", err)
			}
			ah, err := c.pd.CreateAH(av)
			if err != nil {
				return fmt.Errorf("failed to create AH: %v", err)
			}
			c.ah = append(c.ah, ah)
			continue
		}
		rtr := &verbs.QPAttr{State: verbs.QPStateRTR, PathMTU: c.mtu, DestQPN: r.qpn, RQPSN: r.psn,
			MaxDestRdAtomic: 1, MinRNRTimer: 12, AH: av}
		mask := verbs.QPAttrState | verbs.QPAttrAV | verbs.QPAttrPathMTU | verbs.QPAttrDestQPN | verbs.QPAttrRQPSN
		if c.kind != ppUC {
			mask |= verbs.QPAttrMaxDestRdAtomic | verbs.QPAttrMinRNRTimer
		}
		if err := qp.Modify(rtr, mask); err != nil {
			return fmt.Errorf("failed to modify QP to RTR: %v", err)
		}
		rts := &verbs.QPAttr{State: verbs.QPStateRTS, SQPSN: local[i].psn, Timeout: 14, RetryCnt: 7, RNRRetry: 7, MaxRdAtomic: 1}
		mask = verbs.QPAttrState | verbs.QPAttrSQPSN
		if c.kind != ppUC {
			mask |= verbs.QPAttrTimeout | verbs.QPAttrRetryCnt | verbs.QPAttrRNRRetry | verbs.QPAttrMaxQPRdAtomic
		}
		if err := qp.Modify(rts, mask); err != nil {
			return fmt.Errorf("failed to modify QP to RTS: %v", err)
		}
	}
	return nil
}

// loop is the ping-pong of rdma-core's examples: the client sends first; each side sends
// again once its previous send completed and the peer's message arrived.
func (c *ppCtx) loop(client bool) error {
	n := len(c.qps)
	pending := make([]int, n)
	index := make(map[uint32]int, n)
	for i, qp := range c.qps {
		index[qp.QPN()] = i
		pending[i] = wrRecv
	}
	iters := c.o.iters
	scnt, rcnt := 0, 0
	if client {
		if c.o.chk {
			c.markPages()
		}
		for i := range c.qps {
			if err := c.postSend(i); err != nil {
				return err
			}
			pending[i] = wrRecv | wrSend
		}
	}
	start := time.Now()
	low := 1
	if c.kind == ppSRQ {
		low = n
	}
	for rcnt < iters || scnt < iters {
		wcs, err := c.cq.wait()
		if err != nil {
			return err
		}
		for j := range wcs {
			wc := &wcs[j]
			if wc.Status != verbs.WCSuccess {
				return wcError(wc)
			}
			qi, ok := index[wc.QPN]
			if !ok {
				return fmt.Errorf("completion for unknown QPN 0x%06x", wc.QPN)
			}
			switch wc.ID {
			case wrSend:
				scnt++
			case wrRecv:
				c.routs--
				if c.routs <= low {
					k, err := c.postRecv(c.o.rxDepth - c.routs)
					c.routs += k
					if err != nil {
						return err
					}
				}
				rcnt++
			default:
				return fmt.Errorf("completion for unknown wr_id %d", wc.ID)
			}
			pending[qi] &^= int(wc.ID)
			if scnt < iters && pending[qi] == 0 {
				if err := c.postSend(qi); err != nil {
					return err
				}
				pending[qi] = wrRecv | wrSend
			}
		}
	}
	usec := float64(time.Since(start).Microseconds())
	if usec <= 0 {
		usec = 1
	}
	bytes := int64(c.o.size) * int64(iters) * 2
	fmt.Printf("%d bytes in %.2f seconds = %.2f Mbit/sec\n", bytes, usec/1e6, float64(bytes)*8/usec)
	fmt.Printf("%d iters in %.2f seconds = %.2f usec/iter\n", iters, usec/1e6, usec/float64(iters))
	if c.o.chk && !client {
		c.checkPages()
	}
	return nil
}

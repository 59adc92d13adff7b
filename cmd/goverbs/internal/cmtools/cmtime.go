package cmtools

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"

	"github.com/goverbs/goverbs/cm"
	"github.com/goverbs/goverbs/cmd/goverbs/internal/tool"
	"github.com/goverbs/goverbs/verbs"
)

// cmtime is librdmacm's cmtime as Debian ships it (rdma-core v44's
// librdmacm/examples/cmtime.c): the client opens -c RC connections at once, each step
// for all of them before the next, and prints how long each step took; the server
// accepts every connection and tears each down when its peer disconnects, until it is
// stopped. Same flags and table.
//
// Package cm folds rdma_cm's steps into fewer calls, so the rows time the closest Go
// work: "create id" the connection's state, "bind addr" resolving -b, "resolve addr"
// picking the source address that reaches the server (cm.SourceAddr, or -b's),
// "resolve route" the path's address vector (Agent.AHAttr), "create qp" the QP in
// INIT, "connect" Dial (REQ, REP, RTU: Dial repeats the resolution inside), "disconnect"
// Disconnect (DREQ, DREP) and the QP closed, "destroy" the Conn closed.

type cmtimeStep int

const (
	stepCreateID cmtimeStep = iota
	stepBind
	stepResolveAddr
	stepResolveRoute
	stepCreateQP
	stepConnect
	stepDisconnect
	stepDestroy
	stepCount
)

var cmtimeStepName = [stepCount]string{"create id", "bind addr", "resolve addr", "resolve route",
	"create qp", "connect", "disconnect", "destroy"}

// span is one step's start and end.
type span [2]time.Time

func (s *span) ok() bool    { return !s[0].IsZero() && !s[1].IsZero() }
func (s *span) us() float64 { return float64(s[1].Sub(s[0]).Nanoseconds()) / 1e3 }
func (s *span) run(f func() error) error {
	s[0] = time.Now()
	err := f()
	s[1] = time.Now()
	return err
}

type cmtimeOpts struct {
	server, bind       string
	port               int
	connections        int
	retries, timeoutMs int
	pcap               string
	stats              bool
}

// cmtimeNode is one connection.
type cmtimeNode struct {
	times [stepCount]span
	src   netip.Addr
	qp    *verbs.QP
	conn  *cm.Conn
	err   error
}

func RunCmtime(cmd *tool.Command, args []string) error {
	o := cmtimeOpts{}
	fs := tool.NewFlagSet(cmd)
	fs.ArgsUsage = ""
	fs.StringOpt(&o.server, "s", "server", "", "server `ADDRESS` (client mode)")
	fs.StringOpt(&o.bind, "b", "bind", "", "bind `ADDRESS`: the local software device's")
	fs.IntOpt(&o.connections, "c", "connections", 100, "`CONNECTIONS`")
	fs.IntOpt(&o.port, "p", "port", 7471, "`PORT`")
	fs.IntOpt(&o.retries, "r", "retries", 2, "transport `RETRIES`")
	fs.IntOpt(&o.timeoutMs, "t", "timeout", 2000, "resolve timeout in `MS`")
	sideFlags(fs, &o.pcap, &o.stats)
	if err := tool.ParseFlagsOnly(fs, args); err != nil {
		return err
	}
	switch {
	case o.connections < 1:
		return errors.New("connections must be at least 1")
	case o.port <= 0 || o.port > 65535:
		return fmt.Errorf("invalid port %d", o.port)
	case o.retries < 0 || o.retries > 7 || o.timeoutMs <= 0:
		return errors.New("retries must be 0 to 7, the timeout positive")
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if o.server == "" {
		return cmtimeServer(ctx, &o)
	}
	return cmtimeClient(ctx, &o)
}

// cmtimeServer accepts connections until ctx ends, each with a QP of its own, and
// disconnects and destroys each when its peer disconnects (cmtime's req and disc
// handler threads).
func cmtimeServer(ctx context.Context, o *cmtimeOpts) error {
	side, err := cmtimeOpen(openServerSide(o.bind, o.pcap, o.stats))
	if err != nil {
		return err
	}
	defer side.close()
	pd, cq := side.pd, side.cq
	l, err := side.agent.Listen(uint16(o.port), 0)
	if err != nil {
		return fmt.Errorf("failure trying to listen: %v", err)
	}
	// cmtime's server prints nothing until it ends; goverbs says when it listens.
	fmt.Printf("cmtime: listening on %v\n", l.Addr())
	var wg sync.WaitGroup
	defer wg.Wait()
	defer l.Close()
	for {
		req, err := l.Accept(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			qp, err := cmtimeQP(pd, cq)
			if err != nil {
				fmt.Println("failing connection request")
				req.Reject(nil)
				return
			}
			defer qp.Close()
			conn, err := req.Accept(ctx, &cm.Param{QP: qp, ResponderResources: 1, InitiatorDepth: 1})
			if err != nil {
				fmt.Printf("failure accepting: %v\n", err)
				return
			}
			defer conn.Close()
			select {
			case <-conn.Done():
			case <-ctx.Done():
			}
			dctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			conn.Disconnect(dctx, nil)
			cancel()
		}()
	}
}

// cmtimeSide is a side with the PD and the one CQ all its QPs share (cmtime's QPs
// post nothing).
type cmtimeSide struct {
	*cmSide
	pd *verbs.PD
	cq *verbs.CQ
}

// cmtimeOpen adds the PD and CQ to a side just opened (or passes on its error).
func cmtimeOpen(side *cmSide, err error) (*cmtimeSide, error) {
	if err != nil {
		return nil, err
	}
	s := &cmtimeSide{cmSide: side}
	if s.pd, err = side.dev.AllocPD(); err == nil {
		if s.cq, err = side.dev.CreateCQ(1, nil); err == nil {
			return s, nil
		}
		s.pd.Close()
	}
	side.close()
	return nil, err
}

func (s *cmtimeSide) close() {
	s.cq.Close()
	s.pd.Close()
	s.cmSide.close()
}

// cmtimeQP is rdma_create_qp with cmtime's attributes: one WR and SGE each way, left in
// INIT for the CM.
func cmtimeQP(pd *verbs.PD, cq *verbs.CQ) (*verbs.QP, error) {
	qp, err := pd.CreateQP(verbs.QPInitAttr{Type: verbs.QPTypeRC, SendCQ: cq, RecvCQ: cq,
		Cap: verbs.QPCap{MaxSendWR: 1, MaxRecvWR: 1, MaxSendSGE: 1, MaxRecvSGE: 1}})
	if err != nil {
		return nil, err
	}
	if err := cm.InitQP(qp); err != nil {
		qp.Close()
		return nil, err
	}
	return qp, nil
}

func cmtimeClient(ctx context.Context, o *cmtimeOpts) error {
	var total [stepCount]span
	nodes := make([]*cmtimeNode, o.connections)
	fmt.Println("creating id")
	total[stepCreateID].run(func() error {
		for i := range nodes {
			n := new(cmtimeNode)
			n.times[stepCreateID][0] = time.Now()
			nodes[i] = n
			n.times[stepCreateID][1] = time.Now()
		}
		return nil
	})
	cside, dst, err := openClientSide(o.server, o.bind, o.pcap, o.stats)
	side, err := cmtimeOpen(cside, err)
	if err != nil {
		return err
	}
	defer side.close()
	pd, cq := side.pd, side.cq
	defer func() {
		for _, n := range nodes {
			if n.conn != nil {
				n.conn.Close()
			}
			if n.qp != nil {
				n.qp.Close()
			}
		}
	}()
	// each runs f on every node still without error, all at once (cmtime posts each
	// step's asynchronous calls for all its ids, then waits for their events).
	each := func(s cmtimeStep, parallel bool, f func(n *cmtimeNode) error) {
		var wg sync.WaitGroup
		total[s].run(func() error {
			for _, n := range nodes {
				if n.err != nil {
					continue
				}
				one := func() {
					if err := n.times[s].run(func() error { return f(n) }); err != nil {
						n.err = err
						fmt.Println(err)
					}
				}
				if !parallel {
					one()
					continue
				}
				wg.Add(1)
				go func() { defer wg.Done(); one() }()
			}
			wg.Wait()
			return nil
		})
	}
	if o.bind != "" {
		fmt.Println("binding source address")
		each(stepBind, false, func(n *cmtimeNode) (err error) {
			if n.src, err = tool.ResolveHost(o.bind); err != nil {
				return fmt.Errorf("failure bind addr: %v", err)
			}
			return nil
		})
	}
	timeout := time.Duration(o.timeoutMs) * time.Millisecond
	fmt.Println("resolving address")
	each(stepResolveAddr, true, func(n *cmtimeNode) (err error) {
		if !n.src.IsValid() {
			n.src, err = cm.SourceAddr(dst)
		}
		if err != nil {
			return fmt.Errorf("RDMA_CM_EVENT_ADDR_ERROR, error: %v", err)
		}
		return nil
	})
	fmt.Println("resolving route")
	each(stepResolveRoute, true, func(n *cmtimeNode) error {
		side.agent.AHAttr(dst)
		return nil
	})
	fmt.Println("creating qp")
	each(stepCreateQP, false, func(n *cmtimeNode) (err error) {
		if n.qp, err = cmtimeQP(pd, cq); err != nil {
			return fmt.Errorf("failure creating qp: %v", err)
		}
		return nil
	})
	fmt.Println("connecting")
	raddr := netip.AddrPortFrom(dst, uint16(o.port))
	each(stepConnect, true, func(n *cmtimeNode) (err error) {
		// rdma_connect's own wait is the CM's retries of its REQ; the timeout bounds
		// the whole of it generously
		cctx, cancel := context.WithTimeout(ctx, 10*timeout+30*time.Second)
		defer cancel()
		n.conn, err = side.agent.Dial(cctx, raddr, &cm.Param{QP: n.qp, ResponderResources: 1, InitiatorDepth: 1,
			RetryCount: uint8(o.retries)})
		var rej *cm.RejectError
		if errors.As(err, &rej) {
			return fmt.Errorf("event: RDMA_CM_EVENT_REJECTED, error: %d", rej.Reason)
		} else if err != nil {
			return fmt.Errorf("event: RDMA_CM_EVENT_CONNECT_ERROR, error: %v", err)
		}
		return nil
	})
	fmt.Println("disconnecting")
	each(stepDisconnect, true, func(n *cmtimeNode) error {
		dctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		n.conn.Disconnect(dctx, nil)
		n.qp.Close()
		n.qp = nil
		return nil
	})
	fmt.Println("destroying id")
	total[stepDestroy].run(func() error {
		for _, n := range nodes {
			n.times[stepDestroy].run(func() error {
				if n.conn != nil {
					n.conn.Close()
					n.conn = nil
				}
				return nil
			})
		}
		return nil
	})
	cmtimeShow(nodes, &total, o.bind != "")
	failed := 0
	for _, n := range nodes {
		if n.err != nil {
			failed++
		}
	}
	if failed > 0 {
		return fmt.Errorf("%d of %d connections failed", failed, len(nodes))
	}
	return nil
}

// cmtimeShow prints cmtime's table: each step's total time over all connections, the
// longest and shortest of one connection's, and the total per connection. The bind row
// only with -b.
func cmtimeShow(nodes []*cmtimeNode, total *[stepCount]span, bind bool) {
	fmt.Println("step              total ms     max ms     min us  us / conn")
	for s := range stepCount {
		if s == stepBind && !bind {
			continue
		}
		maxUs, minUs := 0.0, 999999999.0
		for _, n := range nodes {
			if t := &n.times[s]; t.ok() {
				maxUs, minUs = max(maxUs, t.us()), min(minUs, t.us())
			}
		}
		us := 0.0
		if total[s].ok() {
			us = total[s].us()
		}
		fmt.Printf("%-13s: %11.2f%11.2f%11.2f%11.2f\n", cmtimeStepName[s], us/1000, maxUs/1000, minUs, us/float64(len(nodes)))
	}
}

package cmtools

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"time"

	"github.com/goverbs/goverbs/cm"
	"github.com/goverbs/goverbs/cmd/goverbs/internal/tool"
	"github.com/goverbs/goverbs/verbs"
)

// ucmatose is librdmacm's cmatose (installed as ucmatose): -c RC connections through
// the connection manager, -C messages of -S bytes from the server on each, as many
// back from the client, then the server disconnects them all. Same flags and output as
// rdma-core's librdmacm/examples/cmatose.c.

// rcNode is one of cmatose's cmatest_nodes: an RC QP with a send and a receive CQ
// (sq_sig_all) and one message buffer.
type rcNode struct {
	pd     *verbs.PD
	sendCQ *tool.CQWaiter
	recvCQ *tool.CQWaiter
	qp     *verbs.QP
	mr     *verbs.MR
	conn   *cm.Conn
}

func RunUcmatose(cmd *tool.Command, args []string) error {
	t := cmtest{name: "ucmatose", portSpace: "tcp", port: 7471, portFlag: true, client: cmatoseClient, server: cmatoseServer}
	return t.run(cmd, args)
}

// newRCNode is init_node and post_recvs: the QP in INIT with its receives posted, as
// rdma_create_qp leaves it for the CM.
func newRCNode(o *cmtestOpts, dev *verbs.Device) (*rcNode, error) {
	n := &rcNode{}
	var err error
	if n.pd, err = dev.AllocPD(); err != nil {
		return nil, errors.New("cmatose: unable to allocate PD")
	}
	cqe := max(o.count, 1)
	if n.sendCQ, err = tool.NewCQ(dev, cqe, false, false); err != nil {
		return nil, errors.New("cmatose: unable to create CQ")
	}
	if n.recvCQ, err = tool.NewCQ(dev, cqe, false, false); err != nil {
		return nil, errors.New("cmatose: unable to create CQ")
	}
	n.qp, err = n.pd.CreateQP(verbs.QPInitAttr{Type: verbs.QPTypeRC, SendCQ: n.sendCQ.CQ, RecvCQ: n.recvCQ.CQ, SigAll: true,
		Cap: verbs.QPCap{MaxSendWR: uint32(cqe), MaxRecvWR: uint32(cqe), MaxSendSGE: 1, MaxRecvSGE: 1}})
	if err != nil {
		return nil, fmt.Errorf("cmatose: unable to create QP: %v", err)
	}
	if err := cm.InitQP(n.qp); err != nil {
		return nil, err
	}
	if o.count == 0 {
		return n, nil
	}
	if n.mr, err = n.pd.RegMR(pages(pageBuf(o.size)), verbs.AccessLocalWrite); err != nil {
		return nil, errors.New("failed to reg MR")
	}
	for range o.count {
		if err := n.qp.PostRecv(verbs.RecvWR{ID: 1, SGL: []verbs.SGE{n.mr.SGE(0, o.size)}}); err != nil {
			return nil, fmt.Errorf("failed to post receives: %v", err)
		}
	}
	return n, nil
}

func (n *rcNode) close() {
	if n.conn != nil {
		n.conn.Close()
	}
	if n.mr != nil {
		n.mr.Close()
	}
	if n.qp != nil {
		n.qp.Close()
	}
	for _, w := range []*tool.CQWaiter{n.sendCQ, n.recvCQ} {
		if w != nil {
			w.Close()
		}
	}
	if n.pd != nil {
		n.pd.Close()
	}
}

func (n *rcNode) postSends(o *cmtestOpts) error {
	for range o.count {
		if err := n.qp.PostSend(verbs.SendWR{ID: 2, Opcode: verbs.WRSend, SGL: []verbs.SGE{n.mr.SGE(0, o.size)}}); err != nil {
			return fmt.Errorf("failed to post sends: %v", err)
		}
	}
	return nil
}

func cmatoseServer(ctx context.Context, o *cmtestOpts) error {
	side, err := openServerSide(o.bind, o.pcap, o.stats)
	if err != nil {
		return err
	}
	defer side.close()
	l, err := side.agent.Listen(uint16(o.port), 0)
	if err != nil {
		return fmt.Errorf("cmatose: failure trying to listen: %v", err)
	}
	defer l.Close()
	fmt.Println("cmatose: starting server") // once listening: a client may come at once
	var nodes cmtestNodes[*rcNode]
	defer func() { nodes.close() }()
	err = nodes.accept(ctx, "cmatose", l, o.connections,
		func() (*rcNode, error) { return newRCNode(o, side.dev) },
		func(req *cm.Request, n *rcNode) (err error) {
			n.conn, err = req.Accept(ctx, &cm.Param{QP: n.qp, ResponderResources: 1, InitiatorDepth: 1})
			return err
		})
	if err != nil {
		return err
	}
	if o.count > 0 {
		fmt.Println("initiating data transfers")
		if err := nodes.each(func(n *rcNode) error { return n.postSends(o) }); err != nil {
			return err
		}
		fmt.Println("completing sends")
		if err := nodes.each(func(n *rcNode) error { return pollN("cmatose", n.sendCQ, o.count, nil) }); err != nil {
			return err
		}
		fmt.Println("receiving data transfers")
		if err := nodes.each(func(n *rcNode) error { return pollN("cmatose", n.recvCQ, o.count, nil) }); err != nil {
			return err
		}
		fmt.Println("data transfers complete")
	}
	fmt.Println("cmatose: disconnecting")
	for _, n := range nodes {
		dctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		n.conn.Disconnect(dctx, nil)
		cancel()
	}
	fmt.Println("disconnected")
	return nil
}

func cmatoseClient(ctx context.Context, o *cmtestOpts) error {
	fmt.Println("cmatose: starting client")
	side, dst, err := openClientSide(o.server, o.bind, o.pcap, o.stats)
	if err != nil {
		return err
	}
	defer side.close()
	fmt.Println("cmatose: connecting")
	var nodes cmtestNodes[*rcNode]
	defer func() { nodes.close() }()
	err = nodes.connect(o.connections,
		func() (*rcNode, error) { return newRCNode(o, side.dev) },
		func(n *rcNode) (err error) {
			n.conn, err = side.agent.Dial(ctx, netip.AddrPortFrom(dst, uint16(o.port)),
				&cm.Param{QP: n.qp, ResponderResources: 1, InitiatorDepth: 1, RetryCount: 5})
			var rej *cm.RejectError
			if errors.As(err, &rej) {
				return fmt.Errorf("cmatose: event: RDMA_CM_EVENT_REJECTED, error: %d", rej.Reason)
			} else if err != nil {
				return fmt.Errorf("cmatose: failure connecting: %v", err)
			}
			return nil
		})
	if err != nil {
		return err
	}
	if o.count > 0 {
		fmt.Println("receiving data transfers")
		if err := nodes.each(func(n *rcNode) error { return pollN("cmatose", n.recvCQ, o.count, nil) }); err != nil {
			return err
		}
		fmt.Println("sending replies")
		if err := nodes.each(func(n *rcNode) error { return n.postSends(o) }); err != nil {
			return err
		}
		fmt.Println("data transfers complete")
	}
	// The server disconnects (cmatose's client waits for its DISCONNECTED events).
	for _, n := range nodes {
		select {
		case <-n.conn.Done():
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(60 * time.Second):
			return errors.New("cmatose: the server never disconnected")
		}
	}
	return nil
}

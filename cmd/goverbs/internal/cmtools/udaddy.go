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

// udaddy is librdmacm's udaddy: UD QPs found through the connection manager's service
// ID resolution (SIDR), then message_count datagrams from the client, each a SEND WITH
// IMMEDIATE carrying the sender's QPN, and as many replies from the server, which
// learns where to reply from the first datagram. Same flags and output as rdma-core's
// librdmacm/examples/udaddy.c.

const udaddyPort = 7174 // udaddy's fixed port in the UDP port space

// udNode is one of udaddy's cmatest_nodes: a UD QP and its message buffer.
type udNode struct {
	pd      *verbs.PD
	cq      *tool.CQWaiter
	qp      *verbs.QP
	mem     []byte // GRH area + message
	mr      *verbs.MR
	ah      *verbs.AH
	remote  uint32 // QPN
	qkey    uint32
	sends   int // signaled sends whose completions are still due
	replyTo netip.Addr
	agent   *cm.Agent // the agent replyTo's request came through, which knows its GID index
}

func RunUdaddy(cmd *tool.Command, args []string) error {
	t := cmtest{name: "udaddy", portSpace: "udp", port: udaddyPort, portFlag: false, client: udaddyClient, server: udaddyServer}
	return t.run(cmd, args)
}

func newUDNode(o *cmtestOpts, dev *verbs.Device) (*udNode, error) {
	pa, err := dev.QueryPort(1)
	if err != nil {
		return nil, err
	}
	if o.count > 0 && o.size > pa.ActiveMTU.Bytes() {
		return nil, fmt.Errorf("udaddy: message_size %d is larger than active mtu %d", o.size, pa.ActiveMTU.Bytes())
	}
	n := &udNode{}
	if n.pd, err = dev.AllocPD(); err != nil {
		return nil, errors.New("udaddy: unable to allocate PD")
	}
	if n.cq, err = tool.NewCQ(dev, 2*max(o.count, 1), false, false); err != nil {
		return nil, errors.New("udaddy: unable to create CQ")
	}
	n.qp, err = n.pd.CreateQP(verbs.QPInitAttr{Type: verbs.QPTypeUD, SendCQ: n.cq.CQ, RecvCQ: n.cq.CQ,
		Cap: verbs.QPCap{MaxSendWR: uint32(max(o.count, 1)), MaxRecvWR: uint32(max(o.count, 1)), MaxSendSGE: 1, MaxRecvSGE: 1}})
	if err != nil {
		return nil, fmt.Errorf("udaddy: unable to create QP: %v", err)
	}
	if err := cm.ReadyUD(n.qp); err != nil { // as rdma_create_qp leaves a UD id's QP
		return nil, err
	}
	n.mem = pageBuf(40 + o.size)
	for i := range n.mem[40:] {
		n.mem[40+i] = byte(i)
	}
	if n.mr, err = n.pd.RegMR(pages(n.mem), verbs.AccessLocalWrite); err != nil {
		return nil, errors.New("failed to reg MR")
	}
	for range o.count {
		if err := n.qp.PostRecv(verbs.RecvWR{ID: 1, SGL: []verbs.SGE{n.mr.SGE(0, len(n.mem))}}); err != nil {
			return nil, fmt.Errorf("failed to post receives: %v", err)
		}
	}
	return n, nil
}

func (n *udNode) close() {
	if n.ah != nil {
		n.ah.Close()
	}
	if n.mr != nil {
		n.mr.Close()
	}
	if n.qp != nil {
		n.qp.Close()
	}
	if n.cq != nil {
		n.cq.Close()
	}
	if n.pd != nil {
		n.pd.Close()
	}
}

// postSends sends count datagrams of size bytes, each with this QP's number as the
// immediate data; signaled or not as udaddy's two sides do.
func (n *udNode) postSends(o *cmtestOpts, signaled bool) error {
	var flags verbs.SendFlags
	if signaled {
		flags = verbs.SendSignaled
		n.sends = o.count
	}
	for range o.count {
		if err := n.qp.PostSend(verbs.SendWR{ID: 2, Opcode: verbs.WRSendWithImm, Flags: flags, Imm: n.qp.QPN(),
			SGL: []verbs.SGE{n.mr.SGE(40, o.size)}, AH: n.ah, RemoteQPN: n.remote, RemoteQKey: n.qkey}); err != nil {
			return fmt.Errorf("failed to post sends: %v", err)
		}
	}
	return nil
}

// poll waits for count completions (poll_cqs). On the server, the first received
// datagram says where the replies go: its immediate data is the client's QPN.
func (n *udNode) poll(o *cmtestOpts, server bool) error {
	return pollN("udaddy", n.cq, o.count, func(wc *verbs.WC) error {
		if server && n.ah == nil && wc.Opcode == verbs.WCRecv {
			ah, err := n.pd.CreateAH(n.agent.AHAttr(n.replyTo))
			if err != nil {
				return errors.New("udaddy: failed to create reply AH")
			}
			n.ah, n.remote, n.qkey = ah, wc.Imm, n.qp.Query().QKey
		}
		return nil
	})
}

func udaddyServer(ctx context.Context, o *cmtestOpts) error {
	side, err := openServerSide(o.bind, o.pcap, o.stats)
	if err != nil {
		return err
	}
	defer side.close()
	l, err := side.agent.ListenUD(udaddyPort, 0)
	if err != nil {
		return fmt.Errorf("udaddy: failure trying to listen: %v", err)
	}
	defer l.Close()
	fmt.Println("udaddy: starting server") // once listening: a client may come at once
	var nodes cmtestNodes[*udNode]
	defer func() { nodes.close() }()
	err = nodes.accept(ctx, "udaddy", l, o.connections,
		func() (*udNode, error) { return newUDNode(o, side.dev) },
		func(req *cm.Request, n *udNode) error {
			n.replyTo, n.agent = req.Remote.Addr(), side.agent
			return req.AcceptUD(&cm.Param{QP: n.qp})
		})
	if err != nil || o.count == 0 {
		return err
	}
	poll := func(n *udNode) error { return n.poll(o, true) }
	fmt.Println("receiving data transfers")
	if err := nodes.each(poll); err != nil {
		return err
	}
	fmt.Println("sending replies")
	if err := nodes.each(func(n *udNode) error { return n.postSends(o, true) }); err != nil {
		return err
	}
	if err := nodes.each(poll); err != nil {
		return err
	}
	fmt.Println("data transfers complete")
	return nil
}

func udaddyClient(ctx context.Context, o *cmtestOpts) error {
	fmt.Println("udaddy: starting client")
	side, dst, err := openClientSide(o.server, o.bind, o.pcap, o.stats)
	if err != nil {
		return err
	}
	defer side.close()
	fmt.Println("udaddy: connecting")
	var nodes cmtestNodes[*udNode]
	defer func() { nodes.close() }()
	err = nodes.connect(o.connections,
		func() (*udNode, error) { return newUDNode(o, side.dev) },
		func(n *udNode) error {
			rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
			defer cancel()
			d, err := side.agent.ResolveUD(rctx, netip.AddrPortFrom(dst, udaddyPort), &cm.Param{QP: n.qp})
			var serr *cm.SIDRError
			if errors.As(err, &serr) {
				return fmt.Errorf("udaddy: event: RDMA_CM_EVENT_UNREACHABLE, error: %d", serr.Status)
			} else if err != nil {
				return fmt.Errorf("udaddy: failure connecting: %v", err)
			}
			n.ah, n.remote, n.qkey = d.AH, d.QPN, d.QKey
			return nil
		})
	if err != nil || o.count == 0 {
		return err
	}
	fmt.Println("initiating data transfers")
	if err := nodes.each(func(n *udNode) error { return n.postSends(o, false) }); err != nil {
		return err
	}
	fmt.Println("receiving data transfers")
	if err := nodes.each(func(n *udNode) error { return n.poll(o, false) }); err != nil {
		return err
	}
	fmt.Println("data transfers complete")
	return nil
}

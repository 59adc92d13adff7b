package cmtools

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/signal"
	"strconv"
	"time"

	"github.com/goverbs/goverbs/cm"
	"github.com/goverbs/goverbs/cmd/goverbs/internal/tool"
	"github.com/goverbs/goverbs/verbs"
)

// mckey is librdmacm's mckey: UD QPs join a multicast group through the connection
// manager (rdma_join_multicast), then a sender sends message_count datagrams to the
// group, each a SEND WITH IMMEDIATE carrying the sender's QPN, and every receiver waits
// for as many. Same flags and output as rdma-core's librdmacm/examples/mckey.c; on
// RoCEv2 the group is IP multicast (see package cm's JoinMulticast).

// rdmaPSUDP is RDMA_PS_UDP, mckey's default port space and the only one RoCE has
// multicast Q_Keys for (RDMA_PS_IPOIB's come from an InfiniBand SA).
const rdmaPSUDP = 0x0111

type mckeyOpts struct {
	group       string // -m, or -M's MGID
	unmapped    bool   // -M
	bind        string
	sender      bool
	connections int
	count, size int
	portSpace   string
	sendOnly    bool
	noLoopback  bool
	settle      time.Duration
	pcap        string
	stats       bool
}

// mcNode is one of mckey's cmatest_nodes: a UD QP that joined the group.
type mcNode struct {
	pd  *verbs.PD
	cq  *tool.CQWaiter
	qp  *verbs.QP
	mem []byte // GRH area + message
	mr  *verbs.MR
	mc  *cm.Multicast
}

func RunMckey(cmd *tool.Command, args []string) error {
	var o mckeyOpts
	var unmapped string
	fs := tool.NewFlagSet(cmd)
	fs.ArgsUsage = ""
	fs.StringOpt(&o.group, "m", "multicast", "", "multicast `ADDRESS` to join")
	fs.StringOpt(&unmapped, "M", "unmapped", "", "unmapped multicast `MGID` to join (replaces -m, requires -b)")
	fs.BoolOpt(&o.sender, "s", "sender", "send datagrams to the multicast group")
	fs.StringOpt(&o.bind, "b", "bind", "", "bind `ADDRESS`: the local software device's")
	fs.IntOpt(&o.connections, "c", "connections", 1, "the number of QPs (`CONNECTIONS`) to join the group")
	fs.IntOpt(&o.count, "C", "count", 10, "message `COUNT` per QP")
	fs.IntOpt(&o.size, "S", "size", 100, "message `SIZE`")
	fs.StringOpt(&o.portSpace, "p", "port-space", "0x0111", "port `SPACE`: 0x0111 (RDMA_PS_UDP)")
	fs.BoolOpt(&o.sendOnly, "o", "send-only", "join as a send-only full member")
	fs.BoolOpt(&o.noLoopback, "l", "no-loopback", "join without multicast loopback: a QP does not receive its own sends")
	fs.DurationVar(&o.settle, "settle", 3*time.Second, "`DURATION` of the pause between joining and the transfers (mckey's fixed 3 s)")
	sideFlags(fs, &o.pcap, &o.stats)
	pos, err := fs.ParseArgs(args)
	if err != nil {
		return err
	}
	if unmapped != "" {
		o.group, o.unmapped = unmapped, true
	}
	ps, perr := strconv.ParseInt(o.portSpace, 0, 32)
	switch {
	case len(pos) > 0:
		return fmt.Errorf("unexpected argument %q (the group goes after -m)", pos[0])
	case o.group == "":
		return errors.New("a multicast address is required (-m ADDRESS)")
	case o.unmapped && o.bind == "":
		return errors.New("unmapped multicast address requires binding to source address")
	case perr != nil || ps != rdmaPSUDP:
		return fmt.Errorf("port space %q: only %#x (RDMA_PS_UDP) is supported", o.portSpace, rdmaPSUDP)
	case o.connections < 1 || o.count < 0 || o.size < 0:
		return errors.New("connections must be at least 1, count and size not negative")
	}
	if o.size == 0 {
		o.count = 0
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	status := mckey(ctx, &o)
	fmt.Println("test complete")
	code := 0
	if status != nil {
		code = -1
	}
	fmt.Printf("return status %d\n", code)
	return status
}

// mckeyGroup is the group -m or -M names: an IP address (a host name too, as
// getaddrinfo takes one) or, unmapped, a GID written as an IPv6 address.
func mckeyGroup(o *mckeyOpts) (netip.Addr, error) {
	if o.unmapped {
		g, err := netip.ParseAddr(o.group)
		if err != nil || !g.Is6() {
			return netip.Addr{}, fmt.Errorf("mckey: invalid MGID %q", o.group)
		}
		return verbs.GID(g.As16()).Addr(), nil
	}
	return tool.ResolveHost(o.group)
}

func mckey(ctx context.Context, o *mckeyOpts) error {
	role := "server"
	if o.sender {
		role = "client"
	}
	fmt.Printf("mckey: starting %s\n", role)
	group, err := mckeyGroup(o)
	if err != nil {
		return err
	}
	// Without -b, rdma_resolve_addr binds to the address a route to the group leaves from.
	var src netip.Addr
	if o.bind != "" {
		src, err = tool.ResolveHost(o.bind)
	} else {
		src, err = cm.SourceAddr(group)
	}
	if err != nil {
		return err
	}
	side, err := openCMSide(src, o.pcap, o.stats)
	if err != nil {
		return err
	}
	defer side.close()
	fmt.Println("mckey: joining")
	var nodes cmtestNodes[*mcNode]
	defer func() { nodes.close() }()
	err = nodes.connect(o.connections, func() (*mcNode, error) { return newMcNode(o, side.dev) },
		func(n *mcNode) error { return n.join(o, side.agent, group) })
	if err != nil {
		return err
	}
	// mckey pauses "to give SM chance to configure switches"; on RoCE it gives the
	// receivers started before a sender time to join.
	select {
	case <-time.After(o.settle):
	case <-ctx.Done():
		return ctx.Err()
	}
	if o.count > 0 {
		if o.sender {
			fmt.Println("initiating data transfers")
			if err := nodes.each(func(n *mcNode) error { return n.postSends(o) }); err != nil {
				return err
			}
		} else {
			fmt.Println("receiving data transfers")
			if err := nodes.each(func(n *mcNode) error { return pollN("mckey", n.cq, o.count, nil) }); err != nil {
				return err
			}
		}
		fmt.Println("data transfers complete")
	}
	return nodes.each(func(n *mcNode) error {
		if err := n.mc.Leave(); err != nil {
			return fmt.Errorf("mckey: failure leaving: %v", err)
		}
		return nil
	})
}

func newMcNode(o *mckeyOpts, dev *verbs.Device) (*mcNode, error) {
	pa, err := dev.QueryPort(1)
	if err != nil {
		return nil, err
	}
	if o.count > 0 && o.size > pa.ActiveMTU.Bytes() {
		return nil, fmt.Errorf("mckey: message_size %d is larger than active mtu %d", o.size, pa.ActiveMTU.Bytes())
	}
	n := &mcNode{}
	if n.pd, err = dev.AllocPD(); err != nil {
		return nil, errors.New("mckey: unable to allocate PD")
	}
	if n.cq, err = tool.NewCQ(dev, 2*max(o.count, 1), false, false); err != nil {
		return nil, errors.New("mckey: unable to create CQ")
	}
	depth := uint32(max(o.count, 1))
	n.qp, err = n.pd.CreateQP(verbs.QPInitAttr{Type: verbs.QPTypeUD, SendCQ: n.cq.CQ, RecvCQ: n.cq.CQ,
		Cap: verbs.QPCap{MaxSendWR: depth, MaxRecvWR: depth, MaxSendSGE: 1, MaxRecvSGE: 1}, BlockSelfMcastLoopback: o.noLoopback})
	if err != nil {
		return nil, fmt.Errorf("mckey: unable to create QP: %v", err)
	}
	n.mem = pageBuf(verbs.GRHLen + o.size)
	if n.mr, err = n.pd.RegMR(pages(n.mem), verbs.AccessLocalWrite); err != nil {
		return nil, errors.New("failed to reg MR")
	}
	if !o.sender {
		if err := cm.ReadyUD(n.qp); err != nil { // receives may be posted from INIT on
			return nil, err
		}
		for range o.count {
			if err := n.qp.PostRecv(verbs.RecvWR{ID: 1, SGL: []verbs.SGE{n.mr.SGE(0, len(n.mem))}}); err != nil {
				return nil, fmt.Errorf("failed to post receives: %v", err)
			}
		}
	}
	return n, nil
}

// join joins the group and prints what the join event said, as join_handler does.
func (n *mcNode) join(o *mckeyOpts, a *cm.Agent, group netip.Addr) error {
	mc, err := a.JoinMulticast(group, &cm.JoinParam{QP: n.qp, SendOnly: o.sendOnly})
	if err != nil {
		return fmt.Errorf("mckey: failure joining: %v", err)
	}
	n.mc = mc
	// The MGID as inet_ntop(AF_INET6) writes it; RoCE has no multicast LID and SL 0.
	fmt.Printf("mckey: joined dgid: %s mlid 0x0 sl 0\n", netip.AddrFrom16(mc.MGID))
	return nil
}

// postSends sends count datagrams of size bytes to the group, each with this QP's number
// as the immediate data. mckey's are unsignaled and it exits once they are posted; the
// last one here is signaled and waited for, so that all have left before the QP closes.
func (n *mcNode) postSends(o *mckeyOpts) error {
	for i := range o.count {
		var flags verbs.SendFlags
		if i == o.count-1 {
			flags = verbs.SendSignaled
		}
		if err := n.qp.PostSend(verbs.SendWR{ID: 2, Opcode: verbs.WRSendWithImm, Flags: flags, Imm: n.qp.QPN(),
			SGL: []verbs.SGE{n.mr.SGE(verbs.GRHLen, o.size)}, AH: n.mc.AH, RemoteQPN: n.mc.QPN, RemoteQKey: n.mc.QKey}); err != nil {
			return fmt.Errorf("failed to post sends: %v", err)
		}
	}
	return pollN("mckey", n.cq, 1, nil)
}

func (n *mcNode) close() {
	if n.mc != nil {
		n.mc.Leave()
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

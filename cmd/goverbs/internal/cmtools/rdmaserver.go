package cmtools

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/signal"
	"time"

	"github.com/goverbs/goverbs/cm"
	"github.com/goverbs/goverbs/cmd/goverbs/internal/tool"
	"github.com/goverbs/goverbs/verbs"
)

// rdma_server and rdma_client are librdmacm's smallest examples (rdma-core's
// librdmacm/examples/rdma_server.c and rdma_client.c): the client connects with
// rdma_create_ep's defaults, posts one 16-byte receive, sends 16 bytes and waits for
// the reply; the server accepts one connection, receives, sends back and ends. Both
// print "NAME: start" and "NAME: end STATUS" and exit with the status.

// epMsgSize is the size of the one message each side sends and receives.
const epMsgSize = 16

// epOpts are the two programs' flags: -s and -p, and goverbs' own --bind (the client's
// local software device), --pcap and --stats.
type epOpts struct {
	server, port, bind, pcap string
	stats                    bool
}

// endpoint is what rdma_create_ep and rdma_reg_msgs leave one side holding: an RC QP of
// one send and one receive (sq_sig_all, 16 bytes inline when the device allows it)
// with a CQ for each, and the message buffers.
type endpoint struct {
	rcNode // its mr: the receive in the first half, the send in the second
	inline bool
}

func newEndpoint(name string, dev *verbs.Device) (*endpoint, error) {
	e := &endpoint{}
	var err error
	if e.pd, err = dev.AllocPD(); err != nil {
		return e, fmt.Errorf("rdma_create_ep: %v", err)
	}
	if e.sendCQ, err = tool.NewCQ(dev, 1, false, false); err != nil {
		return e, fmt.Errorf("rdma_create_ep: %v", err)
	}
	if e.recvCQ, err = tool.NewCQ(dev, 1, false, false); err != nil {
		return e, fmt.Errorf("rdma_create_ep: %v", err)
	}
	attr := verbs.QPInitAttr{Type: verbs.QPTypeRC, SendCQ: e.sendCQ.CQ, RecvCQ: e.recvCQ.CQ, SigAll: true,
		Cap: verbs.QPCap{MaxSendWR: 1, MaxRecvWR: 1, MaxSendSGE: 1, MaxRecvSGE: 1, MaxInline: epMsgSize}}
	if e.qp, err = e.pd.CreateQP(attr); err != nil {
		attr.Cap.MaxInline = 0 // rdma_create_ep lowers what the device cannot give
		if e.qp, err = e.pd.CreateQP(attr); err != nil {
			return e, fmt.Errorf("rdma_create_ep: %v", err)
		}
	}
	if e.inline = e.qp.Query().Cap.MaxInline >= epMsgSize; !e.inline {
		fmt.Println(name + ": device doesn't support IBV_SEND_INLINE, using sge sends")
	}
	if err := cm.InitQP(e.qp); err != nil {
		return e, err
	}
	if e.mr, err = e.pd.RegMR(pages(pageBuf(2*epMsgSize)), verbs.AccessLocalWrite); err != nil {
		return e, fmt.Errorf("rdma_reg_msgs for recv_msg: %v", err)
	}
	if err := e.qp.PostRecv(verbs.RecvWR{ID: 1, SGL: []verbs.SGE{e.mr.SGE(0, epMsgSize)}}); err != nil {
		return e, fmt.Errorf("rdma_post_recv: %v", err)
	}
	return e, nil
}

// send posts the message and waits for its completion (rdma_post_send,
// rdma_get_send_comp).
func (e *endpoint) send() error {
	wr := verbs.SendWR{ID: 2, Opcode: verbs.WRSend, SGL: []verbs.SGE{e.mr.SGE(epMsgSize, epMsgSize)}}
	if e.inline {
		wr.Flags |= verbs.SendInline
	}
	if err := e.qp.PostSend(wr); err != nil {
		return fmt.Errorf("rdma_post_send: %v", err)
	}
	if err := pollN("rdma_get_send_comp", e.sendCQ, 1, nil); err != nil {
		return err
	}
	return nil
}

// recv waits for the posted receive (rdma_get_recv_comp).
func (e *endpoint) recv() error { return pollN("rdma_get_recv_comp", e.recvCQ, 1, nil) }

// disconnect is rdma_disconnect: a DREQ, its DREP awaited for a while.
func (e *endpoint) disconnect(ctx context.Context) {
	dctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	e.conn.Disconnect(dctx, nil)
	cancel()
}

func RunRdmaServer(cmd *tool.Command, args []string) error {
	return runEndpointTool(cmd, args, "rdma_server", "0.0.0.0", epServer)
}

func RunRdmaClient(cmd *tool.Command, args []string) error {
	return runEndpointTool(cmd, args, "rdma_client", "127.0.0.1", epClient)
}

// runEndpointTool parses the flags, runs side between the start and end lines, and
// exits with its status as the C programs do (-1 on failure, its error on stderr).
func runEndpointTool(cmd *tool.Command, args []string, name, server string, side func(ctx context.Context, o *epOpts, start func()) error) error {
	o := epOpts{}
	fs := tool.NewFlagSet(cmd)
	fs.ArgsUsage = ""
	fs.StringOpt(&o.server, "s", "server", server, "server `ADDRESS`")
	fs.StringOpt(&o.port, "p", "port", "7471", "`PORT`")
	if name == "rdma_client" {
		fs.StringOpt(&o.bind, "b", "bind", "", "bind `ADDRESS`: the local software device's (goverbs'; default: the route's source)")
	}
	sideFlags(fs, &o.pcap, &o.stats)
	if err := tool.ParseFlagsOnly(fs, args); err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	started := false
	start := func() {
		if !started {
			started = true
			fmt.Println(name + ": start")
		}
	}
	status := side(ctx, &o, start)
	start()
	code := 0
	if status != nil {
		code = -1
	}
	fmt.Printf("%s: end %d\n", name, code)
	return status
}

// epPort is -p as a port number (rdma_getaddrinfo's service).
func epPort(p string) (uint16, error) {
	var n uint16
	if _, err := fmt.Sscan(p, &n); err != nil || n == 0 {
		return 0, fmt.Errorf("rdma_getaddrinfo: invalid port %q", p)
	}
	return n, nil
}

// epServer prints its start line once listening, so that a client started on seeing
// it finds the port open.
func epServer(ctx context.Context, o *epOpts, start func()) error {
	port, err := epPort(o.port)
	if err != nil {
		return err
	}
	bind := o.server
	if a, err := netip.ParseAddr(bind); err == nil && a.IsUnspecified() {
		bind = "" // the first configured device, as rdma_bind_addr on a wildcard
	}
	side, err := openServerSide(bind, o.pcap, o.stats)
	if err != nil {
		return err
	}
	defer side.close()
	l, err := side.agent.Listen(port, 0)
	if err != nil {
		return fmt.Errorf("rdma_listen: %v", err)
	}
	defer l.Close()
	start()
	req, err := l.Accept(ctx)
	if err != nil {
		return fmt.Errorf("rdma_get_request: %v", err)
	}
	e, err := newEndpoint("rdma_server", side.dev)
	defer e.close()
	if err != nil {
		req.Reject(nil)
		return err
	}
	if e.conn, err = req.Accept(ctx, &cm.Param{QP: e.qp}); err != nil {
		return fmt.Errorf("rdma_accept: %v", err)
	}
	defer e.disconnect(ctx)
	if err := e.recv(); err != nil {
		return err
	}
	return e.send()
}

func epClient(ctx context.Context, o *epOpts, start func()) error {
	start()
	port, err := epPort(o.port)
	if err != nil {
		return err
	}
	side, dst, err := openClientSide(o.server, o.bind, o.pcap, o.stats)
	if err != nil {
		return err
	}
	defer side.close()
	e, err := newEndpoint("rdma_client", side.dev)
	defer e.close()
	if err != nil {
		return err
	}
	e.conn, err = side.agent.Dial(ctx, netip.AddrPortFrom(dst, port), &cm.Param{QP: e.qp})
	var rej *cm.RejectError
	if errors.As(err, &rej) {
		return fmt.Errorf("rdma_connect: rejected, reason %d", rej.Reason)
	} else if err != nil {
		return fmt.Errorf("rdma_connect: %v", err)
	}
	defer e.disconnect(ctx)
	if err := e.send(); err != nil {
		return err
	}
	return e.recv()
}

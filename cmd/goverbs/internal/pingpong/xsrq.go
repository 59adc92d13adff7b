package pingpong

import (
	"fmt"
	"math/rand/v2"
	"net"
	"os"

	"github.com/goverbs/goverbs/cmd/goverbs/internal/exchange"
	"github.com/goverbs/goverbs/cmd/goverbs/internal/exchange/xsrqrec"
	"github.com/goverbs/goverbs/cmd/goverbs/internal/tool"
	"github.com/goverbs/goverbs/verbs"
)

// xsrq_pingpong: rdma-core's XRC example (libibverbs/examples/xsrq_pingpong.c), with its
// flags, output and exchange (package xsrqrec), so that either side may be Debian's
// ibv_xsrq_pingpong. A server serves -c clients; each side has, per peer, an XRC_RECV QP
// (in an XRC domain opened on the file /tmp/xrc_domain) and an XRC_SEND QP, and one XRC
// SRQ receives what every peer sends.

const xsrqDomain = "/tmp/xrc_domain"

// xsrqPeer is a peer's record, the connection it came on and the messages sent to it.
type xsrqPeer struct {
	xsrqrec.Dest
	ppCnt int
	conn  net.Conn
}

type xsrq struct {
	ep       *tool.Endpoint
	size     int
	mtu      verbs.MTU
	clients  int
	tests    int
	events   bool
	pd       *verbs.PD
	mr       *verbs.MR
	file     *os.File
	xrcd     *verbs.XRCD
	recvCQ   *tool.CQWaiter
	sendCQ   *tool.CQWaiter
	srq      *verbs.SRQ
	srqn     uint32
	recvQP   []*verbs.QP
	sendQP   []*verbs.QP
	rem      []xsrqPeer
	localPSN []uint32
}

// RunXSRQ is the xsrq_pingpong command.
func RunXSRQ(cmd *tool.Command, args []string) error {
	fs := tool.NewFlagSet(cmd)
	var dev tool.DevOpts
	dev.Register(fs, "g", "gid-idx")
	var port, size, mtu, clients, tests, sl int
	var events, odp bool
	fs.IntOpt(&port, "p", "port", exchange.DefaultPort, "listen on/connect to TCP `PORT`")
	fs.IntOpt(&size, "s", "size", 4096, "`SIZE` of message to exchange")
	fs.IntOpt(&mtu, "m", "mtu", 1024, "path MTU `BYTES`")
	fs.IntOpt(&clients, "c", "clients", 1, "`NUMBER` of clients (on server only)")
	fs.IntOpt(&tests, "n", "num_tests", 5, "`NUMBER` of tests per client")
	fs.IntOpt(&sl, "l", "sl", 0, "service level `VALUE`")
	fs.BoolOpt(&events, "e", "events", "sleep on CQ events")
	fs.BoolOpt(&odp, "o", "odp", "use on demand paging (a software device never pins memory: always so)")
	pos, err := fs.ParseArgs(args)
	if err != nil {
		return err
	}
	server, err := tool.OneArg(pos)
	if err != nil {
		return err
	}
	if server != "" {
		clients = 1
	}
	m, err := tool.ParseMTU(mtu)
	if err != nil {
		return err
	}
	if size < 1 || size > 1<<23 || clients < 1 || clients > 1024 || tests < 1 {
		return fmt.Errorf("invalid size, clients or num_tests")
	}
	x := &xsrq{size: size, mtu: m, clients: clients, tests: tests, events: events}
	if x.ep, err = tool.OpenEndpoint(dev); err != nil {
		return err
	}
	defer x.ep.Close()
	if err := x.init(); err != nil {
		return err
	}
	if err := x.postRecv(clients); err != nil {
		return err
	}
	if server != "" {
		err = x.clientConnect(server, port)
	} else {
		err = x.serverConnect(port)
		for i := 0; err == nil && i < clients; i++ {
			err = x.postSend(i)
		}
	}
	if err == nil {
		err = x.loop()
	}
	if err == nil {
		err = x.terminate(server != "")
	}
	if cerr := x.close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	fmt.Println("success")
	return nil
}

func (x *xsrq) init() error {
	var err error
	dev := x.ep.Dev
	if x.pd, err = dev.AllocPD(); err != nil {
		return fmt.Errorf("couldn't allocate PD: %v", err)
	}
	if x.mr, err = x.pd.RegMR(tool.Buffer(x.size), verbs.AccessLocalWrite); err != nil {
		return fmt.Errorf("couldn't register MR: %v", err)
	}
	// As rdma-core: the domain is the file's, so that processes of one host share it.
	fd := -1
	if x.file, err = os.OpenFile(xsrqDomain, os.O_RDONLY|os.O_CREATE, 0o440); err != nil {
		fmt.Fprintf(os.Stderr, "Couldn't create the file for the XRC Domain but not stopping %v\n", err)
	} else {
		fd = int(x.file.Fd())
	}
	if x.xrcd, err = dev.OpenXRCD(fd, os.O_CREATE); err != nil {
		return fmt.Errorf("couldn't open the XRC Domain: %v", err)
	}
	if x.recvCQ, err = tool.NewCQ(dev, x.clients, x.events, x.ep.Busy); err != nil {
		return err
	}
	if x.sendCQ, err = tool.NewCQ(dev, x.clients, false, x.ep.Busy); err != nil {
		return err
	}
	if x.srq, err = x.pd.CreateSRQEx(verbs.SRQInitEx{Type: verbs.SRQTypeXRC, XRCD: x.xrcd, CQ: x.recvCQ.CQ,
		Attr: verbs.SRQAttr{MaxWR: uint32(x.clients), MaxSGE: 1}}); err != nil {
		return fmt.Errorf("couldn't create SRQ: %v", err)
	}
	if x.srqn, err = x.srq.Num(); err != nil {
		return fmt.Errorf("couldn't get SRQ num: %v", err)
	}
	x.rem = make([]xsrqPeer, x.clients)
	x.localPSN = make([]uint32, x.clients)
	initMask := verbs.QPAttrState | verbs.QPAttrPKeyIndex | verbs.QPAttrPort | verbs.QPAttrAccessFlags
	for i := range x.clients {
		r, err := x.xrcd.CreateQP(verbs.QPInitAttr{Type: verbs.QPTypeXRCRecv})
		if err != nil {
			return fmt.Errorf("couldn't create recv QP[%d]: %v", i, err)
		}
		x.recvQP = append(x.recvQP, r)
		if err := r.Modify(&verbs.QPAttr{State: verbs.QPStateInit, Port: 1,
			AccessFlags: verbs.AccessRemoteWrite | verbs.AccessRemoteRead}, initMask); err != nil {
			return fmt.Errorf("failed to modify recv QP[%d] to INIT: %v", i, err)
		}
		s, err := x.pd.CreateQP(verbs.QPInitAttr{Type: verbs.QPTypeXRCSend, SendCQ: x.sendCQ.CQ,
			Cap: verbs.QPCap{MaxSendWR: uint32(x.clients * x.tests), MaxSendSGE: 1}})
		if err != nil {
			return fmt.Errorf("couldn't create send QP[%d]: %v", i, err)
		}
		x.sendQP = append(x.sendQP, s)
		if err := s.Modify(&verbs.QPAttr{State: verbs.QPStateInit, Port: 1}, initMask); err != nil {
			return fmt.Errorf("failed to modify send QP[%d] to INIT: %v", i, err)
		}
	}
	x.ep.TrackQPs(append(append([]*verbs.QP(nil), x.recvQP...), x.sendQP...))
	return nil
}

func (x *xsrq) printDest(which string, d *xsrqrec.Dest) {
	fmt.Printf("%8s: LID %04x, QPN RECV %06x SEND %06x, PSN %06x, SRQN %06x, GID %s\n",
		which, d.LID, d.RecvQPN, d.SendQPN, d.PSN, d.SRQN, tool.GIDText(d.GID))
}

func (x *xsrq) sendLocal(c net.Conn, i int) error {
	x.localPSN[i] = rand.Uint32() & 0xffffff
	d := xsrqrec.Dest{LID: x.ep.Port.LID, RecvQPN: x.recvQP[i].QPN(), SendQPN: x.sendQP[i].QPN(),
		PSN: x.localPSN[i], SRQN: x.srqn, GID: x.ep.GID}
	x.printDest("local", &d)
	return exchange.WriteAll(c, d.Record(), "local address")
}

func (x *xsrq) recvRemote(c net.Conn, i int) error {
	b := make([]byte, xsrqrec.RecordLen)
	if err := exchange.ReadFull(c, b, "remote address"); err != nil {
		return err
	}
	d, err := xsrqrec.Parse(b)
	if err != nil {
		return err
	}
	x.rem[i] = xsrqPeer{Dest: d, conn: c}
	x.printDest("remote", &d)
	return nil
}

// connectQPs brings peer i's QP pair to RTS with xsrq_pingpong's attributes: the
// receive QP answers the peer's send QP, the send QP talks to the peer's receive QP.
func (x *xsrq) connectQPs(i int) error {
	r := &x.rem[i]
	ah := verbs.AHAttr{DGID: r.GID, SGIDIndex: uint8(0), HopLimit: 5, Port: 1}
	if err := x.recvQP[i].Modify(&verbs.QPAttr{State: verbs.QPStateRTR, DestQPN: r.SendQPN, PathMTU: x.mtu,
		RQPSN: r.PSN, MinRNRTimer: 12, AH: ah},
		verbs.QPAttrState|verbs.QPAttrAV|verbs.QPAttrPathMTU|verbs.QPAttrDestQPN|verbs.QPAttrRQPSN|
			verbs.QPAttrMaxDestRdAtomic|verbs.QPAttrMinRNRTimer); err != nil {
		return fmt.Errorf("failed to modify recv QP[%d] to RTR: %v", i, err)
	}
	if err := x.recvQP[i].Modify(&verbs.QPAttr{State: verbs.QPStateRTS, Timeout: 14, SQPSN: x.localPSN[i]},
		verbs.QPAttrState|verbs.QPAttrTimeout|verbs.QPAttrSQPSN); err != nil {
		return fmt.Errorf("failed to modify recv QP[%d] to RTS: %v", i, err)
	}
	if err := x.sendQP[i].Modify(&verbs.QPAttr{State: verbs.QPStateRTR, DestQPN: r.RecvQPN, PathMTU: x.mtu,
		RQPSN: r.PSN, AH: ah},
		verbs.QPAttrState|verbs.QPAttrAV|verbs.QPAttrPathMTU|verbs.QPAttrDestQPN|verbs.QPAttrRQPSN); err != nil {
		return fmt.Errorf("failed to modify send QP[%d] to RTR: %v", i, err)
	}
	if err := x.sendQP[i].Modify(&verbs.QPAttr{State: verbs.QPStateRTS, Timeout: 14, RetryCnt: 7, RNRRetry: 7,
		SQPSN: x.localPSN[i]},
		verbs.QPAttrState|verbs.QPAttrTimeout|verbs.QPAttrSQPSN|verbs.QPAttrRetryCnt|verbs.QPAttrRNRRetry|
			verbs.QPAttrMaxQPRdAtomic); err != nil {
		return fmt.Errorf("failed to modify send QP[%d] to RTS: %v", i, err)
	}
	return nil
}

func (x *xsrq) clientConnect(server string, port int) error {
	c, err := exchange.Dial(server, port)
	if err != nil {
		return err
	}
	if err := x.sendLocal(c, 0); err != nil {
		return err
	}
	if err := x.recvRemote(c, 0); err != nil {
		return err
	}
	return x.connectQPs(0)
}

func (x *xsrq) serverConnect(port int) error {
	l, err := exchange.Listen(x.ep.Addr, port)
	if err != nil {
		return err
	}
	defer l.Close()
	for i := range x.clients {
		c, err := l.Accept()
		if err != nil {
			return fmt.Errorf("accept() failed for client %d: %v", i, err)
		}
		if err := x.recvRemote(c, i); err != nil {
			return err
		}
		if err := x.sendLocal(c, i); err != nil {
			return err
		}
		if err := x.connectQPs(i); err != nil {
			return err
		}
	}
	return nil
}

func (x *xsrq) postRecv(n int) error {
	for range n {
		if err := x.srq.PostRecv(verbs.RecvWR{ID: 0, SGL: []verbs.SGE{x.mr.SGE(0, x.size)}}); err != nil {
			return fmt.Errorf("failed to post receive to SRQ: %v", err)
		}
	}
	return nil
}

// postSend sends to peer index round robin over the send QPs (rdma-core's order; with
// one device per process a message through another peer's QP reaches that peer with
// index's SRQ number), signaled on the peer's last test.
func (x *xsrq) postSend(index int) error {
	r := &x.rem[index]
	qpi := (index + r.ppCnt) % x.clients
	r.ppCnt++
	var fl verbs.SendFlags
	if r.ppCnt >= x.tests {
		fl = verbs.SendSignaled
	}
	return x.sendQP[qpi].PostSend(verbs.SendWR{ID: uint64(index), Opcode: verbs.WRSend, Flags: fl,
		SGL: []verbs.SGE{x.mr.SGE(0, x.size)}, RemoteSRQN: r.SRQN})
}

func (x *xsrq) findQP(qpn uint32) int {
	for i, q := range x.recvQP {
		if q.QPN() == qpn {
			return i
		}
	}
	if x.clients > 1 {
		fmt.Fprintf(os.Stderr, "Unable to find qp %x\n", qpn)
	}
	return 0
}

func (x *xsrq) loop() error {
	total := x.clients * x.tests
	for cnt := 0; cnt < total; {
		wcs, err := x.recvCQ.Wait()
		if err != nil {
			return err
		}
		for i := range wcs {
			if wcs[i].Status != verbs.WCSuccess {
				return fmt.Errorf("work completion error %d (%v)", int(wcs[i].Status), wcs[i].Status)
			}
			if err := x.postRecv(1); err != nil {
				return err
			}
			if qpi := x.findQP(wcs[i].QPN); x.rem[qpi].ppCnt < x.tests {
				if err := x.postSend(qpi); err != nil {
					return fmt.Errorf("post send: %v", err)
				}
			}
			cnt++
		}
	}
	for cnt := 0; cnt < x.clients; {
		wcs, err := x.sendCQ.Wait()
		if err != nil {
			return err
		}
		cnt += len(wcs)
	}
	return nil
}

// terminate: the client says END and waits for the server's; the server waits for every
// client's, then answers each (so no process closes while a message to it is in flight).
func (x *xsrq) terminate(client bool) error {
	read := func(i int) error {
		b := make([]byte, len(xsrqrec.End))
		if err := exchange.ReadFull(x.rem[i].conn, b, "remote termination ack"); err != nil {
			return err
		}
		if string(b) != xsrqrec.End {
			return fmt.Errorf("invalid termination ack was accepted")
		}
		return nil
	}
	write := func(i int) error { return exchange.WriteAll(x.rem[i].conn, []byte(xsrqrec.End), "termination ack") }
	if client {
		if err := write(0); err != nil {
			return err
		}
		return read(0)
	}
	for i := range x.clients {
		if err := read(i); err != nil {
			return err
		}
	}
	for i := range x.clients {
		if err := write(i); err != nil {
			return err
		}
	}
	return nil
}

func (x *xsrq) close() error {
	x.ep.CloseQPs(append(append([]*verbs.QP(nil), x.sendQP...), x.recvQP...))
	for _, r := range x.rem {
		if r.conn != nil {
			r.conn.Close()
		}
	}
	var first error
	keep := func(err error) {
		if first == nil && err != nil {
			first = err
		}
	}
	if x.srq != nil {
		keep(x.srq.Close())
	}
	if x.xrcd != nil {
		keep(x.xrcd.Close())
	}
	if x.file != nil {
		x.file.Close()
	}
	if x.sendCQ != nil {
		x.sendCQ.Close()
	}
	if x.recvCQ != nil {
		x.recvCQ.Close()
	}
	if x.mr != nil {
		keep(x.mr.Close())
	}
	if x.pd != nil {
		keep(x.pd.Close())
	}
	return first
}

package cmtools

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"sync"
	"time"

	"github.com/goverbs/goverbs/cm"
	"github.com/goverbs/goverbs/cmd/goverbs/internal/control"
	"github.com/goverbs/goverbs/verbs"
)

// rpingServer is rping -s: listen, and for each connection (one, or any number with -P)
// run the server's side of the pings until the client disconnects.
func rpingServer(ctx context.Context, o *rpingOpts) error {
	side, err := openServerSide(o.addr, o.pcap, o.stats)
	if err != nil {
		return err
	}
	defer side.close()
	dev, agent := side.dev, side.agent
	o.debugf("created cm agent on %v\n", agent.Addr())
	l, err := agent.Listen(uint16(o.port), 3)
	if err != nil {
		return fmt.Errorf("rdma_bind_addr: %v", err)
	}
	defer l.Close()
	o.debugf("rdma_bind_addr successful\n")
	o.debugf("rdma_listen\n")
	var wg sync.WaitGroup
	defer wg.Wait()
	for {
		req, err := l.Accept(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return nil // interrupted
			}
			return err
		}
		o.debugf("child cma from %v\n", req.Remote)
		if !o.persistent {
			return rpingServe(ctx, o, dev, req)
		}
		wg.Go(func() {
			if err := rpingServe(ctx, o, dev, req); err != nil {
				fmt.Fprintf(os.Stderr, "rping server failed: %v\n", err)
			}
		})
	}
}

// rpingServe is rping_test_server on one connection.
func rpingServe(ctx context.Context, o *rpingOpts, dev *verbs.Device, req *cm.Request) error {
	s, err := newRpingSession(o, dev, true)
	if err != nil {
		req.Reject(nil)
		return fmt.Errorf("setup_qp failed: %v", err)
	}
	defer s.close()
	o.debugf("accepting client connection request\n")
	if s.conn, err = req.Accept(ctx, s.param()); err != nil {
		if ctx.Err() != nil {
			return nil // interrupted
		}
		return fmt.Errorf("rdma_accept: %v", err)
	}
	if control.StatsWanted(o.stats) {
		defer control.PrintQPStats(os.Stderr, s.qp)
	}
	// Ctrl-C disconnects, as the client's leaving would: serve waits on the CQ, which
	// the disconnection flushes. The disconnection is over before the session closes.
	disconnected := make(chan struct{})
	stop := context.AfterFunc(ctx, func() {
		defer close(disconnected)
		s.conn.Disconnect(ctx, nil) // ctx is done: the DREQ goes, the DREP is not waited for
	})
	defer func() {
		if !stop() {
			<-disconnected
		}
	}()
	err = s.serve()
	if ctx.Err() != nil {
		return nil // interrupted
	}
	if errors.Is(err, errRpingDisconnected) {
		fmt.Fprintf(os.Stderr, "server DISCONNECT EVENT...\n")
		return nil
	}
	return err
}

func (s *rpingSession) serve() error {
	o := s.o
	for {
		// The client's READ source.
		addr, rkey, size, err := s.recvInfo()
		if err != nil {
			return err
		}
		o.debugf("Received rkey %x addr %x len %d from peer\n", rkey, addr, size)
		o.debugf("server received sink adv\n")
		if int(size) > len(s.rdmaBuf) {
			return fmt.Errorf("the client's buffer (%d bytes) is larger than ours (%d): give both sides the same -S", size, len(s.rdmaBuf))
		}
		if err := s.qp.PostSend(verbs.SendWR{ID: 3, Opcode: verbs.WRRDMARead, Flags: verbs.SendSignaled,
			SGL: []verbs.SGE{s.rdmaMR.SGE(0, int(size))}, RemoteAddr: addr, RKey: rkey}); err != nil {
			return fmt.Errorf("post send error %v", err)
		}
		o.debugf("server posted rdma read req \n")
		if _, err := s.await(verbs.WCRDMARead); err != nil {
			return err
		}
		o.debugf("server received read complete\n")
		if o.verbose {
			fmt.Printf("server ping data: %s\n", cString(s.rdmaBuf))
		}
		if err := s.send(); err != nil {
			return fmt.Errorf("post send error %v", err)
		}
		o.debugf("server posted go ahead\n")

		// The client's WRITE sink: the data goes back.
		addr, rkey, _, err = s.recvInfo()
		if err != nil {
			return err
		}
		o.debugf("server received sink adv\n")
		n := len(cString(s.rdmaBuf)) + 1
		o.debugf("rdma write from lkey %x laddr %x len %d\n", s.rdmaMR.LKey(), s.rdmaMR.Addr(), n)
		if err := s.qp.PostSend(verbs.SendWR{ID: 4, Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled,
			SGL: []verbs.SGE{s.rdmaMR.SGE(0, min(n, len(s.rdmaBuf)))}, RemoteAddr: addr, RKey: rkey}); err != nil {
			return fmt.Errorf("post send error %v", err)
		}
		if _, err := s.await(verbs.WCRDMAWrite); err != nil {
			return err
		}
		o.debugf("server rdma write complete \n")
		if err := s.send(); err != nil {
			return fmt.Errorf("post send error %v", err)
		}
		o.debugf("server posted go ahead\n")
	}
}

// rpingClient is rping -c: connect, ping -C times (or until interrupted), disconnect.
func rpingClient(ctx context.Context, o *rpingOpts) error {
	side, dst, err := openClientSide(o.addr, o.source, o.pcap, o.stats)
	if err != nil {
		return err
	}
	defer side.close()
	dev, agent := side.dev, side.agent
	o.debugf("created cm agent on %v\n", agent.Addr())
	o.debugf("rdma_resolve_addr - rdma_resolve_route successful\n")
	s, err := newRpingSession(o, dev, false)
	if err != nil {
		return fmt.Errorf("setup_qp failed: %v", err)
	}
	defer s.close()
	if s.conn, err = agent.Dial(ctx, netip.AddrPortFrom(dst, uint16(o.port)), s.param()); err != nil {
		var rej *cm.RejectError
		if errors.As(err, &rej) {
			return fmt.Errorf("cma event RDMA_CM_EVENT_REJECTED, error %d", rej.Reason)
		}
		return fmt.Errorf("connect error: %v", err)
	}
	o.debugf("rdma_connect successful\n")
	if control.StatsWanted(o.stats) {
		defer control.PrintQPStats(os.Stderr, s.qp)
	}
	err = s.ping(ctx)
	// rping's client reports the DISCONNECTED event that the peer's DREP brings.
	dctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	s.conn.Disconnect(dctx, nil)
	cancel()
	fmt.Fprintf(os.Stderr, "client DISCONNECT EVENT...\n")
	if errors.Is(err, errRpingDisconnected) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("rping client failed: %v", err)
	}
	return nil
}

// ping is rping_test_client.
func (s *rpingSession) ping(ctx context.Context) error {
	o := s.o
	start := byte(65)
	for ping := 0; o.count == 0 || ping < o.count; ping++ {
		if ctx.Err() != nil {
			return nil
		}
		// Some ASCII text in the buffer: "rdma-ping-N: " and letters from start on.
		cc := copy(s.startBuf, fmt.Sprintf("rdma-ping-%d: ", ping))
		for i, c := cc, start; i < o.size; i++ {
			s.startBuf[i] = c
			if c++; c > 122 {
				c = 65
			}
		}
		if start++; start > 122 {
			start = 65
		}
		s.startBuf[o.size-1] = 0
		if err := s.advertise(s.startMR); err != nil {
			return fmt.Errorf("post send error %v", err)
		}
		if _, _, _, err := s.recvInfo(); err != nil { // the server has read it
			return err
		}
		if err := s.advertise(s.rdmaMR); err != nil {
			return fmt.Errorf("post send error %v", err)
		}
		if _, _, _, err := s.recvInfo(); err != nil { // the server has written it back
			return err
		}
		if o.validate && string(s.startBuf) != string(s.rdmaBuf) {
			return errors.New("data mismatch!")
		}
		if o.verbose {
			fmt.Printf("ping data: %s\n", cString(s.rdmaBuf))
		}
	}
	return nil
}

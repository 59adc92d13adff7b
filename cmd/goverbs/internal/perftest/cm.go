package perftest

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"sync"
	"time"

	"github.com/goverbs/goverbs/cm"
	"github.com/goverbs/goverbs/cmd/goverbs/internal/exchange/perftestcm"
	"github.com/goverbs/goverbs/cmd/goverbs/internal/tool"
	"github.com/goverbs/goverbs/verbs"
)

// perftest's -R (--rdma_cm): the QPs are connected by the connection manager (package
// cm: the IB CM in MADs on QP1, as Linux's rdma_cm on RoCE) instead of being moved to
// RTR and RTS with the QPN and PSN of the exchange. The exchange itself (versions, MTU,
// key records, handshakes, reports) goes over an rdma_cm connection of its own
// (package perftestcm), never TCP. Learned from perftest's create_rdma_cm_connection
// (perftest_communication.c), after the QPs exist and before the first key record:
//
//   - a handshake, so that both sides are past their setup;
//   - the server listens on the TCP port's number in rdma_cm's own port space (RDMA_PS_TCP)
//     and gives its QP i to the i-th request (perftest's backlog is the QP count; ours is
//     the most QPs a run may have). Ours listens from the start and keeps listening,
//     where perftest listens anew here: its first request was the exchange's;
//   - the client connects one rdma_cm id per QP to that port, with no private data
//     (rdma_getaddrinfo's ai_connect is empty on RoCE), and, since the server may not be
//     listening yet, tries again up to 10 times 100 ms apart;
//   - READ and atomic tests offer -o READs each way; both retry counts are 7, and the
//     server's QP asks for perftest's RNR timer 12;
//   - a second handshake; the key records follow, and the QPs are not moved again.
//
// UC and UD are refused as perftest refuses them with -R (UC: librdmacm has none; UD
// goes through SIDR, which the perf tools do not speak yet).

const (
	cmDialTries = 10 // rdma_cm_client_connection's max_retries
	cmDialDelay = 100 * time.Millisecond
	// cmTimeout bounds the whole connection step: a client that never connects, or a
	// peer that goes quiet mid-handshake (the CM alone retries for over a minute).
	cmTimeout = 30 * time.Second
	// cmRNRTimer is perftest's MIN_RNR_TIMER, which its server sets after rdma_accept.
	cmRNRTimer = 12
)

// perfCM is one side's connection manager for -R.
type perfCM struct {
	agent   *cm.Agent
	passive bool           // the server's side
	l       *cm.Listener   // the server's, until every QP is connected
	server  netip.AddrPort // the client's peer
	conns   []*cm.Conn
	wire    *perftestcm.Conn // the exchange's connection
}

// dial connects the exchange's QP to the server (perftestcm.Dial).
func (c *perfCM) dial(ctx context.Context) (*perftestcm.Conn, error) {
	w, err := perftestcm.Dial(ctx, c.agent, c.server)
	if err == nil {
		c.wire = w
	}
	return w, err
}

// accept takes the client's first request as the exchange's (perftestcm.Accept).
func (c *perfCM) accept(ctx context.Context) (*perftestcm.Conn, error) {
	w, err := perftestcm.Accept(ctx, c.agent, c.l)
	if err == nil {
		c.wire = w
	}
	return w, err
}

// newPerfCM starts the CM on the endpoint's device. A server listens at once on port,
// so that a client's first request finds it even when the client is quicker than
// perftest's own server would be; a client connects to server later.
func newPerfCM(ep *tool.Endpoint, listen bool, port int, server netip.AddrPort) (*perfCM, error) {
	a, err := cm.NewAgent(ep.Dev, nil)
	if err != nil {
		return nil, fmt.Errorf("-R: %v", err)
	}
	c := &perfCM{agent: a, server: server, passive: listen}
	if listen {
		if c.l, err = a.Listen(uint16(port), 256); err != nil {
			a.Close()
			return nil, fmt.Errorf("-R: rdma_listen on port %d: %v", port, err)
		}
	}
	return c, nil
}

// cmParam is the rdma_conn_param of a data QP of test op, with -o outs READs.
func cmParam(qp *verbs.QP, op operation, outs int) *cm.Param {
	p := &cm.Param{QP: qp, RetryCount: 7, RNRRetryCount: 7, MinRNRTimer: cmRNRTimer}
	if op == opRead || op == opAtomic {
		p.ResponderResources, p.InitiatorDepth = uint8(outs), uint8(outs)
	}
	return p
}

// connect connects every QP through the CM, qps[i] with param(i): the client dials,
// the server accepts.
func (c *perfCM) connect(ctx context.Context, qps []*verbs.QP, param func(i int) *cm.Param) error {
	ctx, cancel := context.WithTimeout(ctx, cmTimeout)
	defer cancel()
	if c.passive {
		defer func() {
			c.l.Close() // perftest destroys its listening id once the QPs are connected
			c.l = nil
		}()
		for i := range qps {
			req, err := c.l.Accept(ctx)
			if err != nil {
				return fmt.Errorf("-R: waiting for connection request %d of %d: %v", i+1, len(qps), err)
			}
			conn, err := req.Accept(ctx, param(i))
			if err != nil {
				return fmt.Errorf("-R: rdma_accept: %v", err)
			}
			c.conns = append(c.conns, conn)
		}
		return nil
	}
	for i := range qps {
		var conn *cm.Conn
		var err error
		for try := 0; try < cmDialTries; try++ {
			if try > 0 {
				select {
				case <-ctx.Done():
				case <-time.After(cmDialDelay):
				}
			}
			conn, err = c.agent.Dial(ctx, c.server, param(i))
			if err == nil || !errors.Is(err, cm.ErrRejected) || ctx.Err() != nil {
				break
			}
			// A rejection (no such service: the server is not listening yet): as
			// perftest, try again. A refused Dial leaves the QP in INIT, usable again.
		}
		if err != nil {
			var rej *cm.RejectError
			if errors.As(err, &rej) {
				return fmt.Errorf("-R: rdma_connect to %v: RDMA_CM_EVENT_REJECTED, error %d", c.server, rej.Reason)
			}
			return fmt.Errorf("-R: rdma_connect to %v: %v", c.server, err)
		}
		c.conns = append(c.conns, conn)
	}
	return nil
}

// close ends the connections as perftest's rdma_cm_disconnect_nodes does, and stops
// the CM; the QPs are the side's to close after. The server sends a DREQ on every
// connection at once and then waits for the DREPs: perftest 6.29's client answers none
// before all its connections are DISCONNECTED (it waits for every one, then destroys its
// ids, which sends the DREPs), so a DREQ at a time waits out the timeout from the second
// QP on. The client sends nothing and waits for the server's DREQs, answering them, so
// that a perftest server waiting for its DREPs ends. A peer that is gone is waited for
// 2 s at most.
// With stats (--stats) it prints the CM's MAD counters first.
func (c *perfCM) close(stats bool) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	for _, conn := range c.conns {
		if c.passive {
			wg.Go(func() { conn.Disconnect(ctx, nil) })
		} else {
			select {
			case <-conn.Done():
			case <-ctx.Done():
			}
		}
	}
	wg.Wait()
	for _, conn := range c.conns {
		conn.Close()
	}
	if c.l != nil {
		c.l.Close()
	}
	if c.wire != nil {
		c.wire.Close() // after the data QPs' connections, as perftest destroys its comm context last
	}
	tool.CloseAgent(c.agent, stats)
}

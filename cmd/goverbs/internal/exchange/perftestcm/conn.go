// Package perftestcm is the transport of perftest's exchange under -R (--rdma_cm): an
// RC QP of its own, connected through rdma_cm, carried as a net.Conn so that the
// exchange over it shares its code with the one over TCP.
package perftestcm

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"sync"
	"time"

	"github.com/goverbs/goverbs/cm"
	"github.com/goverbs/goverbs/cmd/goverbs/internal/exchange/perftestcomm"
	"github.com/goverbs/goverbs/cmd/goverbs/internal/tool"
	"github.com/goverbs/goverbs/verbs"
)

// With -R perftest has no TCP exchange at all: its parser turns on use_rdma_cm with
// work_rdma_cm, and create_comm_struct then builds a second verbs context for the
// exchange, one RC QP of depth 1 with its own buffer. establish_connection connects
// that QP through rdma_cm before anything else (rdma_server_connect: listen on the
// port with the QP count as backlog, accept the first request, destroy the listening
// id; rdma_client_connect: resolve, connect, no retry). Every exchange message
// (ctx_xchg_data_rdma, rdma_write_keys and rdma_read_keys) is then one signaled SEND of
// exactly the message's size into the peer's single posted receive, the writer waiting
// for its send completion, the reader reposting its receive before it goes on. Only
// after the versions, sizes and MTU have gone over it does create_rdma_cm_connection
// connect the data QPs (package perftest), on the same port. At the end both sides
// destroy the exchange's context, which disconnects its rdma_cm id.
//
// Conn is that exchange QP as a net.Conn, so that the exchanges over TCP and over
// rdma_cm share their code: every Write is one SEND, and Read reads the received
// messages as a stream. Like perftest's, it keeps one receive posted: each message is
// answered before the next is sent (ctx_xchg_data_rdma), and the receive is reposted
// before the answer goes, so a SEND always finds it. Two goverbs tools with -R speak
// perftest's exchange too (perftestcomm.Hello is plain with -R), so nothing longer
// goes over it.

// MaxMessageLen is the longest message of the exchange over rdma_cm: a binary key
// record (64 bytes; the version is 16, the others 8 or fewer). perftest's receive is
// larger, to hold its parameter negotiation (perftest_parameters_negotiate), which it
// sends only to a peer of version 6.28 or later; we announce 6.06.
const MaxMessageLen = perftestcomm.KeyBinLen

// Conn is one side of the exchange QP, connected.
type Conn struct {
	conn          *cm.Conn
	pd            *verbs.PD
	qp            *verbs.QP
	scq, rcq      *tool.CQWaiter
	rbuf, sbuf    []byte
	mem           []byte // rbuf's and sbuf's pages (verbs.Mmap)
	rmr, smr      *verbs.MR
	msg           [MaxMessageLen]byte // the message last received, copied out of rbuf
	cur           []byte              // its unread rest
	deadline      time.Time
	closed        chan struct{}
	once          sync.Once
	wc            [1]verbs.WC
	local, remote net.Addr
}

// newConn creates the exchange QP in INIT with its receive posted (perftest posts it
// before rdma_connect and rdma_accept).
func newConn(dev *verbs.Device) (*Conn, error) {
	w := &Conn{closed: make(chan struct{})}
	err := w.open(dev)
	if err != nil {
		w.release()
		return nil, fmt.Errorf("-R: the exchange's QP: %v", err)
	}
	return w, nil
}

func (w *Conn) open(dev *verbs.Device) error {
	var err error
	if w.pd, err = dev.AllocPD(); err != nil {
		return err
	}
	if w.scq, err = tool.NewCQ(dev, 1, true, false); err != nil {
		return err
	}
	if w.rcq, err = tool.NewCQ(dev, 1, true, false); err != nil {
		return err
	}
	if w.qp, err = w.pd.CreateQP(verbs.QPInitAttr{Type: verbs.QPTypeRC, SendCQ: w.scq.CQ, RecvCQ: w.rcq.CQ,
		Cap: verbs.QPCap{MaxSendWR: 1, MaxRecvWR: 1, MaxSendSGE: 1, MaxRecvSGE: 1}}); err != nil {
		return err
	}
	if err = cm.InitQP(w.qp); err != nil {
		return err
	}
	// A page each: an attached device (`goverbs serve`) registers only whole pages in a
	// Go program, and Go gives an allocation of two pages whole pages of its own.
	page := os.Getpagesize()
	w.mem = make([]byte, 2*page)
	w.rbuf, w.sbuf = w.mem[:MaxMessageLen], w.mem[page:page+MaxMessageLen]
	if w.rmr, err = w.pd.RegMR(w.mem[:page], verbs.AccessLocalWrite); err != nil {
		return err
	}
	if w.smr, err = w.pd.RegMR(w.mem[page:], 0); err != nil {
		return err
	}
	return w.postRecv()
}

func (w *Conn) postRecv() error {
	return w.qp.PostRecv(verbs.RecvWR{SGL: []verbs.SGE{w.rmr.SGE(0, MaxMessageLen)}})
}

// param is the exchange connection's rdma_conn_param (rdma_client_connect and
// rdma_server_connect: no READs for a SEND-only QP, retry counts 7).
func (w *Conn) param() *cm.Param {
	return &cm.Param{QP: w.qp, RetryCount: 7, RNRRetryCount: 7}
}

func (w *Conn) connected(c *cm.Conn) {
	w.conn = c
	w.local = &net.UDPAddr{IP: c.LocalAddr().Addr().AsSlice(), Port: int(c.LocalAddr().Port())}
	w.remote = &net.UDPAddr{IP: c.RemoteAddr().Addr().AsSlice(), Port: int(c.RemoteAddr().Port())}
}

// Dial is establish_connection's client side: one rdma_connect to the server's port,
// not retried (perftest's client fails at once when no server listens).
func Dial(ctx context.Context, a *cm.Agent, server netip.AddrPort) (*Conn, error) {
	w, err := newConn(a.Device())
	if err != nil {
		return nil, err
	}
	conn, err := a.Dial(ctx, server, w.param())
	if err != nil {
		w.release()
		var rej *cm.RejectError
		if errors.As(err, &rej) {
			return nil, fmt.Errorf("-R: couldn't connect the exchange to %v: RDMA_CM_EVENT_REJECTED, error %d (is a server listening?)", server, rej.Reason)
		}
		return nil, fmt.Errorf("-R: couldn't connect the exchange to %v: %v", server, err)
	}
	w.connected(conn)
	return w, nil
}

// Accept is establish_connection's server side: the first request on l, the port's
// listener on a's device, is the exchange's; the data QPs' follow later.
func Accept(ctx context.Context, a *cm.Agent, l *cm.Listener) (*Conn, error) {
	req, err := l.Accept(ctx)
	if err != nil {
		return nil, fmt.Errorf("-R: waiting for the client's connection: %v", err)
	}
	w, err := newConn(a.Device())
	if err != nil {
		req.Reject(nil)
		return nil, err
	}
	conn, err := req.Accept(ctx, w.param())
	if err != nil {
		w.release()
		return nil, fmt.Errorf("-R: rdma_accept of the exchange: %v", err)
	}
	w.connected(conn)
	return w, nil
}

// Write sends b as one SEND and waits for its completion, as perftest's
// rdma_write_data. A message longer than the peer's receive is refused, unsent.
func (w *Conn) Write(b []byte) (int, error) {
	if len(b) > MaxMessageLen {
		return 0, fmt.Errorf("a %d-byte message is longer than the exchange's %d-byte receive", len(b), MaxMessageLen)
	}
	if len(b) == 0 {
		return 0, nil
	}
	n := copy(w.sbuf, b)
	if err := w.qp.PostSend(verbs.SendWR{Opcode: verbs.WRSend, Flags: verbs.SendSignaled,
		SGL: []verbs.SGE{w.smr.SGE(0, n)}}); err != nil {
		return 0, err
	}
	wc, err := w.next(w.scq, time.Time{})
	if err != nil {
		return 0, err
	}
	if wc.Status != verbs.WCSuccess {
		return 0, fmt.Errorf("the exchange's SEND failed: %v", tool.WCError(&wc))
	}
	return n, nil
}

// Read returns what is left of the last message, or waits for the next; the receive
// is posted again at once, before this side answers.
func (w *Conn) Read(b []byte) (int, error) {
	if len(w.cur) == 0 {
		wc, err := w.next(w.rcq, w.deadline)
		if err != nil {
			return 0, err
		}
		if wc.Status != verbs.WCSuccess {
			return 0, fmt.Errorf("the exchange's RECV failed: %v", tool.WCError(&wc))
		}
		w.cur = w.msg[:copy(w.msg[:], w.rbuf[:min(int(wc.ByteLen), len(w.rbuf))])]
		if err := w.postRecv(); err != nil {
			return 0, err
		}
	}
	n := copy(b, w.cur)
	w.cur = w.cur[n:]
	return n, nil
}

// next waits for one completion on q: for as long as the other side's run takes, but
// no longer than the deadline, the wire's closing or the connection's end.
func (w *Conn) next(q *tool.CQWaiter, deadline time.Time) (verbs.WC, error) {
	poll := func() (verbs.WC, bool, error) {
		n, err := q.CQ.Poll(w.wc[:])
		return w.wc[0], n > 0, err
	}
	for {
		if wc, ok, err := poll(); err != nil || ok {
			return wc, err
		}
		select {
		case <-w.closed:
			return verbs.WC{}, net.ErrClosed
		case <-w.conn.Done():
			return verbs.WC{}, fmt.Errorf("the peer disconnected the exchange")
		default:
		}
		if !deadline.IsZero() && time.Now().After(deadline) {
			return verbs.WC{}, os.ErrDeadlineExceeded
		}
		if err := q.CQ.RequestNotify(false); err != nil {
			return verbs.WC{}, err
		}
		if wc, ok, err := poll(); err != nil || ok {
			return wc, err
		}
		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		_, err := q.Ch.Wait(ctx)
		cancel()
		if err != nil && !errors.Is(err, context.DeadlineExceeded) {
			return verbs.WC{}, err
		}
	}
}

// Close disconnects the exchange, as perftest's destroy_ctx of its comm context does on
// both sides (rdma_disconnect), and frees the QP. Once.
func (w *Conn) Close() error {
	w.once.Do(w.close)
	return nil
}

func (w *Conn) close() {
	close(w.closed)
	if w.conn != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		w.conn.Disconnect(ctx, nil)
		cancel()
		w.conn.Close()
	}
	w.release()
}

func (w *Conn) release() {
	for _, mr := range []*verbs.MR{w.rmr, w.smr} {
		if mr != nil {
			mr.Close()
		}
	}
	if w.qp != nil {
		w.qp.Close()
	}
	for _, q := range []*tool.CQWaiter{w.scq, w.rcq} {
		if q != nil {
			q.Close()
		}
	}
	if w.pd != nil {
		w.pd.Close()
	}
}

func (w *Conn) LocalAddr() net.Addr                { return w.local }
func (w *Conn) RemoteAddr() net.Addr               { return w.remote }
func (w *Conn) SetDeadline(t time.Time) error      { w.deadline = t; return nil }
func (w *Conn) SetReadDeadline(t time.Time) error  { w.deadline = t; return nil }
func (w *Conn) SetWriteDeadline(t time.Time) error { return nil }

// ReadMessage reads one whole received message: a key record's length tells its
// layout (perftestcomm.MessageConn).
func (w *Conn) ReadMessage() ([]byte, error) {
	one := make([]byte, 1)
	if _, err := w.Read(one); err != nil {
		return nil, err
	}
	rest := w.cur
	w.cur = nil
	return append(one, rest...), nil
}

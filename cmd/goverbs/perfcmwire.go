package main

import (
	"context"
	bin "encoding/binary"
	"errors"
	"fmt"
	"net"
	"os"
	"sync"
	"time"

	"github.com/goverbs/goverbs/cm"
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
// connect the data QPs (perfcm.go), on the same port. At the end both sides destroy
// the exchange's context, which disconnects its rdma_cm id.
//
// cmWire is that exchange QP as a net.Conn, so that the exchanges over TCP and over
// rdma_cm share their code: every Write is one SEND, and Read reads the received
// messages as a stream. Like perftest's, it keeps one receive posted: each message is
// answered before the next is sent (ctx_xchg_data_rdma), and the receive is reposted
// before the answer goes, so a SEND always finds it. Two goverbs tools with -R speak
// perftest's exchange too (hello is plain with -R), so nothing longer goes over it.

// cmWireMsgLen is the longest message of the exchange over rdma_cm: a binary key
// record (64 bytes; the version is 16, the others 8 or fewer). perftest's receive is
// larger, to hold its parameter negotiation (perftest_parameters_negotiate), which it
// sends only to a peer of version 6.28 or later; we announce 6.06.
const cmWireMsgLen = keyBinLen

type cmWire struct {
	conn          *cm.Conn
	pd            *verbs.PD
	qp            *verbs.QP
	scq, rcq      *cqWaiter
	rbuf, sbuf    []byte
	rmr, smr      *verbs.MR
	msg           [cmWireMsgLen]byte // the message last received, copied out of rbuf
	cur           []byte             // its unread rest
	deadline      time.Time
	closed        chan struct{}
	once          sync.Once
	wc            [1]verbs.WC
	local, remote net.Addr
}

// newCMWire creates the exchange QP in INIT with its receive posted (perftest posts it
// before rdma_connect and rdma_accept).
func newCMWire(dev *verbs.Device) (*cmWire, error) {
	w := &cmWire{closed: make(chan struct{})}
	err := w.open(dev)
	if err != nil {
		w.release()
		return nil, fmt.Errorf("-R: the exchange's QP: %v", err)
	}
	return w, nil
}

func (w *cmWire) open(dev *verbs.Device) error {
	var err error
	if w.pd, err = dev.AllocPD(); err != nil {
		return err
	}
	if w.scq, err = newCQ(dev, 1, true, false); err != nil {
		return err
	}
	if w.rcq, err = newCQ(dev, 1, true, false); err != nil {
		return err
	}
	if w.qp, err = w.pd.CreateQP(verbs.QPInitAttr{Type: verbs.QPTypeRC, SendCQ: w.scq.cq, RecvCQ: w.rcq.cq,
		Cap: verbs.QPCap{MaxSendWR: 1, MaxRecvWR: 1, MaxSendSGE: 1, MaxRecvSGE: 1}}); err != nil {
		return err
	}
	if err = cm.InitQP(w.qp); err != nil {
		return err
	}
	w.rbuf, w.sbuf = make([]byte, cmWireMsgLen), make([]byte, cmWireMsgLen)
	if w.rmr, err = w.pd.RegMR(w.rbuf, verbs.AccessLocalWrite); err != nil {
		return err
	}
	if w.smr, err = w.pd.RegMR(w.sbuf, 0); err != nil {
		return err
	}
	return w.postRecv()
}

func (w *cmWire) postRecv() error {
	return w.qp.PostRecv(verbs.RecvWR{SGL: []verbs.SGE{w.rmr.SGE(0, cmWireMsgLen)}})
}

// param is the exchange connection's rdma_conn_param (rdma_client_connect and
// rdma_server_connect: no READs for a SEND-only QP, retry counts 7).
func (w *cmWire) param() *cm.Param {
	return &cm.Param{QP: w.qp, RetryCount: 7, RNRRetryCount: 7}
}

func (w *cmWire) connected(c *cm.Conn) {
	w.conn = c
	w.local = &net.UDPAddr{IP: c.LocalAddr().Addr().AsSlice(), Port: int(c.LocalAddr().Port())}
	w.remote = &net.UDPAddr{IP: c.RemoteAddr().Addr().AsSlice(), Port: int(c.RemoteAddr().Port())}
}

// dialCMWire is establish_connection's client side: one rdma_connect to the server's
// port, not retried (perftest's client fails at once when no server listens).
func dialCMWire(ctx context.Context, c *perfCM) (*cmWire, error) {
	w, err := newCMWire(c.agent.Device())
	if err != nil {
		return nil, err
	}
	conn, err := c.agent.Dial(ctx, c.server, w.param())
	if err != nil {
		w.release()
		var rej *cm.RejectError
		if errors.As(err, &rej) {
			return nil, fmt.Errorf("-R: couldn't connect the exchange to %v: RDMA_CM_EVENT_REJECTED, error %d (is a server listening?)", c.server, rej.Reason)
		}
		return nil, fmt.Errorf("-R: couldn't connect the exchange to %v: %v", c.server, err)
	}
	w.connected(conn)
	c.wire = w
	return w, nil
}

// acceptCMWire is establish_connection's server side: the first request on the port
// is the exchange's; the data QPs' follow later (perfcm.go).
func acceptCMWire(ctx context.Context, c *perfCM) (*cmWire, error) {
	req, err := c.l.Accept(ctx)
	if err != nil {
		return nil, fmt.Errorf("-R: waiting for the client's connection: %v", err)
	}
	w, err := newCMWire(c.agent.Device())
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
	c.wire = w
	return w, nil
}

// Write sends b as one SEND and waits for its completion, as perftest's
// rdma_write_data. A message longer than the peer's receive is refused, unsent.
func (w *cmWire) Write(b []byte) (int, error) {
	if len(b) > cmWireMsgLen {
		return 0, fmt.Errorf("a %d-byte message is longer than the exchange's %d-byte receive", len(b), cmWireMsgLen)
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
		return 0, fmt.Errorf("the exchange's SEND failed: %v", wcError(&wc))
	}
	return n, nil
}

// Read returns what is left of the last message, or waits for the next; the receive
// is posted again at once, before this side answers.
func (w *cmWire) Read(b []byte) (int, error) {
	if len(w.cur) == 0 {
		wc, err := w.next(w.rcq, w.deadline)
		if err != nil {
			return 0, err
		}
		if wc.Status != verbs.WCSuccess {
			return 0, fmt.Errorf("the exchange's RECV failed: %v", wcError(&wc))
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
func (w *cmWire) next(q *cqWaiter, deadline time.Time) (verbs.WC, error) {
	poll := func() (verbs.WC, bool, error) {
		n, err := q.cq.Poll(w.wc[:])
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
		if err := q.cq.RequestNotify(false); err != nil {
			return verbs.WC{}, err
		}
		if wc, ok, err := poll(); err != nil || ok {
			return wc, err
		}
		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		_, err := q.ch.Wait(ctx)
		cancel()
		if err != nil && !errors.Is(err, context.DeadlineExceeded) {
			return verbs.WC{}, err
		}
	}
}

// Close disconnects the exchange, as perftest's destroy_ctx of its comm context does on
// both sides (rdma_disconnect), and frees the QP. Once.
func (w *cmWire) Close() error {
	w.once.Do(w.close)
	return nil
}

func (w *cmWire) close() {
	close(w.closed)
	if w.conn != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		w.conn.Disconnect(ctx, nil)
		cancel()
		w.conn.Close()
	}
	w.release()
}

func (w *cmWire) release() {
	for _, mr := range []*verbs.MR{w.rmr, w.smr} {
		if mr != nil {
			mr.Close()
		}
	}
	if w.qp != nil {
		w.qp.Close()
	}
	for _, q := range []*cqWaiter{w.scq, w.rcq} {
		if q != nil {
			q.close()
		}
	}
	if w.pd != nil {
		w.pd.Close()
	}
}

func (w *cmWire) LocalAddr() net.Addr                { return w.local }
func (w *cmWire) RemoteAddr() net.Addr               { return w.remote }
func (w *cmWire) SetDeadline(t time.Time) error      { w.deadline = t; return nil }
func (w *cmWire) SetReadDeadline(t time.Time) error  { w.deadline = t; return nil }
func (w *cmWire) SetWriteDeadline(t time.Time) error { return nil }

// loopbackCM runs --loopback -R: the server's side in a goroutine, both exchanging over
// rdma_cm as two perftests do.
func loopbackCM(intr *interrupter, srv, cli *perfSide) error {
	errc := make(chan error, 1)
	go func() {
		defer srv.closeCM() // the server's goroutine owns its CM, even when the client fails
		w, err := acceptCMWire(intr.ctx, srv.cm)
		if err != nil {
			errc <- err
			return
		}
		errc <- srv.serve(w)
	}()
	w, err := dialCMWire(intr.ctx, cli.cm)
	if err != nil {
		return err
	}
	intr.onStop(func() { w.Close() })
	if err := cli.client(w); err != nil {
		return err
	}
	if err := <-errc; err != nil {
		return fmt.Errorf("loopback server: %v", err)
	}
	return nil
}

// perftest's struct pingpong_dest as rdma_write_keys sends it (HAVE_ENDIAN: every field
// big-endian, the GID as is) on x86_64: lid, out_reads, qpn, psn, rkey at 0..20, 4 bytes
// of padding, vaddr at 24; then since perftest 6.28 tail_markers_vaddr at 32, and the
// GID, srqn and gid_index (56 bytes in all before, 64 since). With -R the data QPs are
// connected by the CM, so what matters of a record is its RKey and VAddr, at the same
// offsets in both.
const (
	keyBinLen    = 64
	keyBinLenOld = 56
	keyBinVer    = 6.28 // the first perftest with tail_markers_vaddr
)

func keyRecordBin(d perfDest, peerVer float64) []byte {
	n, gid := keyBinLen, 40
	if peerVer < keyBinVer {
		n, gid = keyBinLenOld, 32
	}
	b := make([]byte, n)
	be := bin.BigEndian
	be.PutUint32(b[0:], uint32(d.lid))
	be.PutUint32(b[4:], uint32(d.outReads))
	be.PutUint32(b[8:], d.qpn)
	be.PutUint32(b[12:], d.psn)
	be.PutUint32(b[16:], d.rkey)
	be.PutUint64(b[24:], d.vaddr)
	copy(b[gid:], d.gid[:])
	return b // srqn and gid_index 0: no XRC, and perftest keeps its own gid_index
}

func parseKeyRecordBin(b []byte) (perfDest, error) {
	gid := 40
	switch len(b) {
	case keyBinLen:
	case keyBinLenOld:
		gid = 32
	default:
		return perfDest{}, fmt.Errorf("the peer's QP record has %d bytes, not perftest's %d or %d", len(b), keyBinLenOld, keyBinLen)
	}
	be := bin.BigEndian
	d := perfDest{lid: uint16(be.Uint32(b[0:])), outReads: int(be.Uint32(b[4:])), qpn: be.Uint32(b[8:]) & 0xffffff,
		psn: be.Uint32(b[12:]) & 0xffffff, rkey: be.Uint32(b[16:]), vaddr: be.Uint64(b[24:])}
	copy(d.gid[:], b[gid:gid+16])
	return d, nil
}

// readMsg reads one whole received message: a key record's length tells its layout.
func (w *cmWire) readMsg() ([]byte, error) {
	one := make([]byte, 1)
	if _, err := w.Read(one); err != nil {
		return nil, err
	}
	rest := w.cur
	w.cur = nil
	return append(one, rest...), nil
}

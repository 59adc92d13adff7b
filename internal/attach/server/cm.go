//go:build linux

package server

import (
	"errors"
	"fmt"
	"net"
	"os"
	"sync"
	"syscall"

	"github.com/goverbs/goverbs/cm"
	"github.com/goverbs/goverbs/cm/mad"
	"github.com/goverbs/goverbs/internal/attach"
	"github.com/goverbs/goverbs/verbs/driver"
)

// rdma_cm for the device's clients (docs/attach-protocol.md, "rdma_cm"): the device's
// one cm.Service, shared by every session as the kernel's rdma_cm is by processes.
// A session's CM state is its channels (each an event socket) and its ids, named by
// handles of their own; the ids are destroyed with the session, which disconnects
// its connections and rejects its handshakes as the kernel does for a dead process.

// cmEventQueue bounds the events waiting for a channel's reader; past it events are
// dropped (a client that reads none stalls nobody else).
const cmEventQueue = 1024

// A session's CM objects are bounded, as a process's descriptors are: past these,
// ENOMEM (and a request for a listener of a full session is rejected).
const (
	maxCMChannels = 64
	maxCMIDs      = 4096
)

var errCMLimit = fmt.Errorf("too many rdma_cm channels or ids in this process: %w", syscall.ENOMEM)

type cmChan struct {
	h   uint32
	ev  *net.UnixConn // our end
	q   chan []byte
	ids int
}

type cmID struct {
	h   uint32
	tok uint64
	uid uint64
	ch  *cmChan
}

type cmState struct {
	mu     sync.Mutex
	next   uint32
	chans  map[uint32]*cmChan
	ids    map[uint32]*cmID
	byTok  map[uint64]*cmID
	closed bool
}

var (
	errCMHandle = fmt.Errorf("no such rdma_cm channel or id in this process: %w", syscall.EINVAL)
	errNotOurQP = fmt.Errorf("the QP number is not one of this process's QPs: %w", syscall.EINVAL)
)

func (c *cmState) handle() uint32 {
	c.next++
	for c.next == 0 || c.chans[c.next] != nil || c.ids[c.next] != nil {
		c.next++
	}
	return c.next
}

// cmCommand runs an rdma_cm command.
func (s *session) cmCommand(op attach.Op, r *attach.Reader, w *attach.Writer) ([]*os.File, error) {
	svc := s.d.cm
	c := &s.cm
	c.mu.Lock()
	if c.closed || c.chans == nil {
		if c.closed {
			c.mu.Unlock()
			return nil, driver.NewError(driver.ErrClosed, "device is closing")
		}
		c.chans, c.ids, c.byTok = map[uint32]*cmChan{}, map[uint32]*cmID{}, map[uint64]*cmID{}
	}
	c.mu.Unlock()
	switch op {
	case attach.OpCMCreateChannel:
		return s.cmCreateChannel(w)
	case attach.OpCMDestroyChannel:
		h := r.U32()
		if r.Err != nil {
			return nil, nil
		}
		c.mu.Lock()
		defer c.mu.Unlock()
		ch := c.chans[h]
		if ch == nil {
			return nil, errCMHandle
		}
		if ch.ids > 0 {
			return nil, fmt.Errorf("the channel has ids: %w", syscall.EBUSY)
		}
		delete(c.chans, h)
		close(ch.q)
		return nil, nil
	case attach.OpCMCreateID:
		chh, space := r.U32(), r.U16()
		r.U16()
		uid := r.U64()
		if r.Err != nil {
			return nil, nil
		}
		c.mu.Lock()
		ch := c.chans[chh]
		c.mu.Unlock()
		if ch == nil {
			return nil, errCMHandle
		}
		tok, err := svc.NewID(mad.PortSpace(space), s.cmEvent)
		if err != nil {
			return nil, err
		}
		c.mu.Lock()
		if c.closed || c.chans[chh] != ch {
			c.mu.Unlock()
			svc.Destroy(tok)
			return nil, errCMHandle
		}
		if len(c.ids) >= maxCMIDs {
			c.mu.Unlock()
			svc.Destroy(tok)
			return nil, errCMLimit
		}
		id := &cmID{h: c.handle(), tok: tok, uid: uid, ch: ch}
		c.ids[id.h], c.byTok[tok] = id, id
		ch.ids++
		c.mu.Unlock()
		w.U32(id.h)
		return nil, nil
	}
	h := r.U32()
	if r.Err != nil {
		return nil, nil
	}
	c.mu.Lock()
	id := c.ids[h]
	c.mu.Unlock()
	if id == nil {
		return nil, errCMHandle
	}
	switch op {
	case attach.OpCMDestroyID:
		s.cmDestroy(id)
	case attach.OpCMBindAddr:
		a := r.Addr()
		if r.Err != nil {
			return nil, nil
		}
		got, err := svc.Bind(id.tok, a)
		if err != nil {
			return nil, err
		}
		w.PutAddr(got)
	case attach.OpCMResolveAddr:
		r.U32() // timeout_ms: on RoCE the answer is immediate
		src, dst := r.Addr(), r.Addr()
		if r.Err != nil {
			return nil, nil
		}
		return nil, svc.ResolveAddr(id.tok, src.Addr(), dst)
	case attach.OpCMResolveRoute:
		r.U32() // timeout_ms
		if r.Err != nil {
			return nil, nil
		}
		return nil, svc.ResolveRoute(id.tok)
	case attach.OpCMQueryAddr:
		l, rem, err := svc.Query(id.tok)
		if err != nil {
			return nil, err
		}
		w.PutAddr(l)
		w.PutAddr(rem)
	case attach.OpCMListen:
		backlog := r.U32()
		if r.Err != nil {
			return nil, nil
		}
		return nil, svc.Listen(id.tok, int(min(backlog, 1024)))
	case attach.OpCMConnect, attach.OpCMAccept:
		p := r.ConnParam()
		if r.Err != nil {
			return nil, nil
		}
		// A UDP id's SIDR_REQ carries no QP: its number is not checked there.
		if (op == attach.OpCMAccept || !svc.IsUDP(id.tok)) && !s.ownsQPN(p.QPN) {
			return nil, errNotOurQP
		}
		sp := cm.ServiceParam{ResponderResources: p.ResponderResources, InitiatorDepth: p.InitiatorDepth,
			RetryCount: p.RetryCount, RNRRetryCount: p.RNRRetryCount, SRQ: p.SRQ, QPN: p.QPN, PrivateData: p.PrivateData}
		if op == attach.OpCMConnect {
			return nil, svc.Connect(id.tok, &sp)
		}
		return nil, svc.Accept(id.tok, &sp)
	case attach.OpCMReject:
		n := int(r.U8())
		priv := make([]byte, n)
		r.Fixed(priv)
		if r.Err != nil {
			return nil, nil
		}
		return nil, svc.Reject(id.tok, priv)
	case attach.OpCMEstablish:
		return nil, svc.Establish(id.tok)
	case attach.OpCMDisconnect:
		return nil, svc.Disconnect(id.tok)
	case attach.OpCMJoinMcast:
		g := r.Addr()
		sendOnly := r.U8() != 0
		if r.Err != nil {
			return nil, nil
		}
		return nil, svc.Join(id.tok, g.Addr(), sendOnly)
	case attach.OpCMLeaveMcast:
		g := r.Addr()
		if r.Err != nil {
			return nil, nil
		}
		return nil, svc.Leave(id.tok, g.Addr())
	case attach.OpCMSetOption:
		opt, val := r.U32(), r.U32()
		if r.Err != nil {
			return nil, nil
		}
		return nil, svc.SetOption(id.tok, cm.Option(opt), val)
	case attach.OpCMNotify:
		ev := r.U32()
		if r.Err != nil {
			return nil, nil
		}
		return nil, svc.Notify(id.tok, driver.EventType(ev))
	case attach.OpCMInitQPAttr:
		st := r.U8()
		if r.Err != nil {
			return nil, nil
		}
		a, mask, err := svc.InitQPAttr(id.tok, driver.QPState(st))
		if err != nil {
			return nil, err
		}
		w.U32(uint32(mask))
		w.PutQPAttr(&a)
	default:
		return nil, driver.NewError(errors.ErrUnsupported, "unknown command")
	}
	return nil, nil
}

// ownsQPN reports whether qpn is one of the session's QPs, or in its own engine's range.
func (s *session) ownsQPN(qpn uint32) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.own != nil {
		if first, last := s.own.QPNs(); qpn >= first && qpn <= last {
			return true // a QP of the client's own engine
		}
	}
	for _, o := range s.objs {
		if q, ok := o.(*qpObj); ok && q.qp.QPN() == qpn {
			return true
		}
	}
	return false
}

func (s *session) cmCreateChannel(w *attach.Writer) ([]*os.File, error) {
	ev, peer, err := eventSocket("attach-cm-events")
	if err != nil {
		return nil, err
	}
	ch := &cmChan{ev: ev, q: make(chan []byte, cmEventQueue)}
	c := &s.cm
	c.mu.Lock()
	if c.closed || len(c.chans) >= maxCMChannels {
		c.mu.Unlock()
		ch.ev.Close()
		peer.Close()
		if !c.closed {
			return nil, errCMLimit
		}
		return nil, driver.NewError(driver.ErrClosed, "device is closing")
	}
	ch.h = c.handle()
	c.chans[ch.h] = ch
	c.mu.Unlock()
	go ch.write()
	w.U32(ch.h)
	return []*os.File{peer}, nil
}

// write sends the channel's events until it is destroyed (its queue closed) or its
// reader has gone.
func (ch *cmChan) write() {
	defer ch.ev.Close()
	for m := range ch.q {
		if _, err := ch.ev.Write(m); err != nil {
			for range ch.q {
			}
			return
		}
	}
}

// cmDestroy destroys an id: the service sends what its end needs (REJ, DREQ).
func (s *session) cmDestroy(id *cmID) {
	c := &s.cm
	c.mu.Lock()
	if c.ids[id.h] != id {
		c.mu.Unlock()
		return
	}
	delete(c.ids, id.h)
	delete(c.byTok, id.tok)
	id.ch.ids--
	c.mu.Unlock()
	s.d.cm.Destroy(id.tok)
}

// cmEvent is the handler of every id of the session: the service calls it from the
// CM's goroutines, so it only queues. A CONNECT_REQUEST's new id becomes the
// session's on the listener's channel.
func (s *session) cmEvent(e cm.ServiceEvent) {
	c := &s.cm
	c.mu.Lock()
	var id *cmID
	var listen uint32
	if e.Kind == cm.SvcConnectRequest {
		l := c.byTok[e.Listen]
		if l == nil || c.closed || len(c.ids) >= maxCMIDs {
			c.mu.Unlock()
			go s.d.cm.Destroy(e.ID) // the listener is gone: the request is rejected
			return
		}
		id = &cmID{h: c.handle(), tok: e.ID, uid: l.uid, ch: l.ch}
		c.ids[id.h], c.byTok[e.ID] = id, id
		l.ch.ids++
		listen = l.h
	} else if id = c.byTok[e.ID]; id == nil {
		c.mu.Unlock()
		return
	}
	m := attach.PutCMEvent(make([]byte, 0, attach.CMEventHdr+len(e.Param.PrivateData)), &attach.CMEvent{
		Event: uint32(e.Kind), Status: int32(e.Status), UID: id.uid, ID: id.h, ListenID: listen,
		Local: e.Local, Remote: e.Remote, QKey: e.QKey, AH: e.AH, Param: attach.ConnParam{ResponderResources: e.Param.ResponderResources,
			InitiatorDepth: e.Param.InitiatorDepth, RetryCount: e.Param.RetryCount, RNRRetryCount: e.Param.RNRRetryCount,
			SRQ: e.Param.SRQ, QPN: e.Param.QPN, PrivateData: e.Param.PrivateData}})
	select {
	case id.ch.q <- m:
	default:
	}
	c.mu.Unlock()
}

// cmTeardown destroys the session's ids and channels, as the kernel does when a
// process's rdma_cm file closes: connections are disconnected, handshakes rejected,
// ports freed.
func (s *session) cmTeardown() {
	c := &s.cm
	c.mu.Lock()
	c.closed = true
	ids := make([]*cmID, 0, len(c.ids))
	for _, id := range c.ids {
		ids = append(ids, id)
	}
	c.mu.Unlock()
	for _, id := range ids {
		s.cmDestroy(id)
	}
	c.mu.Lock()
	for h, ch := range c.chans {
		delete(c.chans, h)
		close(ch.q)
	}
	c.mu.Unlock()
}

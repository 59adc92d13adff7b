package rdmanet

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"sync"
	"time"

	"github.com/goverbs/goverbs/cm"
)

// backlog is how many connections may be in their handshake or waiting for Accept at
// once; the CM refuses more requests (REJ, "no resources").
const backlog = cm.DefaultBacklog

// handshakeTimeout bounds a handshake once the request is taken. It is not cut short
// by Listener.Close: the CM's Accept abandoned after its REP would leave the dialer
// (which may already have sent its RTU) connected to nobody, never told. A handshake
// finished after Close is closed at once instead, which the dialer hears of.
const handshakeTimeout = 5 * time.Second

// Listener takes rdmanet connections on one port of a device: an rdma_cm listener on
// the wire. It implements net.Listener.
type Listener struct {
	dev    *device
	cml    *cm.Listener
	addr   *Addr
	ctx    context.Context
	cancel context.CancelFunc
	slots  chan struct{} // one per handshake in progress or connection not yet taken
	ready  chan *Conn
	errc   chan error // the CM listener's failure
	once   sync.Once
	wg     sync.WaitGroup
}

// Listen listens on address ("host:port") on network "rdma": host is the IP address
// of an RDMA device (opened on demand, shared in the process), port an rdma_cm port
// in the TCP port space; port 0 picks a free one, which Addr reports.
// An error is a *net.OpError, as net.Listen's, naming the address once it is known.
func Listen(network, address string) (net.Listener, error) {
	op := &net.OpError{Op: "listen", Net: network}
	l, err := listen(network, address, op)
	if err != nil {
		op.Err = err
		return nil, op
	}
	return l, nil
}

// listen listens, filling in op's address once it is resolved.
func listen(network, address string, op *net.OpError) (*Listener, error) {
	laddr, err := deviceAddr(network, address, op)
	if err != nil {
		return nil, err
	}
	dev, err := acquireDevice(laddr.Addr())
	if err != nil {
		return nil, err
	}
	cml, err := dev.agent.Listen(laddr.Port(), backlog)
	if err != nil {
		dev.release()
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	l := &Listener{dev: dev, cml: cml, addr: &Addr{cml.Addr()}, ctx: ctx, cancel: cancel,
		slots: make(chan struct{}, backlog), ready: make(chan *Conn), errc: make(chan error, 1)}
	l.wg.Add(1)
	go l.serve()
	return l, nil
}

// deviceAddr resolves the local address of a listener or a datagram socket, which must
// name a device (not the unspecified address), filling in op's address once it is known.
func deviceAddr(network, address string, op *net.OpError) (netip.AddrPort, error) {
	if network != Network {
		return netip.AddrPort{}, net.UnknownNetworkError(network)
	}
	laddr, err := resolve(context.Background(), address)
	if err != nil {
		return netip.AddrPort{}, err
	}
	op.Addr = &Addr{laddr}
	if !laddr.Addr().IsValid() || laddr.Addr().IsUnspecified() {
		return netip.AddrPort{}, fmt.Errorf("rdmanet: %s needs a device's address, not %q", op.Op, address)
	}
	return laddr, nil
}

// serve takes the CM's requests and runs each handshake in its own goroutine, so a
// slow or vanished dialer delays nobody else.
func (l *Listener) serve() {
	defer l.wg.Done()
	for {
		select {
		case l.slots <- struct{}{}:
		case <-l.ctx.Done():
			return
		}
		req, err := l.cml.Accept(l.ctx)
		if err != nil {
			<-l.slots
			if l.ctx.Err() == nil {
				l.errc <- err
			}
			return
		}
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			c, err := l.handshake(req)
			if err != nil {
				<-l.slots
				return
			}
			select {
			case l.ready <- c:
			case <-l.ctx.Done():
				// Nobody took it: Listener.Close (waiting on wg) returns once it is
				// gone, its hold on the device with it.
				<-l.slots
				c.Close()
				<-c.tornDown
			}
		}()
	}
}

// handshake answers one request: a peer whose private data is not rsockets' rs_conn_data
// is refused.
func (l *Listener) handshake(req *cm.Request) (*Conn, error) {
	peer, err := parseConnData(req.PrivateData)
	if err != nil {
		req.Reject(nil)
		return nil, err
	}
	ep, err := newEndpoint(l.dev.pd)
	if err != nil {
		req.Reject(nil)
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), handshakeTimeout)
	defer cancel()
	cmc, err := req.Accept(ctx, &cm.Param{QP: ep.qp, PrivateData: ep.connData().marshal(nil),
		ResponderResources: 1, InitiatorDepth: 1})
	if err != nil {
		ep.close()
		return nil, err
	}
	l.dev.retain()
	return newCMConn(ep, peer, cmc, l.dev), nil
}

// Accept waits for the next connection; Close unblocks it with net.ErrClosed.
func (l *Listener) Accept() (net.Conn, error) {
	select {
	case c := <-l.ready:
		<-l.slots
		return c, nil
	case err := <-l.errc:
		l.errc <- err
		return nil, l.opErr(err)
	case <-l.ctx.Done():
		return nil, l.opErr(net.ErrClosed)
	}
}

func (l *Listener) opErr(err error) error {
	return &net.OpError{Op: "accept", Net: Network, Addr: l.addr, Err: err}
}

// Close stops listening; connections already accepted stay up, and those set up but
// not yet accepted are closed and released before Close returns.
func (l *Listener) Close() error {
	err := net.ErrClosed
	l.once.Do(func() {
		l.cancel()
		err = l.cml.Close()
		l.wg.Wait()
		err = errors.Join(err, l.dev.release())
	})
	if errors.Is(err, net.ErrClosed) {
		return l.opErr(err)
	}
	return err
}

// Addr returns the listener's address, with the port chosen when Listen was given 0.
func (l *Listener) Addr() net.Addr { return l.addr }

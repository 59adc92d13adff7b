package rdmanet

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"time"

	"github.com/goverbs/goverbs/cm"
)

// disconnectTimeout bounds how long a closed connection's CM waits for the peer's
// DREP; it runs after Close has returned.
const disconnectTimeout = 5 * time.Second

// Dialer connects to rdmanet listeners.
type Dialer struct {
	// LocalAddr is the IP address of the RDMA device to connect from. The zero value
	// uses the address a route to the server leaves from, as rdma_resolve_addr does
	// without a source address.
	LocalAddr netip.Addr
	// Timeout bounds the connection's setup; zero means none beyond ctx's (the CM's
	// own retries end a handshake with a silent peer).
	Timeout time.Duration
}

// Dial connects to address ("host:port") on network "rdma" with the zero Dialer.
func Dial(network, address string) (net.Conn, error) {
	var d Dialer
	return d.DialContext(context.Background(), network, address)
}

// DialContext connects to address on network "rdma": the CM's handshake (REQ, REP,
// RTU) carries each side's ring in its private data. ctx ending first abandons it.
// An error is a *net.OpError, as net.Dial's, naming the server's address once it is
// known.
func (d *Dialer) DialContext(ctx context.Context, network, address string) (net.Conn, error) {
	op := &net.OpError{Op: "dial", Net: network}
	c, err := d.dial(ctx, network, address, op)
	if err != nil {
		op.Err = err
		return nil, op
	}
	return c, nil
}

// dial connects, filling in op's address once it is resolved.
func (d *Dialer) dial(ctx context.Context, network, address string, op *net.OpError) (*Conn, error) {
	if network != Network {
		return nil, net.UnknownNetworkError(network)
	}
	if d.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, d.Timeout)
		defer cancel()
	}
	raddr, err := resolve(ctx, address)
	if err != nil {
		return nil, err
	}
	if !raddr.Addr().IsValid() || raddr.Port() == 0 {
		return nil, fmt.Errorf("rdmanet: dial needs a host and a port, not %q", address)
	}
	op.Addr = &Addr{raddr}
	local := d.LocalAddr
	if !local.IsValid() {
		if local, err = cm.SourceAddr(raddr.Addr()); err != nil {
			return nil, err
		}
	}
	dev, err := acquireDevice(local)
	if err != nil {
		return nil, err
	}
	ep, err := newEndpoint(dev.pd)
	if err != nil {
		dev.release()
		return nil, err
	}
	cmc, err := dev.agent.Dial(ctx, raddr, &cm.Param{QP: ep.qp,
		PrivateData: ep.connData().marshal(nil), ResponderResources: 1, InitiatorDepth: 1})
	if err != nil {
		ep.close()
		dev.release()
		return nil, err
	}
	peer, err := parseConnData(cmc.PrivateData())
	if err != nil {
		cmc.Close()
		ep.close()
		dev.release()
		return nil, err
	}
	return newCMConn(ep, peer, cmc, dev), nil
}

// newCMConn starts the stream over a connection the CM made.
func newCMConn(ep *endpoint, peer connData, cmc *cm.Conn, dev *device) *Conn {
	disconnect := func() {
		ctx, cancel := context.WithTimeout(context.Background(), disconnectTimeout)
		defer cancel()
		cmc.Disconnect(ctx, nil)
		cmc.Close()
	}
	return newConn(ep, peer, &Addr{cmc.LocalAddr()}, &Addr{cmc.RemoteAddr()}, disconnect,
		func() { dev.release() })
}

// resolve parses "host:port": host an IP address or a name to look up, port a number
// or a service name of the TCP port space.
func resolve(ctx context.Context, address string) (netip.AddrPort, error) {
	host, port, err := net.SplitHostPort(address)
	if err != nil {
		return netip.AddrPort{}, err
	}
	p, err := net.DefaultResolver.LookupPort(ctx, "tcp", port)
	if err != nil {
		return netip.AddrPort{}, err
	}
	if host == "" {
		return netip.AddrPortFrom(netip.Addr{}, uint16(p)), nil
	}
	ip, err := netip.ParseAddr(host)
	if err != nil {
		ips, lerr := net.DefaultResolver.LookupNetIP(ctx, "ip", host)
		if lerr != nil {
			return netip.AddrPort{}, lerr
		}
		if len(ips) == 0 {
			return netip.AddrPort{}, errors.New("rdmanet: no address for " + host)
		}
		ip = ips[0]
	}
	return netip.AddrPortFrom(ip.Unmap(), uint16(p)), nil
}

package rdmanet

import "net/netip"

// Network is the network name of this package's addresses, listeners and connections.
const Network = "rdma"

// Addr is the address of an rdmanet endpoint: the IP address of its RDMA device and a
// port: an rdma_cm port (in the TCP port space) for a stream, a UDP port for a datagram
// socket (PacketConn).
type Addr struct {
	AddrPort netip.AddrPort
}

// Network returns "rdma".
func (a *Addr) Network() string { return Network }

// String returns "host:port", as net.TCPAddr does.
func (a *Addr) String() string { return a.AddrPort.String() }

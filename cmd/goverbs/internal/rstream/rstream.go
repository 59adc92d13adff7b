// Package rstream is librdmacm's rsockets benchmarks: rstream, a stream-socket
// benchmark over package rdmanet (or Go's TCP for comparison), and udpong, its
// datagram sibling over rdmanet's PacketConn (or Go's UDP).
package rstream

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"strconv"
	"strings"

	"github.com/goverbs/goverbs/cm"
	"github.com/goverbs/goverbs/cmd/goverbs/internal/tool"
	"github.com/goverbs/goverbs/rdmanet"
	"github.com/goverbs/goverbs/verbs"
)

// rstream is librdmacm's rstream: a stream-socket benchmark whose client and server
// trade transfers of a size, first one way and then back, and report bandwidth and
// the time per transfer. Here the stream is package rdmanet's net.Conn; --tcp (or
// -T s, rstream's "use standard sockets") runs the same test over Go's net.TCPConn,
// written as a Go program would use it (plain Read and Write, Go's defaults:
// TCP_NODELAY on), so the two compare in one run. Flags, test sizes, transfer counts
// and the result table are rstream.c's (rdma-core librdmacm/examples), but for -i
// (rsockets' inline size: rdmanet has no such knob) and -k (keepalive: rdmanet has
// none), which are not offered.

const defaultPort = "7471"

// testSizes is rstream's list of test sizes: by default the sizes marked 0, with
// -S all every one.
var testSizes = []struct {
	size int
	all  bool // only with -S all
}{
	{1 << 6, false},
	{1 << 7, true}, {1<<7 + 1<<6, true},
	{1 << 8, true}, {1<<8 + 1<<7, true},
	{1 << 9, true}, {1<<9 + 1<<8, true},
	{1 << 10, true}, {1<<10 + 1<<9, true},
	{1 << 11, true}, {1<<11 + 1<<10, true},
	{1 << 12, false}, {1<<12 + 1<<11, true},
	{1 << 13, true}, {1<<13 + 1<<12, true},
	{1 << 14, true}, {1<<14 + 1<<13, true},
	{1 << 15, true}, {1<<15 + 1<<14, true},
	{1 << 16, false}, {1<<16 + 1<<15, true},
	{1 << 17, true}, {1<<17 + 1<<16, true},
	{1 << 18, true}, {1<<18 + 1<<17, true},
	{1 << 19, true}, {1<<19 + 1<<18, true},
	{1 << 20, false}, {1<<20 + 1<<19, true},
	{1 << 21, true}, {1<<21 + 1<<20, true},
	{1 << 22, true}, {1<<22 + 1<<21, true},
}

type options struct {
	server     string // -s: the server's address; empty = this side is the server
	bind       string // -b
	format     string // -f
	bufSize    int    // -B
	iterations int    // -I
	count      int    // -C
	size       string // -S
	port       string // -p
	tests      []string
	tcp        bool
	loop       bool      // --loop: the server and the client in this process
	out        io.Writer // where the table goes (the --loop server's goes nowhere)
	verify     bool
	custom     bool         // -I, -C or a number for -S: one test of these parameters
	ready      chan<- error // --loop's server says here that it listens (or why not)
	all        bool         // -S all
	xferSize   int
}

func Run(cmd *tool.Command, args []string) error {
	o := options{iterations: 1, count: 1000, xferSize: 1000}
	fs := tool.NewFlagSet(cmd)
	fs.ArgsUsage = "" // the server's address goes after -s, as in librdmacm's rstream
	fs.StringOpt(&o.server, "s", "server", "", "connect to the server at `ADDR` (without it, be the server)")
	fs.StringOpt(&o.bind, "b", "bind", "", "`ADDR` to bind: the server listens there, the client connects from there")
	fs.StringOpt(&o.format, "f", "format", "", "address `FORMAT`: name, ip or ipv6 (gid is InfiniBand's, not RoCE's)")
	fs.IntOpt(&o.bufSize, "B", "buffer", 0, "socket buffer `SIZE` in bytes (TCP; rdmanet's ring has a fixed size)")
	fs.IntOpt(&o.iterations, "I", "iterations", 1, "`N` iterations (a custom test)")
	fs.IntOpt(&o.count, "C", "count", 1000, "`N` transfers each way per iteration (a custom test)")
	fs.StringOpt(&o.size, "S", "size", "", "transfer `SIZE` in bytes (a custom test), or 'all' for every test size")
	fs.StringOpt(&o.port, "p", "port", defaultPort, "`PORT`")
	fs.StringArrayVarP(&o.tests, "test", "T", nil, "test `OPTION`: s|socket (Go TCP, as --tcp), v|verify (check the data), b|blocking (the only mode in Go)")
	fs.BoolOpt(&o.tcp, "", "tcp", "run the test over Go's net.TCPConn instead of rdmanet")
	fs.BoolOpt(&o.loop, "", "loop", "run the server and the client in this process: the server on -b's address, the client from the next one (rdmanet) or loopback (TCP)")
	if err := tool.ParseFlagsOnly(fs, args); err != nil {
		return err
	}
	if err := o.check(fs); err != nil {
		return err
	}
	in := tool.NewInterrupter("rstream")
	defer in.Stop()
	o.out = os.Stdout
	if o.loop {
		return o.runLoop(in)
	}
	return o.run(in)
}

// runLoop runs both sides in this process, the client's table printed: what a
// program whose two ends share one Go runtime gets (a proxy, a test).
func (o *options) runLoop(in *tool.Interrupter) error {
	srv, cli := *o, *o
	srv.server, srv.out = "", io.Discard
	cli.server = o.bind
	if !o.tcp {
		a, err := netip.ParseAddr(o.bind)
		if err != nil {
			return fmt.Errorf("--loop: -b gives the server's device address: %v", err)
		}
		cli.bind = a.Next().String()
	} else {
		cli.bind = ""
	}
	ready := make(chan error, 1)
	srv.ready = ready
	errc := make(chan error, 1)
	go func() { errc <- srv.run(in) }()
	if err := <-ready; err != nil {
		return err
	}
	if err := cli.run(in); err != nil {
		return err
	}
	return <-errc
}

// check validates the flags and works out the test: custom (-I, -C or -S SIZE) or
// rstream's list of sizes.
func (o *options) check(fs *tool.FlagSet) error {
	for _, t := range o.tests {
		switch strings.ToLower(t) {
		case "s", "socket", "sockets":
			o.tcp = true
		case "v", "verify":
			o.verify = true
		case "b", "block", "blocking":
		case "a", "async", "n", "nonblock", "nonblocking", "f", "fork":
			return fmt.Errorf("-T %s: Go's net.Conn calls block (the goroutine, not the thread); only blocking is offered", t)
		case "r", "resolve":
			return fmt.Errorf("-T %s: addresses resolve through the system's resolver; rdma_getaddrinfo is not offered", t)
		default:
			return fmt.Errorf("-T %s: unknown test option (s, v or b)", t)
		}
	}
	switch o.format {
	case "", "name", "ip", "ipv6":
	case "gid":
		return errors.New("-f gid: GID addresses are InfiniBand's; a RoCE device is named by its IP address")
	default:
		return fmt.Errorf("-f %s: unknown address format (name, ip or ipv6)", o.format)
	}
	o.custom = fs.Changed("iterations") || fs.Changed("count")
	if strings.EqualFold(o.size, "all") {
		o.all = true
	} else if o.size != "" {
		n, err := strconv.Atoi(o.size)
		if err != nil || n <= 0 {
			return fmt.Errorf("-S %s: a size in bytes or 'all'", o.size)
		}
		o.xferSize, o.custom = n, true
	}
	switch {
	case o.iterations <= 0:
		return fmt.Errorf("-I %d: iterations must be at least 1", o.iterations)
	case o.count <= 0:
		return fmt.Errorf("-C %d: transfers must be at least 1", o.count)
	case o.xferSize > 1<<30:
		return fmt.Errorf("-S %d: at most 1 GiB", o.xferSize)
	case o.bufSize < 0:
		return fmt.Errorf("-B %d: a size in bytes", o.bufSize)
	case o.loop && (o.bind == "" || o.server != ""):
		return errors.New("--loop needs -b (the server's address) and no -s")
	case o.bufSize > 0 && !o.tcp:
		return errors.New("-B: rdmanet's ring has a fixed size; -B sizes TCP's socket buffers (with --tcp)")
	}
	if p, err := strconv.Atoi(o.port); err != nil || p <= 0 || p > 65535 {
		return fmt.Errorf("-p %s: a port number", o.port)
	}
	return nil
}

// network is what the test runs over, for messages.
func (o *options) network() string {
	if o.tcp {
		return "tcp"
	}
	return rdmanet.Network
}

// host checks an address against -f and resolves it; empty stays empty.
func (o *options) host(s string) (string, error) {
	if s == "" {
		return "", nil
	}
	a, err := netip.ParseAddr(s)
	switch {
	case err != nil && (o.format == "ip" || o.format == "ipv6"):
		return "", fmt.Errorf("%s: not a numeric address (-f %s)", s, o.format)
	case err == nil && o.format == "ip" && !a.Unmap().Is4():
		return "", fmt.Errorf("%s: not an IPv4 address (-f ip)", s)
	case err == nil && o.format == "ipv6" && a.Unmap().Is4():
		return "", fmt.Errorf("%s: not an IPv6 address (-f ipv6)", s)
	case err == nil:
		return a.Unmap().String(), nil
	}
	a, err = tool.ResolveHost(s)
	if err != nil {
		return "", err
	}
	return a.String(), nil
}

// listen opens the server's listener: on -b's address, or else rdmanet on the
// default device's address and TCP on every address, as rstream's passive
// getaddrinfo does.
func (o *options) listen() (net.Listener, error) {
	host, err := o.host(o.bind)
	if err != nil {
		return nil, err
	}
	if o.tcp {
		return net.Listen("tcp", net.JoinHostPort(host, o.port))
	}
	if host == "" {
		info, ok := defaultSoftDevice()
		if !ok {
			return nil, errors.New("no software device to listen on (give -b ADDR)")
		}
		host = info.String()
	}
	return rdmanet.Listen(rdmanet.Network, net.JoinHostPort(host, o.port))
}

// defaultSoftDevice is the address of the first configured software device (sw0 on
// 127.0.0.1 unless GOVERBS_DEVICES says otherwise).
func defaultSoftDevice() (netip.Addr, bool) {
	list, err := verbs.Devices()
	if err != nil {
		return netip.Addr{}, false
	}
	for _, info := range list {
		if sc, ok := info.SoftConfig(); ok {
			return sc.Addr, true
		}
	}
	return netip.Addr{}, false
}

// dial connects the client to the server, from -b's address if given.
func (o *options) dial(ctx context.Context) (net.Conn, error) {
	server, err := o.host(o.server)
	if err != nil {
		return nil, err
	}
	local, err := o.host(o.bind)
	if err != nil {
		return nil, err
	}
	addr := net.JoinHostPort(server, o.port)
	if o.tcp {
		var d net.Dialer
		if local != "" {
			d.LocalAddr = &net.TCPAddr{IP: net.ParseIP(local)}
		}
		return d.DialContext(ctx, "tcp", addr)
	}
	var d rdmanet.Dialer
	if local != "" {
		d.LocalAddr = netip.MustParseAddr(local)
	} else if a, err := cm.SourceAddr(netip.MustParseAddr(server)); err == nil {
		d.LocalAddr = a
	}
	return d.DialContext(ctx, rdmanet.Network, addr)
}

// setBuffers applies -B to a TCP connection, as rstream's SO_SNDBUF and SO_RCVBUF.
func (o *options) setBuffers(c net.Conn) error {
	tc, ok := c.(*net.TCPConn)
	if !ok || o.bufSize == 0 {
		return nil
	}
	if err := tc.SetReadBuffer(o.bufSize); err != nil {
		return err
	}
	return tc.SetWriteBuffer(o.bufSize)
}

package main

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/signal"
	"strings"

	"github.com/goverbs/goverbs/cm"
	"github.com/goverbs/goverbs/pcap"
	"github.com/goverbs/goverbs/verbs"
)

// cmSide is what each connection-manager tool (rping, ucmatose, udaddy) opens for its
// side: the software device, the pcap recording of its packets, and the CM on it.
type cmSide struct {
	dev   *verbs.Device
	rec   *pcap.Writer
	agent *cm.Agent
	stats bool
}

// openCMSide opens the device for addr (see rpingDevice), recording to pcapFile if it
// is set, and starts the CM on it.
func openCMSide(addr netip.Addr, pcapFile string, stats bool) (*cmSide, error) {
	dev, rec, err := rpingDevice(pcapFile, addr)
	if err != nil {
		return nil, err
	}
	s := &cmSide{dev: dev, rec: rec, stats: stats}
	if s.agent, err = cm.NewAgent(dev, nil); err != nil {
		s.close()
		return nil, err
	}
	return s, nil
}

// close stops the CM before the device under it; with --stats each prints its
// counters first.
func (s *cmSide) close() {
	if s.agent != nil {
		closeAgent(s.agent, s.stats)
	}
	if statsWanted(s.stats) {
		printStats(os.Stderr, s.dev, true)
	}
	s.dev.Close()
	if s.rec != nil {
		s.rec.Close()
	}
}

// closeAgent stops the CM; with --stats it first prints the agent's MAD counters, in
// the layout of the device's line.
func closeAgent(a *cm.Agent, stats bool) {
	if statsWanted(stats) {
		c := a.Counters()
		fmt.Fprintf(os.Stderr, "cm %v mads_sent %d mads_rcvd %d mads_dropped %d send_err %d\n",
			a.Addr(), c.MADsSent, c.MADsReceived, c.MADsDropped, c.SendErrors)
	}
	a.Close()
}

// openServerSide opens a server's side on bind, or without it on the first
// configured device (see rpingDevice).
func openServerSide(bind, pcapFile string, stats bool) (*cmSide, error) {
	var addr netip.Addr
	if bind != "" {
		a, err := resolveHost(bind)
		if err != nil {
			return nil, err
		}
		addr = a
	}
	return openCMSide(addr, pcapFile, stats)
}

// openClientSide resolves the server's address and opens a client's side on bind,
// or without it on the local address the host's routes pick to reach the server.
func openClientSide(server, bind, pcapFile string, stats bool) (*cmSide, netip.Addr, error) {
	dst, err := resolveHost(server)
	if err != nil {
		return nil, dst, err
	}
	var src netip.Addr
	if bind != "" {
		src, err = resolveHost(bind)
	} else {
		src, err = cm.SourceAddr(dst)
	}
	if err != nil {
		return nil, dst, err
	}
	side, err := openCMSide(src, pcapFile, stats)
	return side, dst, err
}

// cmtestOpts are the flags librdmacm's cmatose and udaddy share (their common.c and
// option parsing).
type cmtestOpts struct {
	server, bind string
	port         int
	connections  int
	count, size  int
	portSpace    string
	pcap         string
	stats        bool
}

// cmtest is one of librdmacm's cmatose-style examples: its name, the one port space
// it speaks, its port (a -p flag only when portFlag: udaddy's is fixed), and its
// two sides.
type cmtest struct {
	name           string
	portSpace      string
	port           int
	portFlag       bool
	client, server func(context.Context, *cmtestOpts) error
}

// run parses args, runs the side they ask for, and ends with the two lines the C
// examples end with.
func (t *cmtest) run(args []string) error {
	o := cmtestOpts{port: t.port}
	fs := newFlagSet(t.name)
	fs.args = "" // the addresses are flags, as in librdmacm's examples
	fs.stringVar(&o.server, "s", "server", "", "server `ADDRESS` (client mode)")
	fs.stringVar(&o.bind, "b", "bind", "", "bind `ADDRESS`: the local software device's")
	if t.portFlag {
		fs.intVar(&o.port, "p", "port", t.port, "`PORT`")
	}
	fs.intVar(&o.connections, "c", "connections", 1, "`CONNECTIONS`")
	fs.intVar(&o.count, "C", "count", 10, "message `COUNT`")
	fs.intVar(&o.size, "S", "size", 100, "message `SIZE`")
	fs.stringVar(&o.portSpace, "P", "port-space", t.portSpace, "port `SPACE` ("+t.portSpace+")")
	fs.stringVar(&o.pcap, "", "pcap", "", "record the packets this side sends and receives to pcap `FILE`")
	fs.boolVar(&o.stats, "", "stats", "print the device's and the CM's counters at exit")
	pos, err := fs.parse(args)
	if err != nil {
		return err
	}
	switch {
	case len(pos) > 0:
		return fmt.Errorf("unexpected argument %q (the server's address goes after -s)", pos[0])
	case !strings.EqualFold(o.portSpace, t.portSpace):
		return fmt.Errorf("port space %q: only %s is supported", o.portSpace, t.portSpace)
	case o.connections < 1 || o.count < 0 || o.size < 0:
		return errors.New("connections must be at least 1, count and size not negative")
	case o.port <= 0 || o.port > 65535:
		return fmt.Errorf("invalid port %d", o.port)
	}
	if o.size == 0 {
		o.count = 0
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	var status error
	if o.server != "" {
		status = t.client(ctx, &o)
	} else {
		status = t.server(ctx, &o)
	}
	fmt.Println("test complete")
	code := 0
	if status != nil {
		code = -1 // the error itself is goverbs' last line, on stderr
	}
	fmt.Printf("return status %d\n", code)
	return status
}

// Package perftest is the perftest tools: ib_{send,write,read,atomic}_{bw,lat} with
// perftest's flags, banner, result tables and out-of-band exchanges, so that either side
// may be a real perftest.
package perftest

import (
	"fmt"
	"net/netip"
	"os"

	"github.com/goverbs/goverbs/cmd/goverbs/internal/exchange"
	"github.com/goverbs/goverbs/cmd/goverbs/internal/exchange/perftestcomm"
	"github.com/goverbs/goverbs/cmd/goverbs/internal/tool"
)

// This file is the command: its flags (options.go), the device, and the connection to
// the peer over TCP or rdma_cm, on which a side (side.go) then runs the test; --loopback
// runs both sides in this process (loopback.go).

// Tool is one of perftest's programs: the operation and what is measured.
type Tool struct {
	op  operation
	lat bool
}

// The tools, named as perftest's programs (ib_send_bw is SendBW).
var (
	SendBW    = Tool{opSend, false}
	WriteBW   = Tool{opWrite, false}
	ReadBW    = Tool{opRead, false}
	AtomicBW  = Tool{opAtomic, false}
	SendLat   = Tool{opSend, true}
	WriteLat  = Tool{opWrite, true}
	ReadLat   = Tool{opRead, true}
	AtomicLat = Tool{opAtomic, true}
)

// Runner returns the command of tool t.
func Runner(t Tool) func(*tool.Command, []string) error {
	return func(cmd *tool.Command, args []string) error { return runPerf(cmd, t.op, t.lat, args) }
}

// runPerf parses the flags, opens the device, connects to the peer (or, without a
// server address, waits for one) and runs the test.
func runPerf(cmd *tool.Command, t operation, lat bool, args []string) error {
	name := cmd.Name
	fs := tool.NewFlagSet(cmd)
	var o options
	o.register(fs, t, lat)
	pos, err := fs.ParseArgs(args)
	if err != nil {
		return err
	}
	if o.version {
		fmt.Printf("Version: %s\n", perftestcomm.Version)
		return nil
	}
	server, err := tool.OneArg(pos)
	if err != nil {
		return err
	}
	if err := o.check(t, lat, fs); err != nil {
		return err
	}
	out := &printer{w: os.Stdout, json: o.json, gbits: o.gbits, cpu: o.cpuUtil}
	intr := tool.NewInterrupter(name)
	defer intr.Stop()
	if o.loopback {
		if server != "" {
			return fmt.Errorf("--loopback runs both sides itself: give no server address")
		}
		return intr.Result(runLoopback(intr, t, lat, o, out))
	}
	ep, err := tool.OpenEndpoint(o.dev)
	if err != nil {
		return err
	}
	defer ep.Close()
	s := newSide(t, lat, o, ep, out, intr, false)
	defer s.closeCM()
	if server == "" {
		if o.rdmaCM {
			if s.cm, err = newPerfCM(ep, true, o.port, netip.AddrPort{}); err != nil {
				return err
			}
			out.textf("\n************************************\n* Waiting for client to connect... *\n************************************\n")
			w, err := s.cm.accept(intr.Context())
			if err != nil {
				return intr.Result(err)
			}
			intr.OnStop(func() { w.Close() })
			return intr.Result(s.serve(w))
		}
		l, err := exchange.Listen(ep.Addr, o.port)
		if err != nil {
			return err
		}
		intr.OnStop(func() { l.Close() })
		out.textf("\n************************************\n* Waiting for client to connect... *\n************************************\n")
		c, err := exchange.Accept(l)
		if err != nil {
			return intr.Result(err)
		}
		defer c.Close()
		intr.OnStop(func() { c.Close() })
		return intr.Result(s.serve(c))
	}
	if o.rdmaCM {
		a, err := tool.ResolveHost(server)
		if err != nil {
			return err
		}
		if s.cm, err = newPerfCM(ep, false, o.port, netip.AddrPortFrom(a, uint16(o.port))); err != nil {
			return err
		}
		w, err := s.cm.dial(intr.Context())
		if err != nil {
			return intr.Result(err)
		}
		intr.OnStop(func() { w.Close() })
		s.isClient = true
		return intr.Result(s.client(w))
	}
	c, err := exchange.Dial(server, o.port)
	if err != nil {
		return err
	}
	defer c.Close()
	intr.OnStop(func() { c.Close() })
	s.isClient = true
	return intr.Result(s.client(c))
}

package perftest

import (
	"fmt"
	"io"
	"net"
	"net/netip"

	"github.com/goverbs/goverbs/cmd/goverbs/internal/exchange"
	"github.com/goverbs/goverbs/cmd/goverbs/internal/tool"
)

// loopbackCM runs --loopback -R: the server's side in a goroutine, both exchanging over
// rdma_cm as two perftests do.
func loopbackCM(intr *tool.Interrupter, srv, cli *side) error {
	errc := make(chan error, 1)
	go func() {
		defer srv.closeCM() // the server's goroutine owns its CM, even when the client fails
		w, err := srv.cm.accept(intr.Context())
		if err != nil {
			errc <- err
			return
		}
		errc <- srv.serve(w)
	}()
	w, err := cli.cm.dial(intr.Context())
	if err != nil {
		return err
	}
	intr.OnStop(func() { w.Close() })
	if err := cli.client(w); err != nil {
		return err
	}
	if err := <-errc; err != nil {
		return fmt.Errorf("loopback server: %v", err)
	}
	return nil
}

// runLoopback runs the server on one software device and the client on another, in
// this process, and prints the client's results. Without --bind it takes two free
// loopback addresses, so that several loopback runs (parallel CI jobs) coexist.
func runLoopback(intr *tool.Interrupter, t operation, lat bool, o options, out *printer) error {
	so, co := o, o
	so.dev.Pcap = ""   // the client's capture sees both directions
	so.outJSON = false // the client writes the report
	so.limitBW, so.limitMR = 0, 0
	if so.dev.Dev == "" {
		so.dev.Dev, co.dev.Dev = "sw0", "sw1" // two devices: their --stats lines differ
	}
	sep, cep, err := tool.OpenLoopbackPair(&so.dev, &co.dev)
	if err != nil {
		return err
	}
	defer sep.Close()
	defer cep.Close()
	a := sep.Addr.Unmap()
	l, err := net.Listen("tcp", netip.AddrPortFrom(a, 0).String())
	if err != nil {
		return fmt.Errorf("listen for the exchange: %v", err)
	}
	srv := newSide(t, lat, so, sep, &printer{w: io.Discard, json: true}, intr, false)
	cli := newSide(t, lat, co, cep, out, intr, true)
	if o.rdmaCM {
		port := l.Addr().(*net.TCPAddr).Port
		if srv.cm, err = newPerfCM(sep, true, port, netip.AddrPort{}); err != nil {
			l.Close()
			return err
		}
		if cli.cm, err = newPerfCM(cep, false, 0, netip.AddrPortFrom(a, uint16(port))); err != nil {
			l.Close()
			srv.closeCM()
			return err
		}
		defer cli.closeCM()
		l.Close() // its port number only: with -R the exchange goes over rdma_cm
		return loopbackCM(intr, srv, cli)
	}
	errc := make(chan error, 1)
	go func() {
		defer srv.closeCM() // the server's goroutine owns its CM, even when the client fails
		c, err := exchange.Accept(l)
		if err != nil {
			errc <- err
			return
		}
		defer c.Close()
		errc <- srv.serve(c)
	}()
	c, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		l.Close()
		return fmt.Errorf("connect to the loopback server: %v", err)
	}
	defer c.Close()
	intr.OnStop(func() { c.Close() })
	if err := cli.client(c); err != nil {
		return err
	}
	if err := <-errc; err != nil {
		return fmt.Errorf("loopback server: %v", err)
	}
	return nil
}

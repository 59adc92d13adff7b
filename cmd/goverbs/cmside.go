package main

import (
	"fmt"
	"net/netip"
	"os"

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

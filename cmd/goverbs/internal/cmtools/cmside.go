// Package cmtools is librdmacm's example tools over package cm: rping, ucmatose
// (cmatose), udaddy and mckey, with their flags, output and exchanges, so that each side
// interoperates with rdma-core's programs.
package cmtools

import (
	"net/netip"
	"os"

	"github.com/goverbs/goverbs/cm"
	"github.com/goverbs/goverbs/cmd/goverbs/internal/control"
	"github.com/goverbs/goverbs/cmd/goverbs/internal/tool"
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
		tool.CloseAgent(s.agent, s.stats)
	}
	if control.StatsWanted(s.stats) {
		control.PrintStats(os.Stderr, s.dev, true)
	}
	s.dev.Close()
	if s.rec != nil {
		s.rec.Close()
	}
}

// openServerSide opens a server's side on bind, or without it on the first
// configured device (see rpingDevice).
func openServerSide(bind, pcapFile string, stats bool) (*cmSide, error) {
	var addr netip.Addr
	if bind != "" {
		a, err := tool.ResolveHost(bind)
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
	dst, err := tool.ResolveHost(server)
	if err != nil {
		return nil, dst, err
	}
	var src netip.Addr
	if bind != "" {
		src, err = tool.ResolveHost(bind)
	} else {
		src, err = cm.SourceAddr(dst)
	}
	if err != nil {
		return nil, dst, err
	}
	side, err := openCMSide(src, pcapFile, stats)
	return side, dst, err
}

// sideFlags registers what every CM tool takes beside its librdmacm flags: --pcap and
// --stats (see cmSide).
func sideFlags(fs *tool.FlagSet, pcapFile *string, stats *bool) {
	fs.StringOpt(pcapFile, "", "pcap", "", "record the packets this side sends and receives to pcap `FILE`")
	fs.BoolOpt(stats, "", "stats", "print the device's and the CM's counters at exit")
}

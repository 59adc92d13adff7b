package inspect

import (
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"

	"github.com/goverbs/goverbs/cmd/goverbs/internal/tool"
	"github.com/goverbs/goverbs/netio"
	"github.com/goverbs/goverbs/verbs"
)

// RunIbaddr prints a port's GID and LID range as infiniband-diags' ibaddr does.
func RunIbaddr(cmd *tool.Command, args []string) error {
	fs := tool.NewFlagSet(cmd)
	fs.ArgsUsage = ""
	fs.Notes = diagNotes + `

ibaddr asks a subnet manager's view of a port (NodeInfo and PortInfo SMPs on QP0);
RoCE has neither SMPs nor QP0, so goverbs ibaddr shows local ports only, from the
device's GID table: GID index 0, the port's IP address.`
	var gid, lid, lidDec bool
	var ca, bind string
	var port int
	fs.BoolOpt(&gid, "g", "gid_show", "show gid address only")
	fs.BoolOpt(&lid, "l", "lid_show", "show lid range only")
	fs.BoolOpt(&lidDec, "L", "Lid_show", "show lid range (in decimal) only")
	fs.StringOpt(&ca, "C", "Ca", "", "`CA` name to use")
	fs.IntOpt(&port, "P", "Port", 1, "Ca `PORT` number to use")
	fs.StringOpt(&bind, "", "bind", "", "the software device a tool's --bind `ADDR` opens")
	pos, err := fs.ParseArgs(args)
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return fmt.Errorf("can't resolve destination port %s: a remote port is reached by LID, "+
			"DR path or GUID through SMPs, which RoCE has not; its GID is its IP address", pos[0])
	}
	devs, err := openDiagDevices(ca, bind)
	if err != nil {
		return err
	}
	defer closeDiag(devs)
	d := devs[0] // as ibaddr, the first device unless -C names one
	g, err := d.QueryGID(uint8(port), 0)
	if err != nil {
		return fmt.Errorf("Failed to open '%s' port '%d'", d.Name(), port)
	}
	p, err := d.QueryPort(uint8(port))
	if err != nil {
		return fmt.Errorf("Failed to open '%s' port '%d'", d.Name(), port)
	}
	showLID := 0 // ibaddr's show_lid: >0 hex, <0 decimal
	switch {
	case lidDec:
		showLID = -1
	case lid:
		showLID = 1
	}
	if showLID == 0 && !gid {
		showLID, gid = 1, true
	}
	last := uint32(p.LID) + 1<<p.LMC - 1
	w := os.Stdout
	if gid {
		fmt.Fprintf(w, "GID %s ", tool.GIDText(g))
	}
	switch {
	case showLID > 0:
		fmt.Fprintf(w, "LID start 0x%x end 0x%x", p.LID, last)
	case showLID < 0:
		fmt.Fprintf(w, "LID start %d end %d", p.LID, last)
	}
	fmt.Fprintln(w)
	return nil
}

// RunIblinkinfo prints each device's ports as infiniband-diags' iblinkinfo prints a
// fabric's links, with the port's Ethernet side where iblinkinfo names the peer port.
func RunIblinkinfo(cmd *tool.Command, args []string) error {
	fs := tool.NewFlagSet(cmd)
	fs.ArgsUsage = ""
	fs.Notes = diagNotes + `

iblinkinfo walks the fabric with SMPs and prints each link's far end. RoCE has no
SMPs and its peers are IP hosts, so goverbs iblinkinfo shows this host's devices,
each port's link to its network interface: the interface, its MTU and the port's
active IB MTU, where iblinkinfo prints the peer's LID, port and name.`
	var line, down bool
	var ca, bind string
	fs.BoolOpt(&line, "l", "line", "print all information for each link on a single line")
	fs.BoolOpt(&down, "d", "down", "print only down links")
	fs.StringOpt(&ca, "C", "Ca", "", "`CA` name to use")
	fs.StringOpt(&bind, "", "bind", "", "the software device a tool's --bind `ADDR` opens")
	pos, err := fs.ParseArgs(args)
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return fmt.Errorf("unexpected argument %q", pos[0])
	}
	devs, err := openDiagDevices(ca, bind)
	if err != nil {
		return err
	}
	defer closeDiag(devs)
	host, _ := os.Hostname()
	for _, d := range devs {
		linkinfoDevice(os.Stdout, d, host, line, down)
	}
	return nil
}

// nodeDesc is the node description rdma-ndd gives a device: "host device".
func nodeDesc(host string, d diagDevice) string { return host + " " + d.Name() }

func linkinfoDevice(w io.Writer, d diagDevice, host string, line, down bool) {
	header := false
	for port := uint8(1); port <= d.Query().PhysPortCnt; port++ {
		p, err := d.QueryPort(port)
		if err != nil || (down && p.State != verbs.PortDown) {
			continue
		}
		if !header && !line {
			fmt.Fprintf(w, "%s: %s:\n", nodeTypeName(d.Info().NodeType), nodeDesc(host, d))
			header = true
		}
		guid := d.portGUID(port)
		if line {
			fmt.Fprintf(w, "0x%016x \"%30s\" ", guid, nodeDesc(host, d))
		} else {
			fmt.Fprintf(w, "      0x%016x ", guid)
		}
		var link string
		if p.State != verbs.PortDown {
			link = fmt.Sprintf("(%3s %18s %6s/%8s)", p.ActiveWidth, p.ActiveSpeed,
				linkStateName(p.State), physStateName(p.PhysState))
		} else {
			link = fmt.Sprintf("(              %6s/%8s)", linkStateName(p.State), physStateName(p.PhysState))
		}
		fmt.Fprintf(w, "%6d %4d[  ] ==%s==>  %s\n", p.LID, port, link, netSide(d, port, p))
	}
}

// linkStateName is iblinkinfo's word for a port state (libibmad's dump names).
func linkStateName(s verbs.PortState) string {
	names := []string{"NoChange", "Down", "Initialize", "Armed", "Active"}
	if int(s) < len(names) {
		return names[s]
	}
	return fmt.Sprintf("?(%d)", s)
}

// netSide describes the port's link: the interface that holds its GID's address, the
// interface's MTU and the port's active MTU.
func netSide(d diagDevice, port uint8, p verbs.PortAttr) string {
	g, err := d.QueryGID(port, 0)
	if err != nil {
		return "\"Port not available\""
	}
	a := g.Addr()
	name, mtu := "?", 0
	if ifi, ok := interfaceOf(a); ok {
		name, mtu = ifi.Name, ifi.MTU
	}
	return fmt.Sprintf("%s %s (MTU %d, active IB MTU %d)", name, a, mtu, p.ActiveMTU.Bytes())
}

// interfaceOf finds the interface of a port's address: the loopback interface for any
// 127/8 or ::1 address (only 127.0.0.1 is configured on it, the whole block routes
// there), else the interface that holds the address.
func interfaceOf(a netip.Addr) (net.Interface, bool) {
	if a.IsLoopback() {
		ifs, _ := net.Interfaces()
		for _, ifi := range ifs {
			if ifi.Flags&net.FlagLoopback != 0 {
				return ifi, true
			}
		}
	}
	return netio.InterfaceOf(a)
}

package inspect

import (
	"encoding/binary"
	"fmt"
	"io"
	"net/netip"
	"os"
	"strconv"
	"strings"

	"github.com/goverbs/goverbs/cmd/goverbs/internal/tool"
	"github.com/goverbs/goverbs/verbs"
)

// goverbs ibstat, ibstatus, ibaddr and iblinkinfo: infiniband-diags' views of a port,
// read through the verbs API (ibv_query_port and the GID table) instead of umad and
// sysfs, so that they see the software devices and, with -tags ibverbs, the kernel's.

// diagNotes is what every one of these help pages says about RoCE.
const diagNotes = `On RoCE (goverbs' software devices, rxe, RoCE NICs) there is no subnet manager:
LIDs are 0 (base lid, SM lid), the LMC is 0, and a port is addressed by its GID,
which is its IP address (::ffff:a.b.c.d for IPv4). A port's GUID is the low 64 bits
of GID 0. The software device's speed is "software" (it runs as fast as the CPU):
its rate prints as 0 (ibstat) or unknown (ibstatus).`

// diagDevice is one device these tools describe: opened without binding its UDP port
// (see describeDevice), so that they work beside the tool that runs on it.
type diagDevice struct {
	*verbs.Device
}

// openDiagDevices opens the device --bind describes, the device ca names, or every
// device. The caller closes them.
func openDiagDevices(ca, bind string) ([]diagDevice, error) {
	if bind != "" {
		a, err := netip.ParseAddr(bind)
		if err != nil {
			return nil, fmt.Errorf("invalid --bind address %q: not an IP address", bind)
		}
		name := ca
		if name == "" {
			name = "sw0"
		}
		d, err := describeSoft(verbs.SoftConfig{Name: name, Addr: a.Unmap()})
		if err != nil {
			return nil, err
		}
		return []diagDevice{{d}}, nil
	}
	var infos []verbs.DeviceInfo
	if ca != "" {
		info, err := tool.FindDevice(ca)
		if err != nil {
			return nil, fmt.Errorf("'%s' IB device can't be found", ca)
		}
		infos = []verbs.DeviceInfo{info}
	} else {
		var err error
		if infos, err = verbs.Devices(); err != nil {
			return nil, err
		}
	}
	var out []diagDevice
	for _, info := range infos {
		d, err := describeDevice(info)
		if err != nil {
			closeDiag(out)
			return nil, err
		}
		out = append(out, diagDevice{d})
	}
	return out, nil
}

func closeDiag(ds []diagDevice) {
	for _, d := range ds {
		d.Close()
	}
}

// portGUID is the port's GUID as umad reports it on RoCE: the interface-identifier half
// of GID 0 (for an IPv4 GID, 0x0000ffff followed by the address).
func (d diagDevice) portGUID(port uint8) uint64 {
	g, err := d.QueryGID(port, 0)
	if err != nil {
		return 0
	}
	return binary.BigEndian.Uint64(g[8:])
}

// nodeTypeName is ibstat's word for a node type.
func nodeTypeName(t verbs.NodeType) string {
	switch t {
	case verbs.NodeCA:
		return "CA"
	case verbs.NodeRNIC:
		return "iWARP RNIC"
	}
	return "???"
}

// portStateName and physStateName are ibstat's words (IBTA 14.2.5.6, PortInfo).
func portStateName(s verbs.PortState) string {
	names := []string{"???", "Down", "Initializing", "Armed", "Active"}
	if int(s) < len(names) {
		return names[s]
	}
	return "???"
}

var physStates = []string{"No state change", "Sleep", "Polling", "Disabled",
	"PortConfigurationTraining", "LinkUp", "LinkErrorRecovery", "PhyTest"}

func physStateName(s uint8) string {
	if int(s) < len(physStates) {
		return physStates[s]
	}
	return "???"
}

// speeds maps the per-lane speed texts of verbs.PortAttr to Gb/s and IBTA's names.
var speeds = map[string]struct {
	gbps float64
	name string
}{
	"2.5 Gbps": {2.5, "SDR"}, "5.0 Gbps": {5, "DDR"}, "10.0 Gbps": {10, "QDR"},
	"14.0 Gbps": {14, "FDR"}, "25.0 Gbps": {25, "EDR"}, "50.0 Gbps": {50, "HDR"},
	"100.0 Gbps": {100, "NDR"}, "200.0 Gbps": {200, "XDR"},
}

// portRate is the port's signalling rate, lanes times per-lane speed, and the kernel's
// sysfs text for it ("100 Gb/sec (4X EDR)"); ok is false when the speed is not a line
// rate (the software device's "software").
func portRate(p verbs.PortAttr) (gbps float64, text string, ok bool) {
	s, known := speeds[p.ActiveSpeed]
	lanes, err := strconv.Atoi(strings.TrimSuffix(p.ActiveWidth, "X"))
	if !known || err != nil {
		return 0, "", false
	}
	gbps = s.gbps * float64(lanes)
	if s.name == "FDR" {
		gbps = float64(int(gbps)) // FDR's 14.0625 per lane: 4X is 56
	}
	return gbps, fmt.Sprintf("%g Gb/sec (%s %s)", gbps, p.ActiveWidth, s.name), true
}

// RunIbstat prints devices and ports as infiniband-diags' ibstat does.
func RunIbstat(cmd *tool.Command, args []string) error {
	fs := tool.NewFlagSet(cmd)
	fs.ArgsUsage = "[<ca_name> [portnum]]"
	fs.Notes = diagNotes + "\n\nWith -v each port's GID table follows (ibstat prints none; ibv_devinfo -v does)."
	var list, short, ports, verbose bool
	var bind string
	fs.BoolOpt(&list, "l", "list_of_cas", "list all IB devices")
	fs.BoolOpt(&short, "s", "short", "short output")
	fs.BoolOpt(&ports, "p", "port_list", "show port list")
	fs.BoolOpt(&verbose, "v", "verbose", "also show each port's GIDs")
	fs.StringOpt(&bind, "", "bind", "", "describe the software device a tool's --bind `ADDR` opens")
	pos, err := fs.ParseArgs(args)
	if err != nil {
		return err
	}
	var ca string
	port := -1
	if len(pos) > 0 {
		ca = pos[0]
	}
	if len(pos) > 1 {
		n, err := strconv.ParseInt(pos[1], 0, 32)
		if err != nil {
			return fmt.Errorf("invalid port number %q", pos[1])
		}
		port = int(n)
	}
	if len(pos) > 2 {
		return fmt.Errorf("unexpected argument %q", pos[2])
	}
	devs, err := openDiagDevices(ca, bind)
	if err != nil {
		return err
	}
	defer closeDiag(devs)
	w := os.Stdout
	for _, d := range devs {
		switch {
		case ports:
			for p := uint8(1); p <= d.Query().PhysPortCnt; p++ {
				if g := d.portGUID(p); g != 0 {
					fmt.Fprintf(w, "0x%016x\n", g)
				}
			}
		case list:
			fmt.Fprintln(w, d.Name())
		default:
			if err := ibstatDevice(w, d, port, short, verbose); err != nil {
				return err
			}
		}
	}
	return nil
}

func ibstatDevice(w io.Writer, d diagDevice, port int, short, verbose bool) error {
	a := d.Query()
	kind := nodeTypeName(d.Info().NodeType)
	if !short && port >= 0 {
		if port < 1 || port > int(a.PhysPortCnt) {
			return fmt.Errorf("%s: '%s' has no port number %d - max (%d)", kind, d.Name(), port, a.PhysPortCnt)
		}
		fmt.Fprintf(w, "%s: '%s'\n", kind, d.Name())
		ibstatPort(w, d, uint8(port), "", "", verbose)
		return nil
	}
	fmt.Fprintf(w, "%s '%s'\n", kind, d.Name())
	fmt.Fprintf(w, "\t%s type: %s\n", kind, d.Info().Provider)
	fmt.Fprintf(w, "\tNumber of ports: %d\n", a.PhysPortCnt)
	fmt.Fprintf(w, "\tFirmware version: %s\n", a.FWVer)
	fmt.Fprintf(w, "\tHardware version: 0x%x\n", a.HWVer)
	fmt.Fprintf(w, "\tNode GUID: 0x%016x\n", a.NodeGUID)
	fmt.Fprintf(w, "\tSystem image GUID: 0x%016x\n", a.SysImageGUID)
	if short {
		return nil
	}
	for p := uint8(1); p <= a.PhysPortCnt; p++ {
		ibstatPort(w, d, p, "\t", "\t\t", verbose)
	}
	return nil
}

// ibstatPort prints one port: at the left margin when it is shown alone, indented
// under its device otherwise, as ibstat does.
func ibstatPort(w io.Writer, d diagDevice, port uint8, hdr, pre string, verbose bool) {
	p, err := d.QueryPort(port)
	if err != nil {
		return
	}
	fmt.Fprintf(w, "%sPort %d:\n", hdr, port)
	fmt.Fprintf(w, "%sState: %s\n", pre, portStateName(p.State))
	fmt.Fprintf(w, "%sPhysical state: %s\n", pre, physStateName(p.PhysState))
	gbps, _, _ := portRate(p)
	fmt.Fprintf(w, "%sRate: %g\n", pre, gbps)
	fmt.Fprintf(w, "%sBase lid: %d\n", pre, p.LID)
	fmt.Fprintf(w, "%sLMC: %d\n", pre, p.LMC)
	fmt.Fprintf(w, "%sSM lid: %d\n", pre, p.SMLID)
	fmt.Fprintf(w, "%sCapability mask: 0x%08x\n", pre, p.PortCapFlags)
	fmt.Fprintf(w, "%sPort GUID: 0x%016x\n", pre, d.portGUID(port))
	fmt.Fprintf(w, "%sLink layer: %s\n", pre, p.LinkLayer)
	if verbose {
		gids, _ := d.GIDTable(port)
		for _, g := range gids {
			if g.GID != (verbs.GID{}) {
				fmt.Fprintf(w, "%sGID[%d]: %s, %s\n", pre, g.Index, tool.GIDText(g.GID), g.Type)
			}
		}
	}
}

// sysfsGID is a GID as the kernel's sysfs file shows it: eight groups of four digits.
func sysfsGID(g verbs.GID) string {
	var b strings.Builder
	for i := 0; i < 16; i += 2 {
		if i > 0 {
			b.WriteByte(':')
		}
		fmt.Fprintf(&b, "%02x%02x", g[i], g[i+1])
	}
	return b.String()
}

// sysfsStates are the kernel's texts for a port's state in sysfs.
var sysfsStates = []string{"NOP", "DOWN", "INIT", "ARMED", "ACTIVE", "ACTIVE_DEFER"}

// RunIbstatus prints ports as infiniband-diags' ibstatus script does (from sysfs there,
// from the verbs API here).
func RunIbstatus(cmd *tool.Command, args []string) error {
	fs := tool.NewFlagSet(cmd)
	fs.ArgsUsage = "[devname[:portnum]] ..."
	fs.Notes = diagNotes
	var bind string
	fs.StringOpt(&bind, "", "bind", "", "describe the software device a tool's --bind `ADDR` opens")
	pos, err := fs.ParseArgs(args)
	if err != nil {
		return err
	}
	if len(pos) == 0 {
		pos = []string{""}
	}
	for _, arg := range pos {
		name, portStr, hasPort := strings.Cut(arg, ":")
		devs, err := openDiagDevices(name, bind)
		if err != nil {
			return err
		}
		for _, d := range devs {
			first, last := uint8(1), d.Query().PhysPortCnt
			if hasPort {
				n, err := strconv.Atoi(portStr)
				if err != nil || n < 1 || n > int(last) {
					closeDiag(devs)
					return fmt.Errorf("device '%s': no port %s", d.Name(), portStr)
				}
				first, last = uint8(n), uint8(n)
			}
			for p := first; p <= last; p++ {
				ibstatusPort(os.Stdout, d, p)
			}
		}
		closeDiag(devs)
	}
	return nil
}

func ibstatusPort(w io.Writer, d diagDevice, port uint8) {
	p, err := d.QueryPort(port)
	if err != nil {
		return
	}
	gid := "unknown"
	if g, err := d.QueryGID(port, 0); err == nil {
		gid = sysfsGID(g)
	}
	state := "unknown"
	if int(p.State) < len(sysfsStates) {
		state = fmt.Sprintf("%d: %s", p.State, sysfsStates[p.State])
	}
	phys := fmt.Sprintf("%d: %s", p.PhysState, physStateName(p.PhysState))
	if p.PhysState == 7 {
		phys = "7: Phy Test" // the kernel's spelling
	}
	rate := "unknown"
	if _, text, ok := portRate(p); ok {
		rate = text
	}
	// The script echoes each value as a second argument: a space follows the tab.
	fmt.Fprintf(w, "Infiniband device '%s' port %d status:\n", d.Name(), port)
	fmt.Fprintf(w, "\tdefault gid:\t %s\n", gid)
	fmt.Fprintf(w, "\tbase lid:\t 0x%x\n", p.LID)
	fmt.Fprintf(w, "\tsm lid:\t\t 0x%x\n", p.SMLID)
	fmt.Fprintf(w, "\tstate:\t\t %s\n", state)
	fmt.Fprintf(w, "\tphys state:\t %s\n", phys)
	fmt.Fprintf(w, "\trate:\t\t %s\n", rate)
	fmt.Fprintf(w, "\tlink_layer:\t %s\n\n", p.LinkLayer)
}

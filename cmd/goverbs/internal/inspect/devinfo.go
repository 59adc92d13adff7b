package inspect

import (
	"bufio"
	"fmt"
	"net/netip"
	"os"
	"strings"

	"github.com/goverbs/goverbs/cmd/goverbs/internal/control"
	"github.com/goverbs/goverbs/cmd/goverbs/internal/tool"
	"github.com/goverbs/goverbs/netio/simnet"
	"github.com/goverbs/goverbs/verbs"
	"github.com/goverbs/goverbs/wire"
)

// RunDevices prints the device list as ibv_devices does.
func RunDevices(cmd *tool.Command, args []string) error {
	fs := tool.NewFlagSet(cmd)
	fs.ArgsUsage = ""
	if _, err := fs.ParseArgs(args); err != nil {
		return err
	}
	list, err := verbs.Devices()
	if err != nil {
		return err
	}
	fmt.Printf("    %-16s\t   node GUID\n", "device")
	fmt.Printf("    %-16s\t----------------\n", "------")
	for _, d := range list {
		fmt.Printf("    %-16s\t%016x\n", d.Name, d.NodeGUID)
	}
	return nil
}

// RunDevinfo prints device and port attributes as ibv_devinfo does.
func RunDevinfo(cmd *tool.Command, args []string) error {
	fs := tool.NewFlagSet(cmd)
	var dev string
	var port int
	var bind string
	var list, verbose bool
	fs.ArgsUsage = ""
	fs.StringOpt(&dev, "d", "ib-dev", "", "use IB device `DEV` (default all devices)")
	fs.StringOpt(&bind, "", "bind", "", "describe the software device a tool's --bind `ADDR` opens")
	fs.IntOpt(&port, "i", "ib-port", 0, "use `PORT` of IB device (default all ports)")
	fs.BoolOpt(&list, "l", "list", "print only the IB devices names")
	fs.BoolOpt(&verbose, "v", "verbose", "print all the attributes of the IB device(s)")
	if _, err := fs.ParseArgs(args); err != nil {
		return err
	}
	devs, err := verbs.Devices()
	if err != nil {
		return err
	}
	if bind != "" {
		a, err := netip.ParseAddr(bind)
		if err != nil {
			return fmt.Errorf("invalid --bind address %q: not an IP address", bind)
		}
		name := dev
		if name == "" {
			name = "sw0"
		}
		d, err := describeSoft(verbs.SoftConfig{Name: name, Addr: a.Unmap()})
		if err != nil {
			return err
		}
		defer d.Close()
		printDevinfo(d, "", verbose)
		return nil
	}
	if list {
		fmt.Printf("%d HCA%s found:\n", len(devs), tool.Plural(len(devs), "", "s"))
		for _, d := range devs {
			fmt.Printf("\t%s\n", d.Name)
		}
		return nil
	}
	if dev != "" {
		info, err := tool.FindDevice(dev)
		if err != nil {
			return err
		}
		devs = []verbs.DeviceInfo{info}
	}
	if len(devs) == 0 {
		fmt.Println("No IB devices found")
		return nil
	}
	if port < 0 || port > 1 {
		return fmt.Errorf("invalid port %d: software devices have one port, 1", port)
	}
	for _, info := range devs {
		d, err := describeDevice(info)
		if err != nil {
			return err
		}
		backend := ""
		if cfg, ok := info.SoftConfig(); ok {
			backend = backendLine(cfg)
		}
		printDevinfo(d, backend, verbose)
		d.Close()
		if cfg, ok := info.SoftConfig(); ok && cfg.Attach {
			printAttached(cfg.Addr)
		}
	}
	return nil
}

// printAttached lists the processes attached to the goverbs serve daemon that runs
// the device on addr, as the daemon's stat answer has them.
func printAttached(addr netip.Addr) {
	c, err := control.Dial(addr, "stat")
	if err != nil {
		fmt.Printf("\tattached processes: unknown (%v)\n", err)
		return
	}
	defer c.Close()
	sc := bufio.NewScanner(c)
	var lines []string
	var ownQPs []int // per line: the QPs its own engine listed (the daemon's stat puts them after the line), -1 for none
	for sc.Scan() {
		if l, ok := strings.CutPrefix(sc.Text(), "client "); ok {
			lines = append(lines, l)
			ownQPs = append(ownQPs, -1)
			if strings.Contains(l, " own_engine ") {
				ownQPs[len(ownQPs)-1] = 0
			}
		} else if strings.HasPrefix(sc.Text(), "qp ") && len(ownQPs) > 0 && ownQPs[len(ownQPs)-1] >= 0 {
			ownQPs[len(ownQPs)-1]++
		}
	}
	fmt.Printf("\tattached processes:\t%d\n", len(lines))
	for i, l := range lines {
		if ownQPs[i] >= 0 {
			l += fmt.Sprintf(" qp %d", ownQPs[i])
		}
		fmt.Printf("\t\t%s\n", l)
	}
}

// describeDevice opens the device info names without binding its UDP port, so that
// devinfo works while a tool runs on that address (ibv_devinfo queries a device a
// program is using): the device runs over an in-memory network of its own that
// carries nothing, and reports what the real one would (its address gives the GID, the
// interface holding the address gives the MTU).
func describeDevice(info verbs.DeviceInfo) (*verbs.Device, error) {
	cfg, ok := info.SoftConfig()
	if !ok {
		d, err := verbs.Open(info.Name)
		if err != nil {
			return nil, tool.OpenErr(info.Name, err)
		}
		return d, nil
	}
	return describeSoft(cfg)
}

func describeSoft(cfg verbs.SoftConfig) (*verbs.Device, error) {
	port := cfg.Port
	if port == 0 {
		port = wire.UDPPort
	}
	conn, err := simnet.New(0, simnet.Faults{}).Listen(netip.AddrPortFrom(cfg.Addr, port))
	if err != nil {
		return nil, fmt.Errorf("describe %s: %v", cfg.Name, err)
	}
	cfg.Conn = conn
	d, err := verbs.OpenSoft(cfg)
	if err != nil {
		conn.Close()
		return nil, fmt.Errorf("describe %s: %v", cfg.Name, err)
	}
	return d, nil
}

func guidString(g uint64) string {
	return fmt.Sprintf("%04x:%04x:%04x:%04x", g>>48, g>>32&0xffff, g>>16&0xffff, g&0xffff)
}

func mtuString(m verbs.MTU) string { return fmt.Sprintf("%d (%d)", m.Bytes(), m) }

// printDevinfo prints d as ibv_devinfo prints a device; backend, when not empty, names
// a software device's datagram backend other than UDP and its mode (backendLine).
func printDevinfo(d *verbs.Device, backend string, verbose bool) {
	a := d.Query()
	w := os.Stdout
	fmt.Fprintf(w, "hca_id:\t%s\n", d.Name())
	fmt.Fprintf(w, "\ttransport:\t\t\t%s (%d)\n", d.Info().Transport, 0)
	fmt.Fprintf(w, "\tfw_ver:\t\t\t\t%s\n", a.FWVer)
	fmt.Fprintf(w, "\tnode_guid:\t\t\t%s\n", guidString(a.NodeGUID))
	fmt.Fprintf(w, "\tsys_image_guid:\t\t\t%s\n", guidString(a.SysImageGUID))
	fmt.Fprintf(w, "\tvendor_id:\t\t\t0x%04x\n", a.VendorID)
	fmt.Fprintf(w, "\tvendor_part_id:\t\t\t%d\n", a.VendorPartID)
	fmt.Fprintf(w, "\thw_ver:\t\t\t\t0x%X\n", a.HWVer)
	fmt.Fprintf(w, "\tphys_port_cnt:\t\t\t%d\n", a.PhysPortCnt)
	if backend != "" {
		fmt.Fprintf(w, "\tbackend:\t\t\t%s\n", backend)
	}
	if verbose {
		fmt.Fprintf(w, "\tmax_mr_size:\t\t\t0x%x\n", a.MaxMRSize)
		fmt.Fprintf(w, "\tpage_size_cap:\t\t\t0x%x\n", a.PageSizeCap)
		fmt.Fprintf(w, "\tmax_qp:\t\t\t\t%d\n", a.MaxQP)
		fmt.Fprintf(w, "\tmax_qp_wr:\t\t\t%d\n", a.MaxQPWR)
		fmt.Fprintf(w, "\tdevice_cap_flags:\t\t0x%08x\n", a.DeviceCapFlags)
		fmt.Fprintf(w, "\tmax_sge:\t\t\t%d\n", a.MaxSGE)
		fmt.Fprintf(w, "\tmax_sge_rd:\t\t\t%d\n", a.MaxSGERd)
		fmt.Fprintf(w, "\tmax_cq:\t\t\t\t%d\n", a.MaxCQ)
		fmt.Fprintf(w, "\tmax_cqe:\t\t\t%d\n", a.MaxCQE)
		fmt.Fprintf(w, "\tmax_mr:\t\t\t\t%d\n", a.MaxMR)
		fmt.Fprintf(w, "\tmax_pd:\t\t\t\t%d\n", a.MaxPD)
		fmt.Fprintf(w, "\tmax_qp_rd_atom:\t\t\t%d\n", a.MaxQPRdAtom)
		fmt.Fprintf(w, "\tmax_ee_rd_atom:\t\t\t%d\n", 0)
		fmt.Fprintf(w, "\tmax_res_rd_atom:\t\t%d\n", 0)
		fmt.Fprintf(w, "\tmax_qp_init_rd_atom:\t\t%d\n", a.MaxQPInitRdAtom)
		fmt.Fprintf(w, "\tmax_ee_init_rd_atom:\t\t%d\n", 0)
		fmt.Fprintf(w, "\tatomic_cap:\t\t\t%s (%d)\n", a.AtomicCap, a.AtomicCap)
		fmt.Fprintf(w, "\tmax_ee:\t\t\t\t%d\n", 0)
		fmt.Fprintf(w, "\tmax_rdd:\t\t\t%d\n", 0)
		fmt.Fprintf(w, "\tmax_mw:\t\t\t\t%d\n", a.MaxMW)
		fmt.Fprintf(w, "\tmax_raw_ipv6_qp:\t\t%d\n", 0)
		fmt.Fprintf(w, "\tmax_raw_ethy_qp:\t\t%d\n", 0)
		fmt.Fprintf(w, "\tmax_mcast_grp:\t\t\t%d\n", a.MaxMcastGrp)
		fmt.Fprintf(w, "\tmax_mcast_qp_attach:\t\t%d\n", a.MaxMcastQPAttach)
		fmt.Fprintf(w, "\tmax_total_mcast_qp_attach:\t%d\n", a.MaxTotalMcastQPAttach)
		fmt.Fprintf(w, "\tmax_ah:\t\t\t\t%d\n", a.MaxAH)
		fmt.Fprintf(w, "\tmax_srq:\t\t\t%d\n", a.MaxSRQ)
		if a.MaxSRQ > 0 {
			fmt.Fprintf(w, "\tmax_srq_wr:\t\t\t%d\n", a.MaxSRQWR)
			fmt.Fprintf(w, "\tmax_srq_sge:\t\t\t%d\n", a.MaxSRQSGE)
		}
		fmt.Fprintf(w, "\tmax_pkeys:\t\t\t%d\n", a.MaxPKeys)
		fmt.Fprintf(w, "\tlocal_ca_ack_delay:\t\t%d\n", 15)
	}
	for port := uint8(1); port <= a.PhysPortCnt; port++ {
		p, err := d.QueryPort(port)
		if err != nil {
			continue
		}
		fmt.Fprintf(w, "\t\tport:\t%d\n", port)
		fmt.Fprintf(w, "\t\t\tstate:\t\t\t%s (%d)\n", p.State, p.State)
		fmt.Fprintf(w, "\t\t\tmax_mtu:\t\t%s\n", mtuString(p.MaxMTU))
		fmt.Fprintf(w, "\t\t\tactive_mtu:\t\t%s\n", mtuString(p.ActiveMTU))
		fmt.Fprintf(w, "\t\t\tsm_lid:\t\t\t%d\n", p.SMLID)
		fmt.Fprintf(w, "\t\t\tport_lid:\t\t%d\n", p.LID)
		fmt.Fprintf(w, "\t\t\tport_lmc:\t\t0x%02x\n", p.LMC)
		fmt.Fprintf(w, "\t\t\tlink_layer:\t\t%s\n", p.LinkLayer)
		if verbose {
			fmt.Fprintf(w, "\t\t\tmax_msg_sz:\t\t0x%x\n", p.MaxMsgSz)
			fmt.Fprintf(w, "\t\t\tport_cap_flags:\t\t0x%08x\n", p.PortCapFlags)
			fmt.Fprintf(w, "\t\t\tport_cap_flags2:\t0x%04x\n", 0)
			fmt.Fprintf(w, "\t\t\tmax_vl_num:\t\tinvalid value (0)\n")
			fmt.Fprintf(w, "\t\t\tbad_pkey_cntr:\t\t0x%x\n", 0)
			fmt.Fprintf(w, "\t\t\tqkey_viol_cntr:\t\t0x%x\n", 0)
			fmt.Fprintf(w, "\t\t\tsm_sl:\t\t\t%d\n", 0)
			fmt.Fprintf(w, "\t\t\tpkey_tbl_len:\t\t%d\n", p.PKeyTblLen)
			fmt.Fprintf(w, "\t\t\tgid_tbl_len:\t\t%d\n", p.GIDTblLen)
			fmt.Fprintf(w, "\t\t\tsubnet_timeout:\t\t%d\n", 0)
			fmt.Fprintf(w, "\t\t\tinit_type_reply:\t%d\n", 0)
			fmt.Fprintf(w, "\t\t\tactive_width:\t\t%s (%d)\n", p.ActiveWidth, 1)
			fmt.Fprintf(w, "\t\t\tactive_speed:\t\t%s (%d)\n", p.ActiveSpeed, 0)
			phys := "LINK_DOWN"
			if p.PhysState == 5 {
				phys = "LINK_UP"
			}
			fmt.Fprintf(w, "\t\t\tphys_state:\t\t%s (%d)\n", phys, p.PhysState)
			gids, _ := d.GIDTable(port)
			for _, g := range gids {
				fmt.Fprintf(w, "\t\t\tGID[%3d]:\t\t%s, %s\n", g.Index, tool.GIDText(g.GID), g.Type)
			}
		}
		fmt.Fprintln(w)
	}
}

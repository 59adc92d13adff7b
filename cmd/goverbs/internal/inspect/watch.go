// Package inspect holds the commands that look at devices without using them: devices
// and devinfo (rdma-core's ibv_devices and ibv_devinfo), and stat and asyncwatch, which
// look at the device of a running tool through its control socket.
package inspect

import (
	"bufio"
	"fmt"
	"io"
	"net/netip"
	"os"
	"strings"

	"github.com/goverbs/goverbs/cmd/goverbs/internal/control"
	"github.com/goverbs/goverbs/cmd/goverbs/internal/tool"
)

// goverbs stat and goverbs asyncwatch: a running tool's device seen from outside, over
// the socket every tool serves (package control).

// watchTarget picks the device to look at: --bind's address, -d's configured device,
// or, given neither, every device tools run now (all reports whether that was asked).
func watchTarget(bind, dev string) (addrs []netip.Addr, all bool, err error) {
	switch {
	case bind != "":
		a, err := netip.ParseAddr(bind)
		if err != nil {
			return nil, false, fmt.Errorf("invalid --bind address %q: not an IP address", bind)
		}
		return []netip.Addr{a}, false, nil
	case dev != "":
		info, err := tool.FindDevice(dev)
		if err != nil {
			return nil, false, err
		}
		cfg, ok := info.SoftConfig()
		if !ok {
			return nil, false, fmt.Errorf("device %s is not a software device", dev)
		}
		return []netip.Addr{cfg.Addr}, false, nil
	}
	return control.RunningDevices(), true, nil
}

// watchFlags parses the flags stat and asyncwatch share, which name the tool to look
// at, and returns watchTarget's choice. The tool is named by flags only; a bare address
// is refused, for ignoring it would show every tool, or some other tool, instead.
func watchFlags(cmd *tool.Command, args []string, bindUsage, devUsage string) (addrs []netip.Addr, all bool, err error) {
	fs := tool.NewFlagSet(cmd)
	fs.ArgsUsage = ""
	var bind, dev string
	fs.StringOpt(&bind, "", "bind", "", bindUsage)
	fs.StringOpt(&dev, "d", "ib-dev", "", devUsage)
	pos, err := fs.ParseArgs(args)
	if err != nil {
		return nil, false, err
	}
	if len(pos) > 0 {
		return nil, false, fmt.Errorf("unexpected argument %q (name the tool's device with --bind ADDR or -d DEV)", pos[0])
	}
	return watchTarget(bind, dev)
}

// RunStat prints the counters of running tools' devices and QPs, as `rdma statistic
// show` prints a kernel device's.
func RunStat(cmd *tool.Command, args []string) error {
	addrs, all, err := watchFlags(cmd, args, "the tool whose device is on `ADDR` (default: every running tool)",
		"the tool running configured device `DEV` (GOVERBS_DEVICES)")
	if err != nil {
		return err
	}
	if all && len(addrs) == 0 {
		fmt.Println("no goverbs tool is running")
		return nil
	}
	for _, a := range addrs {
		c, err := control.Dial(a, "stat")
		if err != nil {
			if all {
				continue // it ended meanwhile
			}
			return err
		}
		_, err = io.Copy(os.Stdout, c)
		c.Close()
		if err != nil {
			return err
		}
	}
	return nil
}

// RunAsyncwatch prints a running tool's device's async events as they happen, as
// rdma-core's asyncwatch prints a kernel device's, until the tool closes the device.
func RunAsyncwatch(cmd *tool.Command, args []string) error {
	addrs, all, err := watchFlags(cmd, args, "watch the tool whose device is on `ADDR`",
		"watch the tool running configured device `DEV` (GOVERBS_DEVICES)")
	if err != nil {
		return err
	}
	if all && len(addrs) == 0 {
		return fmt.Errorf("no goverbs tool is running (start one, or say which with --bind)")
	}
	if all && len(addrs) > 1 {
		var s []string
		for _, a := range addrs {
			s = append(s, a.String())
		}
		return fmt.Errorf("several tools are running: choose one with --bind (%s)", strings.Join(s, ", "))
	}
	c, err := control.Dial(addrs[0], "events")
	if err != nil {
		return err
	}
	defer c.Close()
	r := bufio.NewReader(c)
	for {
		line, err := r.ReadString('\n')
		if line != "" {
			if strings.HasPrefix(line, "# ") {
				// asyncwatch's first line names the device it watches.
				fmt.Printf("async events of %s", strings.TrimPrefix(line, "# "))
			} else {
				fmt.Print(line)
			}
		}
		if err != nil {
			fmt.Println("the tool closed its device")
			return nil
		}
	}
}

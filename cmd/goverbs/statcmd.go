package main

import (
	"bufio"
	"fmt"
	"io"
	"net/netip"
	"os"
	"strings"
)

// goverbs stat and goverbs asyncwatch: a running tool's device seen from outside, over
// the socket every tool serves (control.go).

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
		info, err := findDevice(dev)
		if err != nil {
			return nil, false, err
		}
		cfg, ok := info.SoftConfig()
		if !ok {
			return nil, false, fmt.Errorf("device %s is not a software device", dev)
		}
		return []netip.Addr{cfg.Addr}, false, nil
	}
	return runningDevices(), true, nil
}

// runStat prints the counters of running tools' devices and QPs, as `rdma statistic
// show` prints a kernel device's.
func runStat(args []string) error {
	fs := newFlagSet("stat")
	fs.args = ""
	var bind, dev string
	fs.stringVar(&bind, "", "bind", "", "the tool whose device is on `ADDR` (default: every running tool)")
	fs.stringVar(&dev, "d", "ib-dev", "", "the tool running configured device `DEV` (GOVERBS_DEVICES)")
	if _, err := fs.parse(args); err != nil {
		return err
	}
	addrs, all, err := watchTarget(bind, dev)
	if err != nil {
		return err
	}
	if all && len(addrs) == 0 {
		fmt.Println("no goverbs tool is running")
		return nil
	}
	for _, a := range addrs {
		c, err := dialControl(a, "stat")
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

// runAsyncwatch prints a running tool's device's async events as they happen, as
// rdma-core's asyncwatch prints a kernel device's, until the tool closes the device.
func runAsyncwatch(args []string) error {
	fs := newFlagSet("asyncwatch")
	fs.args = ""
	var bind, dev string
	fs.stringVar(&bind, "", "bind", "", "watch the tool whose device is on `ADDR`")
	fs.stringVar(&dev, "d", "ib-dev", "", "watch the tool running configured device `DEV` (GOVERBS_DEVICES)")
	if _, err := fs.parse(args); err != nil {
		return err
	}
	addrs, all, err := watchTarget(bind, dev)
	if err != nil {
		return err
	}
	if all {
		switch len(addrs) {
		case 0:
			return fmt.Errorf("no goverbs tool is running (start one, or say which with --bind)")
		case 1:
		default:
			var s []string
			for _, a := range addrs {
				s = append(s, a.String())
			}
			return fmt.Errorf("several tools are running: choose one with --bind (%s)", strings.Join(s, ", "))
		}
	}
	c, err := dialControl(addrs[0], "events")
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

package inspect

import (
	"bufio"
	"fmt"
	"net/netip"
	"strconv"
	"strings"
	"time"

	"github.com/goverbs/goverbs/cmd/goverbs/internal/control"
	"github.com/goverbs/goverbs/netio/afxdp"
	"github.com/goverbs/goverbs/verbs"
	"github.com/goverbs/goverbs/wire"
)

// backendLine describes the datagram backend of a configured software device that runs
// on one other than UDP, for devinfo: "" for UDP. For AF_XDP it names the interface,
// the queues and the mode, zero-copy or copy and native or generic XDP, which only the
// kernel can say, when the socket is bound. So the mode is the device's xdp_zerocopy
// and xdp_generic counters, read from the tool that runs the device (its control
// socket, as goverbs stat reads them); where no tool runs it, devinfo binds the socket
// for a moment as the device would (root) and reads the mode off it. Where neither can
// be had it says why.
func backendLine(cfg verbs.SoftConfig) string {
	if !strings.HasPrefix(cfg.Backend, afxdp.SpecPrefix) {
		return ""
	}
	o, err := afxdp.ParseSpec(cfg.Backend)
	if err != nil {
		return fmt.Sprintf("AF_XDP (%v)", err)
	}
	where := fmt.Sprintf("AF_XDP %s queue %d", o.Interface, o.Queue)
	if len(o.Queues) > 0 {
		where = fmt.Sprintf("AF_XDP %s queues %d-%d", o.Interface, o.Queue, o.Queues[len(o.Queues)-1])
	}
	if mode, ok := runningMode(cfg.Addr); ok {
		return where + ": " + mode + " (the running tool's)"
	}
	port := cfg.Port
	if port == 0 {
		port = wire.UDPPort
	}
	o.Addr = netip.AddrPortFrom(cfg.Addr, port)
	c, err := afxdp.Open(o)
	if err != nil {
		return fmt.Sprintf("%s: mode unknown (no tool runs the device, and binding it failed: %v)", where, err)
	}
	info := c.Info()
	c.Close()
	return where + ": " + modeText(info.Mode == afxdp.ModeZeroCopy, info.GenericXDP)
}

// modeText names an AF_XDP socket's mode as xdp_zerocopy and xdp_generic say it.
func modeText(zeroCopy, generic bool) string {
	m, x := "copy mode", "native XDP"
	if zeroCopy {
		m = "zero-copy"
	}
	if generic {
		x = "generic XDP"
	}
	return m + ", " + x
}

// runningMode reads the AF_XDP mode from the counters of the tool running the device
// on addr, if one does.
func runningMode(addr netip.Addr) (string, bool) {
	c, err := control.Dial(addr, "stat")
	if err != nil {
		return "", false
	}
	defer c.Close()
	c.SetReadDeadline(time.Now().Add(2 * time.Second))
	sc := bufio.NewScanner(c)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		if zc, gen, ok := parseXDPMode(sc.Text()); ok {
			return modeText(zc, gen), true
		}
	}
	return "", false
}

// parseXDPMode reads xdp_zerocopy and xdp_generic from a device's counter line
// (control.PrintStats: "link NAME/1 name value ..."); ok is false when the line has
// neither, as a device on UDP has.
func parseXDPMode(line string) (zeroCopy, generic, ok bool) {
	f := strings.Fields(line)
	if len(f) < 2 || f[0] != "link" {
		return false, false, false
	}
	seen := 0
	for i := 2; i+1 < len(f); i += 2 {
		v, err := strconv.ParseUint(f[i+1], 10, 64)
		if err != nil {
			continue
		}
		switch f[i] {
		case "xdp_zerocopy":
			zeroCopy, seen = v != 0, seen+1
		case "xdp_generic":
			generic, seen = v != 0, seen+1
		}
	}
	return zeroCopy, generic, seen == 2
}

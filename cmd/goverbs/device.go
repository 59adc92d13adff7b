package main

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"os"
	"strings"
	"syscall"

	"github.com/goverbs/goverbs/pcap"
	"github.com/goverbs/goverbs/verbs"
)

// devOpts selects and configures the local software device.
type devOpts struct {
	dev    string // -d: device name
	ibPort int    // -i: port number (1)
	gidIdx int    // -g / -x: GID index
	bind   string // --bind: the device's IP address
	pcap   string // --pcap: capture file
	busy   bool   // --busy-poll: the device in busy-poll mode, CQs polled without sleeping
	stats  bool   // --stats: print the device's and QPs' counters at exit
	tool   string // the command, named on the stat/asyncwatch socket
}

// register adds the device flags; gidShort/gidLong are -g/--gid-idx for the ping-pongs
// and -x/--gid-index for perftest.
func (o *devOpts) register(fs *flagSet, gidShort, gidLong string) {
	o.tool = fs.name
	fs.stringVar(&o.dev, "d", "ib-dev", "", "use IB device `DEV` (default first device found)")
	fs.intVar(&o.ibPort, "i", "ib-port", 1, "use `PORT` of IB device")
	fs.intVar(&o.gidIdx, gidShort, gidLong, 0, "local port GID `INDEX`")
	fs.stringVar(&o.bind, "", "bind", "", "run the software device on IP `ADDR` (each process on a host needs its own)")
	fs.stringVar(&o.pcap, "", "pcap", "", "record the packets this side sends and receives to pcap `FILE`")
	fs.boolVar(&o.busy, "", "busy-poll", "busy-poll: CQ polls drive the device and never sleep (lowest latency, burns a core)")
	fs.boolVar(&o.stats, "", "stats", "print the device's and each QP's counters on stderr at exit, as `rdma statistic` does (also "+envStats+"=1)")
}

// endpoint is an opened local device with the port facts the tools print and exchange.
type endpoint struct {
	busy  bool     // busy-poll mode: CQ waits spin instead of sleeping
	stats bool     // print counters at exit
	ctl   *control // the stat/asyncwatch socket
	dev   *verbs.Device
	rec   *pcap.Writer
	port  verbs.PortAttr
	gid   verbs.GID
	addr  netip.Addr
}

// closeQPs closes a tool's QPs, printing their counters first if --stats asked for them.
func (e *endpoint) closeQPs(qps []*verbs.QP) {
	e.ctl.track(qps, false)
	for _, qp := range qps {
		if statsWanted(e.stats) {
			printQPStats(os.Stderr, qp)
		}
		qp.Close()
	}
}

// trackQPs shows the tool's QPs to goverbs stat.
func (e *endpoint) trackQPs(qps []*verbs.QP) { e.ctl.track(qps, true) }

func (e *endpoint) close() {
	e.ctl.close()
	if statsWanted(e.stats) {
		printStats(os.Stderr, e.dev, false)
	}
	e.dev.Close()
	if e.rec != nil {
		e.rec.Close()
	}
}

// openEndpoint opens the device that o names: a new software device on --bind's address,
// or one of verbs.Devices (sw0 on 127.0.0.1 unless GOVERBS_DEVICES says otherwise; with
// the ibverbs build tag also the kernel's RDMA devices).
func openEndpoint(o devOpts) (*endpoint, error) {
	if o.gidIdx < 0 {
		return nil, fmt.Errorf("invalid GID index %d", o.gidIdx)
	}
	cfg := verbs.SoftConfig{Name: o.dev, BusyPoll: o.busy}
	if o.bind != "" {
		a, err := netip.ParseAddr(o.bind)
		if err != nil {
			return nil, fmt.Errorf("invalid --bind address %q: not an IP address", o.bind)
		}
		cfg.Addr = a.Unmap()
	} else {
		info, err := findDevice(o.dev)
		if err != nil {
			return nil, err
		}
		soft, ok := info.SoftConfig()
		if !ok {
			return openKernelDevice(info, o)
		}
		soft.BusyPoll = o.busy
		cfg = soft
	}
	if o.ibPort != 1 {
		return nil, fmt.Errorf("invalid IB port %d: software devices have one port, 1", o.ibPort)
	}
	if o.pcap != "" {
		w, err := pcap.Create(o.pcap)
		if err != nil {
			return nil, fmt.Errorf("pcap: %w", err)
		}
		cfg.Recorder = w
		dev, err := verbs.OpenSoft(cfg)
		if err != nil {
			w.Close()
			return nil, openErr(cfg.Addr.String(), err)
		}
		return finishEndpoint(dev, w, o)
	}
	dev, err := verbs.OpenSoft(cfg)
	if err != nil {
		return nil, openErr(cfg.Addr.String(), err)
	}
	return finishEndpoint(dev, nil, o)
}

// openKernelDevice opens a device of another provider (an RNIC or rxe through
// libibverbs). It has no address of its own to listen on, so the exchange listens on
// every address, as rdma-core's examples do.
func openKernelDevice(info verbs.DeviceInfo, o devOpts) (*endpoint, error) {
	if o.pcap != "" {
		return nil, fmt.Errorf("--pcap records software devices only; capture %s's traffic with tcpdump", info.Name)
	}
	dev, err := verbs.Open(info.Name)
	if err != nil {
		return nil, openErr(info.Name, err)
	}
	if o.ibPort < 1 || o.ibPort > int(dev.Query().PhysPortCnt) {
		dev.Close()
		return nil, fmt.Errorf("invalid IB port %d: %s has %d", o.ibPort, info.Name, dev.Query().PhysPortCnt)
	}
	e, err := finishEndpoint(dev, nil, o)
	if err != nil {
		return nil, err
	}
	e.addr = netip.IPv6Unspecified()
	return e, nil
}

func finishEndpoint(dev *verbs.Device, rec *pcap.Writer, o devOpts) (*endpoint, error) {
	e := &endpoint{dev: dev, rec: rec, busy: o.busy, stats: o.stats}
	var err error
	if e.port, err = dev.QueryPort(uint8(o.ibPort)); err != nil {
		e.close()
		return nil, fmt.Errorf("invalid IB port %d", o.ibPort)
	}
	tbl, _ := dev.GIDTable(uint8(o.ibPort))
	if e.gid, err = dev.QueryGID(uint8(o.ibPort), o.gidIdx); err != nil {
		e.close()
		return nil, fmt.Errorf("invalid GID index %d: the GID table of %s has %d entr%s", o.gidIdx, dev.Name(), len(tbl), plural(len(tbl), "y", "ies"))
	}
	e.addr = e.gid.Addr()
	e.ctl = serveControl(e, o.tool)
	return e, nil
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

func findDevice(name string) (verbs.DeviceInfo, error) {
	list, err := verbs.Devices()
	if err != nil {
		return verbs.DeviceInfo{}, err
	}
	if len(list) == 0 {
		return verbs.DeviceInfo{}, errors.New("no RDMA devices found")
	}
	var names []string
	for _, d := range list {
		if name == "" || d.Name == name {
			return d, nil
		}
		names = append(names, d.Name)
	}
	return verbs.DeviceInfo{}, fmt.Errorf("IB device %s not found (devices: %s)", name, strings.Join(names, ", "))
}

func openErr(what string, err error) error {
	if errors.Is(err, syscall.EADDRINUSE) {
		return inUseError{fmt.Sprintf("open device on %s: UDP port 4791 is in use there (another goverbs or rxe?); choose another address with --bind", what)}
	}
	if errors.Is(err, syscall.EADDRNOTAVAIL) {
		return fmt.Errorf("open device on %s: no local interface has this address", what)
	}
	return fmt.Errorf("open device: %v", err)
}

// inUseError says a device's address is taken; errors.Is(err, syscall.EADDRINUSE) holds.
type inUseError struct{ msg string }

func (e inUseError) Error() string { return e.msg }
func (e inUseError) Unwrap() error { return syscall.EADDRINUSE }

// parseMTU maps an MTU in bytes (-m) to the enum.
func parseMTU(n int) (verbs.MTU, error) {
	switch n {
	case 256:
		return verbs.MTU256, nil
	case 512:
		return verbs.MTU512, nil
	case 1024:
		return verbs.MTU1024, nil
	case 2048:
		return verbs.MTU2048, nil
	case 4096:
		return verbs.MTU4096, nil
	}
	return 0, fmt.Errorf("invalid MTU %d: must be 256, 512, 1024, 2048 or 4096", n)
}

// openLoopbackPair opens the two devices of a --loopback run: on --bind's address and
// the next one, or, without --bind, on the first pair of 127.0.0.0/8 addresses, from a
// random start, whose UDP ports are both free.
func openLoopbackPair(so, co *devOpts) (*endpoint, *endpoint, error) {
	if so.bind != "" {
		a, err := netip.ParseAddr(so.bind)
		if err != nil {
			return nil, nil, fmt.Errorf("invalid --bind address %q: not an IP address", so.bind)
		}
		co.bind = a.Next().String()
		return openPair(so, co)
	}
	const tries = 64
	var err error
	for i := 0; i < tries; i++ {
		// 127.0.0.2 .. 127.255.255.253, an even host so that the pair shares a /31.
		n := 2 + 2*rand.Uint32N((1<<24-4)/2)
		a := netip.AddrFrom4([4]byte{127, byte(n >> 16), byte(n >> 8), byte(n)})
		so.bind, co.bind = a.String(), a.Next().String()
		var s, c *endpoint
		s, c, err = openPair(so, co)
		if err == nil {
			return s, c, nil
		}
		if !errors.Is(err, syscall.EADDRINUSE) {
			return nil, nil, err
		}
	}
	return nil, nil, fmt.Errorf("no free pair of loopback addresses in %d tries: %v", tries, err)
}

func openPair(so, co *devOpts) (*endpoint, *endpoint, error) {
	s, err := openEndpoint(*so)
	if err != nil {
		return nil, nil, err
	}
	c, err := openEndpoint(*co)
	if err != nil {
		s.close()
		return nil, nil, err
	}
	return s, c, nil
}

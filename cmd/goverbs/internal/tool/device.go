package tool

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"os"
	"strings"
	"syscall"

	"github.com/goverbs/goverbs/cmd/goverbs/internal/control"
	"github.com/goverbs/goverbs/pcap"
	"github.com/goverbs/goverbs/verbs"
	"github.com/goverbs/goverbs/verbs/soft"
)

// DevOpts selects and configures the local software device.
type DevOpts struct {
	Dev      string // -d: device name
	IBPort   int    // -i: port number (1)
	GIDIndex int    // -g / -x: GID index
	Bind     string // --bind: the device's IP address
	Pcap     string // --pcap: capture file
	Busy     bool   // --busy-poll: the device in busy-poll mode, CQs polled without sleeping
	Stats    bool   // --stats: print the device's and QPs' counters at exit
	CC       string // --cc: congestion control, off|dcqcn|connectx[:RATE]
	SR       bool   // --sr: selective repeat for RC (with peers that have it on)
	Tool     string // the command, named on the stat/asyncwatch socket
}

// Register adds the device flags; gidShort/gidLong are -g/--gid-idx for the ping-pongs
// and -x/--gid-index for perftest.
func (o *DevOpts) Register(fs *FlagSet, gidShort, gidLong string) {
	o.Tool = fs.Name()
	fs.StringOpt(&o.Dev, "d", "ib-dev", "", "use IB device `DEV` (default first device found)")
	fs.IntOpt(&o.IBPort, "i", "ib-port", 1, "use `PORT` of IB device")
	fs.IntOpt(&o.GIDIndex, gidShort, gidLong, 0, "local port GID `INDEX`")
	fs.StringOpt(&o.Bind, "", "bind", "", "run the software device on IP `ADDR` (each process on a host needs its own)")
	fs.StringOpt(&o.Pcap, "", "pcap", "", "record the packets this side sends and receives to pcap `FILE`")
	fs.BoolOpt(&o.Busy, "", "busy-poll", "busy-poll: CQ polls drive the device and never sleep (lowest latency, burns a core)")
	fs.StringOpt(&o.CC, "", "cc", "", "congestion control `MODE[:RATE]`: off, dcqcn or connectx, at the port's RATE (25g; default the interface's speed) (also "+soft.EnvCongestion+")")
	fs.BoolOpt(&o.SR, "", "sr", "selective repeat for RC: keep out-of-order packets, resend only what is lost (go-back-N with peers without it; also "+soft.EnvSelectiveRepeat+"=1)")
	fs.BoolOpt(&o.Stats, "", "stats", "print the device's and each QP's counters on stderr at exit, as `rdma statistic` does (also "+control.EnvStats+"=1)")
}

// Endpoint is an opened local device with the port facts the tools print and exchange.
type Endpoint struct {
	Busy  bool // busy-poll mode: CQ waits spin instead of sleeping
	Dev   *verbs.Device
	Port  verbs.PortAttr
	GID   verbs.GID
	Addr  netip.Addr // where the exchange listens
	stats bool       // print counters at exit
	ctl   *control.Server
	rec   *pcap.Writer
}

// CloseQPs closes a tool's QPs, printing their counters first if --stats asked for them.
func (e *Endpoint) CloseQPs(qps []*verbs.QP) {
	e.ctl.Track(qps, false)
	for _, qp := range qps {
		if control.StatsWanted(e.stats) {
			control.PrintQPStats(os.Stderr, qp)
		}
		qp.Close()
	}
}

// TrackQPs shows the tool's QPs to goverbs stat.
func (e *Endpoint) TrackQPs(qps []*verbs.QP) { e.ctl.Track(qps, true) }

// Stats reports whether the tool prints counters at exit (--stats or GOVERBS_STATS).
func (e *Endpoint) Stats() bool { return control.StatsWanted(e.stats) }

// Close stops the socket, says which path the datagrams took when the device has the
// same-host shortcut, prints the device's counters if asked, and closes the device.
func (e *Endpoint) Close() {
	e.ctl.Close()
	if l := control.PathLine(e.Dev.Counters()); l != "" {
		fmt.Fprintln(os.Stderr, l)
	}
	if control.StatsWanted(e.stats) {
		control.PrintStats(os.Stderr, e.Dev, false)
	}
	e.Dev.Close()
	if e.rec != nil {
		e.rec.Close()
	}
}

// OpenEndpoint opens the device that o names: a new software device on --bind's address,
// or one of verbs.Devices (sw0 on 127.0.0.1 unless GOVERBS_DEVICES says otherwise; with
// the ibverbs build tag also the kernel's RDMA devices).
func OpenEndpoint(o DevOpts) (*Endpoint, error) {
	if o.GIDIndex < 0 {
		return nil, fmt.Errorf("invalid GID index %d", o.GIDIndex)
	}
	cfg := verbs.SoftConfig{Name: o.Dev, BusyPoll: o.Busy}
	if o.Bind != "" {
		a, err := netip.ParseAddr(o.Bind)
		if err != nil {
			return nil, fmt.Errorf("invalid --bind address %q: not an IP address", o.Bind)
		}
		cfg.Addr = a.Unmap()
	} else {
		info, err := FindDevice(o.Dev)
		if err != nil {
			return nil, err
		}
		soft, ok := info.SoftConfig()
		if !ok {
			return openKernelDevice(info, o)
		}
		soft.BusyPoll = o.Busy
		cfg = soft
	}
	if o.IBPort != 1 {
		return nil, fmt.Errorf("invalid IB port %d: software devices have one port, 1", o.IBPort)
	}
	if o.CC != "" {
		cc, err := soft.ParseCongestion(o.CC, cfg.Addr)
		if err != nil {
			return nil, fmt.Errorf("invalid --cc: %w", err)
		}
		cfg.Congestion = cc
	}
	cfg.SelectiveRepeat = o.SR
	if o.Pcap != "" {
		w, err := pcap.Create(o.Pcap)
		if err != nil {
			return nil, fmt.Errorf("pcap: %w", err)
		}
		cfg.Recorder = w
		dev, err := verbs.OpenSoft(cfg)
		if err != nil {
			w.Close()
			return nil, OpenErr(cfg.Addr.String(), err)
		}
		return finishEndpoint(dev, w, o)
	}
	dev, err := verbs.OpenSoft(cfg)
	if err != nil {
		return nil, OpenErr(cfg.Addr.String(), err)
	}
	return finishEndpoint(dev, nil, o)
}

// openKernelDevice opens a device of another provider (an RNIC or rxe through
// libibverbs). It has no address of its own to listen on, so the exchange listens on
// every address, as rdma-core's examples do.
func openKernelDevice(info verbs.DeviceInfo, o DevOpts) (*Endpoint, error) {
	if o.Pcap != "" {
		return nil, fmt.Errorf("--pcap records software devices only; capture %s's traffic with tcpdump", info.Name)
	}
	dev, err := verbs.Open(info.Name)
	if err != nil {
		return nil, OpenErr(info.Name, err)
	}
	if o.IBPort < 1 || o.IBPort > int(dev.Query().PhysPortCnt) {
		dev.Close()
		return nil, fmt.Errorf("invalid IB port %d: %s has %d", o.IBPort, info.Name, dev.Query().PhysPortCnt)
	}
	e, err := finishEndpoint(dev, nil, o)
	if err != nil {
		return nil, err
	}
	e.Addr = netip.IPv6Unspecified()
	return e, nil
}

func finishEndpoint(dev *verbs.Device, rec *pcap.Writer, o DevOpts) (*Endpoint, error) {
	e := &Endpoint{Dev: dev, rec: rec, Busy: o.Busy, stats: o.Stats}
	var err error
	if e.Port, err = dev.QueryPort(uint8(o.IBPort)); err != nil {
		e.Close()
		return nil, fmt.Errorf("invalid IB port %d", o.IBPort)
	}
	tbl, _ := dev.GIDTable(uint8(o.IBPort))
	if e.GID, err = dev.QueryGID(uint8(o.IBPort), o.GIDIndex); err != nil {
		e.Close()
		return nil, fmt.Errorf("invalid GID index %d: the GID table of %s has %d entr%s", o.GIDIndex, dev.Name(), len(tbl), Plural(len(tbl), "y", "ies"))
	}
	e.Addr = e.GID.Addr()
	if dev.Info().Provider != "attach" { // an attached device's stat socket is its daemon's
		e.ctl = control.Serve(dev, e.GID.Addr(), o.Tool)
	}
	return e, nil
}

// Plural is one or many, as n asks.
func Plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

// FindDevice returns the device named name, or the first device for "".
func FindDevice(name string) (verbs.DeviceInfo, error) {
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

// OpenErr explains why the device on what did not open, as a user can act on it.
func OpenErr(what string, err error) error {
	if errors.Is(err, syscall.EADDRINUSE) {
		return InUseError{fmt.Sprintf("open device on %s: UDP port 4791 is in use there (another goverbs or rxe?); choose another address with --bind", what)}
	}
	if errors.Is(err, syscall.EADDRNOTAVAIL) {
		return fmt.Errorf("open device on %s: no local interface has this address", what)
	}
	return fmt.Errorf("open device: %v", err)
}

// InUseError says a device's address is taken; errors.Is(err, syscall.EADDRINUSE) holds.
type InUseError struct{ Msg string }

func (e InUseError) Error() string { return e.Msg }
func (e InUseError) Unwrap() error { return syscall.EADDRINUSE }

// ParseMTU maps an MTU in bytes (-m) to the enum.
func ParseMTU(n int) (verbs.MTU, error) {
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

// OpenLoopbackPair opens the two devices of a --loopback run: on --bind's address and
// the next one, or, without --bind, on the first pair of 127.0.0.0/8 addresses, from a
// random start, whose UDP ports are both free.
func OpenLoopbackPair(so, co *DevOpts) (*Endpoint, *Endpoint, error) {
	if so.Bind != "" {
		a, err := netip.ParseAddr(so.Bind)
		if err != nil {
			return nil, nil, fmt.Errorf("invalid --bind address %q: not an IP address", so.Bind)
		}
		co.Bind = a.Next().String()
		return openPair(so, co)
	}
	const tries = 64
	var err error
	for i := 0; i < tries; i++ {
		// 127.0.0.2 .. 127.255.255.253, an even host so that the pair shares a /31.
		n := 2 + 2*rand.Uint32N((1<<24-4)/2)
		a := netip.AddrFrom4([4]byte{127, byte(n >> 16), byte(n >> 8), byte(n)})
		so.Bind, co.Bind = a.String(), a.Next().String()
		var s, c *Endpoint
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

func openPair(so, co *DevOpts) (*Endpoint, *Endpoint, error) {
	s, err := OpenEndpoint(*so)
	if err != nil {
		return nil, nil, err
	}
	c, err := OpenEndpoint(*co)
	if err != nil {
		s.Close()
		return nil, nil, err
	}
	return s, c, nil
}

// GIDText formats a GID as inet_ntop does (::ffff:127.0.0.1 for IPv4-mapped GIDs).
func GIDText(g verbs.GID) string { return netip.AddrFrom16(g).String() }

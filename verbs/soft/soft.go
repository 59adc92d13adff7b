// Package soft is the software RoCEv2 provider: the engine of internal/engine (an RNIC
// in Go, on a UDP socket) offered to package verbs through verbs/driver, as
// verbs/ibverbs offers the kernel's devices. It registers as "soft" when imported, and
// package verbs imports it, so every program has the software devices.
//
// Programs use package verbs (verbs.Open, verbs.OpenSoft with a verbs.SoftConfig, which
// is this package's Config). This package holds what belongs to the provider alone:
// its configuration, the device list from the GOVERBS_DEVICES environment variable, and
// opening a device; the engine's own objects are the driver objects.
package soft

import (
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"sync"

	"github.com/goverbs/goverbs/internal/engine"
	"github.com/goverbs/goverbs/netio"
	"github.com/goverbs/goverbs/verbs/driver"
	"github.com/goverbs/goverbs/wire"
)

// ProviderName is the name the provider registers under (verbs.DeviceInfo.Provider).
const ProviderName = "soft"

func init() { driver.Register(ProviderName, provider{}) }

// Config describes a software RoCEv2 device: a UDP socket on one IP address that
// speaks RoCEv2 like an RNIC, inside this process.
type Config struct {
	// Name is the device name ("sw0" when empty).
	Name string
	// Addr is the IP address to bind (IPv4 or IPv6); its GID is the port's GID 0.
	Addr netip.Addr
	// Port is the UDP port to bind and to send to (4791, the RoCEv2 port, when zero).
	Port uint16
	// MTU is the port's active MTU. Zero derives it from the interface MTU as Linux rxe
	// does (interface MTU − 80, rounded down to an IB MTU: 4096 on loopback).
	MTU driver.MTU
	// BusyPoll makes CQ polls read the socket themselves when the CQ is empty, the way
	// a DPDK poll-mode driver runs in the application's thread: a program spinning on
	// CQ.Poll sees packets without a goroutine hand-off. Traffic nobody polls for (a
	// passive WRITE target) is still served by a goroutine parked in the netpoller.
	BusyPoll bool
	// SameHost keeps the same-host shortcut on for this device even where GOVERBS_SHM=0
	// turns it off for the others. The shortcut is on by default: the device serves a
	// rendezvous socket and reaches other goverbs devices of this user on this host, in
	// its network namespace, through shared memory, and everything else by UDP as
	// without it (netio.ListenSameHost; docs/guide/same-host.md). Its wrapper costs the
	// path to remote peers nothing measurable (RC WRITE 64 KiB and busy-poll 8 B
	// send_lat over a veth pair within noise of GOVERBS_SHM=0; the guide's "When it
	// applies" has the runs).
	SameHost bool
	// NoSameHost turns the shortcut off for this device, whatever GOVERBS_SHM says: a
	// device whose datagrams must cross the kernel's UDP socket (a test of the UDP path,
	// a capture of what the kernel sees).
	NoSameHost bool
	// Conn, when set, is used instead of opening a UDP socket (for example a simulated
	// network from netio/simnet, or a netio.Tee recording to pcap). The device owns it.
	Conn netio.Conn
	// Backend, when set (and Conn is not), names the datagram backend to open instead of
	// a UDP socket, as "KIND:ARGS" of a backend registered with RegisterBackend: for
	// example "xdp:eth0/0", AF_XDP on queue 0 of eth0, once package verbs/soft/xdp is
	// imported. A backend that cannot be opened is an error, never a silent fall back
	// to UDP.
	Backend string
	// Recorder, when set, receives every datagram the device sends and receives
	// (a *pcap.Writer records them to a file Wireshark opens).
	Recorder netio.Recorder
	// Logger receives protocol events at debug level; nil logs nothing unless
	// GOVERBS_DEBUG is set.
	Logger *slog.Logger
	// Attach: instead of opening the address alone, attach to the `goverbs serve` daemon
	// that serves Addr (package verbs/attach), so that any number of processes share
	// the address. By default the process still runs an engine of its own there, on a
	// socket the daemon passes it, and the daemon keeps QP1, the CM and the steering of
	// each datagram to the process that owns its QP; GOVERBS_ATTACH_ENGINE=0 leaves the
	// engine to the daemon (BusyPoll then only makes this process's CQ waits spin).
	// Conn and Recorder do not apply.
	Attach bool
	// Congestion is DCQCN congestion control (ParseCongestion); off, the default, unless
	// GOVERBS_CC switches it on. On, RC and UC packets leave ECN-capable, CE-marked ones
	// are answered with CNPs and each QP is paced to its DCQCN rate.
	Congestion Congestion
	// SelectiveRepeat makes RC QPs keep out-of-order packets and resend only what is
	// lost, IRN-style, with peers that have it on too; with any other peer (rxe, older
	// goverbs) they run go-back-N as before. Off unless GOVERBS_SR=1.
	SelectiveRepeat bool
	// ReusePort opens the UDP socket with SO_REUSEPORT, as the first of a group that
	// other sockets of this user may join on the same address and port: goverbs serve
	// does, for the Go clients that run engines of their own on its address (package
	// verbs/attach). Not for a program's own device, whose bind should fail where
	// another device holds the address. With the same-host rings too, the rings carry
	// only datagrams for QPNs of top byte 0 to the device (netio.SameHostOptions.Steered),
	// whose engine must then own no QPN of another top byte (SetQPNs).
	ReusePort bool
}

// Info is the listing entry of the device cfg describes.
func Info(cfg Config) driver.DeviceInfo {
	if cfg.Name == "" {
		cfg.Name = "sw0"
	}
	return driver.DeviceInfo{Name: cfg.Name, NodeGUID: nodeGUID(cfg.Addr), NodeType: driver.NodeCA, Transport: "InfiniBand"}
}

// provider is the software device's entry in the driver registry. Its devices are
// those GOVERBS_DEVICES lists, read again at each call: the provider keeps no state.
type provider struct{}

func (provider) Devices() ([]driver.DeviceInfo, error) {
	list, err := Configs()
	if err != nil {
		return nil, err
	}
	var out []driver.DeviceInfo
	for _, cfg := range list {
		if !cfg.Attach { // an attached device is verbs/attach's to list
			out = append(out, Info(cfg))
		}
	}
	return out, nil
}

func (provider) Open(name string) (driver.Device, error) {
	list, err := Configs()
	if err != nil {
		return nil, err
	}
	for _, cfg := range list {
		if cfg.Name == name && !cfg.Attach {
			return Open(cfg)
		}
	}
	return nil, fmt.Errorf("%w: %q", driver.ErrNoDevice, name)
}

// nodeGUID makes a stable EUI-64-style GUID from the address (rxe derives it from the
// MAC; a software device on loopback has none).
func nodeGUID(a netip.Addr) uint64 {
	h := fnv.New64a()
	b, _ := a.MarshalBinary()
	h.Write(b)
	return 0x0200_00ff_fe00_0000 | h.Sum64()&0xffffff | (h.Sum64()>>24&0xff)<<32
}

// interfaceMTU finds the MTU of the interface that holds a.
func interfaceMTU(a netip.Addr) int {
	if a.IsLoopback() {
		if ifi, err := net.InterfaceByName("lo"); err == nil {
			return ifi.MTU
		}
		return 65536
	}
	if ifi, ok := netio.InterfaceOf(a); ok {
		return ifi.MTU
	}
	return 1500
}

// warnBuffersOnce: the socket-buffer warning is the same for every device of a process
// (the limits are system-wide), so it is said once.
var warnBuffersOnce sync.Once

// Open opens the software device cfg describes: it binds cfg.Addr (or takes cfg.Conn)
// and starts the engine on it. The driver.Device it returns is the engine's device,
// which is also a driver.Leader and a driver.GSI (QP1).
func Open(cfg Config) (driver.Device, error) {
	if cfg.Name == "" {
		cfg.Name = "sw0"
	}
	port := cfg.Port
	if port == 0 {
		port = wire.UDPPort
	}
	conn := cfg.Conn
	// Congestion control is settled before the socket is opened: the UDP socket asks
	// the kernel for each datagram's ECN bits only when it is on (issue 31). Its default
	// rate comes from the interface that holds the address, the given Conn's if any.
	ccAddr := cfg.Addr
	if conn != nil {
		ccAddr = conn.LocalAddr().Addr()
	}
	cc, err := congestionFor(cfg, ccAddr)
	if err != nil {
		if cfg.Conn != nil {
			cfg.Conn.Close() // the device owns it, opened or not
		}
		return nil, err
	}
	if conn == nil {
		if !cfg.Addr.IsValid() {
			return nil, fmt.Errorf("%w: software device %s has no address", driver.ErrInvalidAttr, cfg.Name)
		}
		c, err := listen(cfg, netip.AddrPortFrom(cfg.Addr, port), cc.Enabled)
		if err != nil {
			return nil, &openError{name: cfg.Name, addr: netip.AddrPortFrom(cfg.Addr, port), err: err}
		}
		conn = c
		if sameHostWanted(cfg) {
			// A group's steering by QPN holds for the rings too: they carry only
			// datagrams for QPNs of top byte 0 to this device (Steered).
			if sh, err := netio.ListenSameHost(c, netio.SameHostOptions{Steered: cfg.ReusePort}); err == nil {
				conn = sh
			} else if l := cfg.Logger; l != nil {
				// Not fatal: the device runs on UDP alone, as with the shortcut off.
				l.Debug("same-host shortcut unavailable", "device", cfg.Name, "err", err)
			}
		}
	}
	if cfg.Recorder != nil {
		conn = netio.Tee(conn, cfg.Recorder)
	}
	return start(cfg, conn, port, cc)
}

// OpenFile opens the software device cfg describes on f, a UDP socket already bound to
// its address and port (goverbs serve passes one to a Go client that runs its own
// engine on the daemon's address). The device takes a duplicate of f's descriptor;
// f stays the caller's. cfg's Conn, Backend and SameHost do not apply.
func OpenFile(cfg Config, f *os.File) (driver.Device, error) {
	if cfg.Name == "" {
		cfg.Name = "sw0"
	}
	port := cfg.Port
	if port == 0 {
		port = wire.UDPPort
	}
	cc, err := congestionFor(cfg, cfg.Addr)
	if err != nil {
		return nil, err
	}
	conn, err := netio.FileUDP(f, netio.UDPOptions{BusyPoll: cfg.BusyPoll, ECN: cc.Enabled})
	if err != nil {
		return nil, &openError{name: cfg.Name, addr: netip.AddrPortFrom(cfg.Addr, port), err: err}
	}
	if cfg.Recorder != nil {
		conn = netio.Tee(conn, cfg.Recorder)
	}
	return start(cfg, conn, port, cc)
}

// start runs the engine on conn, which it owns.
func start(cfg Config, conn netio.Conn, port uint16, cc Congestion) (driver.Device, error) {
	if msg := netio.BufferWarning(conn.Caps()); msg != "" {
		warnBuffersOnce.Do(func() {
			l := cfg.Logger
			if l == nil {
				l = slog.Default() // a degraded device should not stay silent
			}
			l.Warn(msg, "device", cfg.Name)
		})
	}
	addr := conn.LocalAddr().Addr()
	mtu := cfg.MTU
	if mtu == 0 {
		mtu = wire.ActiveMTU(interfaceMTU(addr))
	}
	log := cfg.Logger
	if log == nil {
		log = debugLogger()
	}
	d, err := engine.New(engine.Config{Name: cfg.Name, Conn: conn, PeerPort: port, MTU: mtu, Logger: log,
		BusyPoll: cfg.BusyPoll, NodeGUID: nodeGUID(cfg.Addr), Congestion: cc,
		SelectiveRepeat: cfg.SelectiveRepeat || envOn(EnvSelectiveRepeat)})
	if err != nil {
		conn.Close()
		return nil, err
	}
	return d, nil
}

// openError is a software device that could not be opened. Its text names the device and
// the socket error at the root of the chain; errors.Is still sees the whole chain.
type openError struct {
	name string
	addr netip.AddrPort
	err  error
}

func (e *openError) Error() string {
	root := e.err
	for {
		next := errors.Unwrap(root)
		if next == nil {
			break
		}
		root = next
	}
	return fmt.Sprintf("verbs: open %s on %v: %v", e.name, e.addr, root)
}

func (e *openError) Unwrap() []error { return []error{driver.ErrUnavailable, e.err} }

package verbs

import (
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"strings"
	"sync"

	"github.com/goverbs/goverbs/internal/engine"
	"github.com/goverbs/goverbs/netio"
	"github.com/goverbs/goverbs/verbs/driver"
	"github.com/goverbs/goverbs/wire"
)

// softName is the software provider's name in the driver registry.
const softName = "soft"

func init() { driver.Register(softName, softProvider{}) }

// SoftConfig describes a software RoCEv2 device: a UDP socket on one IP address that
// speaks RoCEv2 like an RNIC, inside this process.
type SoftConfig struct {
	// Name is the device name ("sw0" when empty).
	Name string
	// Addr is the IP address to bind (IPv4 or IPv6); its GID is the port's GID 0.
	Addr netip.Addr
	// Port is the UDP port to bind and to send to (4791, the RoCEv2 port, when zero).
	Port uint16
	// MTU is the port's active MTU. Zero derives it from the interface MTU as Linux rxe
	// does (interface MTU − 80, rounded down to an IB MTU: 4096 on loopback).
	MTU MTU
	// BusyPoll makes CQ polls read the socket themselves when the CQ is empty, the way
	// a DPDK poll-mode driver runs in the application's thread: a program spinning on
	// CQ.Poll sees packets without a goroutine hand-off. Traffic nobody polls for (a
	// passive WRITE target) is still served by a goroutine parked in the netpoller.
	BusyPoll bool
	// Conn, when set, is used instead of opening a UDP socket (for example a simulated
	// network from netio/simnet, or a netio.Tee recording to pcap). The device owns it.
	Conn netio.Conn
	// Recorder, when set, receives every datagram the device sends and receives
	// (a *pcap.Writer records them to a file Wireshark opens).
	Recorder netio.Recorder
	// Logger receives protocol events at debug level; nil logs nothing unless
	// GOVERBS_DEBUG is set.
	Logger *slog.Logger
}

// EnvDevices is the environment variable that lists the software devices Devices
// returns: comma-separated NAME=ADDR[:PORT] entries, for example
// "sw0=127.0.0.2,sw1=[::1]:4791". Unset, there is one device, sw0 on 127.0.0.1.
const EnvDevices = "GOVERBS_DEVICES"

// OpenSoft opens a software device bound to cfg.Addr (or using cfg.Conn).
func OpenSoft(cfg SoftConfig) (*Device, error) {
	if cfg.Name == "" {
		cfg.Name = "sw0"
	}
	impl, err := openSoft(cfg)
	if err != nil {
		return nil, err
	}
	i := softInfo(cfg)
	return newDevice(DeviceInfo{Name: i.Name, NodeGUID: i.NodeGUID, NodeType: i.NodeType,
		Transport: i.Transport, Provider: softName}, impl), nil
}

// SoftConfig returns the configuration of a listed software device, so that a program
// can open it with options of its own (a Recorder, busy polling) through OpenSoft.
func (i DeviceInfo) SoftConfig() (SoftConfig, bool) {
	if i.Provider != softName {
		return SoftConfig{}, false
	}
	list, err := softDevices()
	if err != nil {
		return SoftConfig{}, false
	}
	for _, cfg := range list {
		if cfg.Name == i.Name {
			return cfg, true
		}
	}
	return SoftConfig{}, false
}

func softInfo(cfg SoftConfig) driver.DeviceInfo {
	return driver.DeviceInfo{Name: cfg.Name, NodeGUID: nodeGUID(cfg.Addr), NodeType: NodeCA, Transport: "InfiniBand"}
}

// softProvider is the software device's entry in the driver registry. Its devices are
// those GOVERBS_DEVICES lists, read again at each call: the provider keeps no state.
type softProvider struct{}

func (softProvider) Devices() ([]driver.DeviceInfo, error) {
	list, err := softDevices()
	if err != nil {
		return nil, err
	}
	out := make([]driver.DeviceInfo, len(list))
	for i, cfg := range list {
		out[i] = softInfo(cfg)
	}
	return out, nil
}

func (softProvider) Open(name string) (driver.Device, error) {
	list, err := softDevices()
	if err != nil {
		return nil, err
	}
	for _, cfg := range list {
		if cfg.Name == name {
			return openSoft(cfg)
		}
	}
	return nil, fmt.Errorf("%w: %q", ErrNoDevice, name)
}

// softDevices parses GOVERBS_DEVICES.
func softDevices() ([]SoftConfig, error) {
	spec := os.Getenv(EnvDevices)
	if spec == "" {
		return []SoftConfig{{Name: "sw0", Addr: netip.MustParseAddr("127.0.0.1")}}, nil
	}
	var out []SoftConfig
	for _, ent := range strings.Split(spec, ",") {
		ent = strings.TrimSpace(ent)
		if ent == "" {
			continue
		}
		name, addr, ok := strings.Cut(ent, "=")
		if !ok || name == "" {
			return nil, fmt.Errorf("%w: %s: entry %q is not NAME=ADDR[:PORT]", ErrNoDevice, EnvDevices, ent)
		}
		cfg := SoftConfig{Name: name}
		if ap, err := netip.ParseAddrPort(addr); err == nil {
			cfg.Addr, cfg.Port = ap.Addr(), ap.Port()
		} else if a, err := netip.ParseAddr(strings.Trim(addr, "[]")); err == nil {
			cfg.Addr = a
		} else {
			return nil, fmt.Errorf("%w: %s: %q is not an IP address", ErrNoDevice, EnvDevices, addr)
		}
		out = append(out, cfg)
	}
	return out, nil
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

func openSoft(cfg SoftConfig) (driver.Device, error) {
	port := cfg.Port
	if port == 0 {
		port = wire.UDPPort
	}
	conn := cfg.Conn
	if conn == nil {
		if !cfg.Addr.IsValid() {
			return nil, fmt.Errorf("%w: software device %s has no address", ErrInvalidAttr, cfg.Name)
		}
		c, err := netio.ListenUDP(netip.AddrPortFrom(cfg.Addr, port), netio.UDPOptions{BusyPoll: cfg.BusyPoll})
		if err != nil {
			return nil, &openError{name: cfg.Name, addr: netip.AddrPortFrom(cfg.Addr, port), err: err}
		}
		conn = c
	}
	if cfg.Recorder != nil {
		conn = netio.Tee(conn, cfg.Recorder)
	}
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
	if log == nil && os.Getenv("GOVERBS_DEBUG") != "" {
		log = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	d, err := engine.New(engine.Config{Name: cfg.Name, Conn: conn, PeerPort: port, MTU: mtu, Logger: log, BusyPoll: cfg.BusyPoll})
	if err != nil {
		conn.Close()
		return nil, err
	}
	return &softDevice{d: d, guid: nodeGUID(cfg.Addr)}, nil
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

func (e *openError) Unwrap() []error { return []error{ErrUnavailable, e.err} }

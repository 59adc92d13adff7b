package verbs

import (
	"github.com/goverbs/goverbs/verbs/attach"
	"github.com/goverbs/goverbs/verbs/driver"
	"github.com/goverbs/goverbs/verbs/soft"
)

// The software provider (package verbs/soft) is always there: Devices lists its
// devices, Open and OpenSoft open them.

// SoftConfig describes a software RoCEv2 device: a UDP socket on one IP address that
// speaks RoCEv2 like an RNIC, inside this process. Its fields: Name ("sw0" when empty),
// Addr (the IP address to bind; the port's GID 0), Port (4791 when zero), MTU (derived
// from the interface when zero), BusyPoll (CQ polls read the socket themselves), Conn (a
// netio.Conn to use instead of a UDP socket, such as netio/simnet's), Recorder (gets
// every datagram, for pcap) and Logger (protocol events at debug level). See
// soft.Config for each in full.
type SoftConfig = soft.Config

// EnvDevices is the environment variable that lists the software devices Devices
// returns: comma-separated NAME=ADDR[:PORT] entries, for example
// "sw0=127.0.0.2,sw1=[::1]:4791". Unset, there is one device, sw0 on 127.0.0.1.
const EnvDevices = soft.EnvDevices

// OpenSoft opens a software device bound to cfg.Addr (or using cfg.Conn).
func OpenSoft(cfg SoftConfig) (*Device, error) {
	if cfg.Name == "" {
		cfg.Name = "sw0"
	}
	var impl driver.Device
	var err error
	provider := soft.ProviderName
	if cfg.Conn == nil && (cfg.Attach || soft.AttachAll()) {
		// The device runs in a goverbs serve daemon; this process attaches to it.
		cfg.Attach, provider = true, attach.ProviderName
		impl, err = attach.Open(cfg)
	} else {
		impl, err = soft.Open(cfg)
	}
	if err != nil {
		return nil, err
	}
	i := soft.Info(cfg)
	return newDevice(DeviceInfo{Name: i.Name, NodeGUID: i.NodeGUID, NodeType: i.NodeType,
		Transport: i.Transport, Provider: provider}, impl), nil
}

// SoftConfig returns the configuration of a listed software device, so that a program
// can open it with options of its own (a Recorder, busy polling) through OpenSoft.
func (i DeviceInfo) SoftConfig() (SoftConfig, bool) {
	if i.Provider != soft.ProviderName && i.Provider != attach.ProviderName {
		return SoftConfig{}, false
	}
	list, err := soft.Configs()
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

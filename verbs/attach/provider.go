// Package attach is the provider of software devices that a `goverbs serve` daemon
// runs: a process attaches to the daemon serving a device's address and gets its own
// PDs, MRs, CQs and QPs on it, beside every other attached process, as processes share
// a kernel RDMA device. Control operations are messages on a unix socket; posting and
// polling go through queues in shared memory (docs/attach-protocol.md).
//
// It registers as "attach" when imported, and package verbs imports it. Its devices
// are the GOVERBS_DEVICES entries that end in "@serve" (all of them with
// GOVERBS_ATTACH=1); verbs.OpenSoft with SoftConfig.Attach opens one too.
//
// Registered memory is shared with the daemon without a copy: RegMR moves the pages
// under the buffer onto a memfd (contents kept, address kept) that the daemon maps, so
// the daemon's engine reads and writes the program's buffer itself and can reach
// nothing else. A registered buffer must therefore be whole pages (memory_linux.go).
// Linux only.
package attach

import (
	"fmt"

	"github.com/goverbs/goverbs/verbs/driver"
	"github.com/goverbs/goverbs/verbs/soft"
)

// ProviderName is the name the provider registers under.
const ProviderName = "attach"

func init() { driver.Register(ProviderName, provider{}) }

type provider struct{}

func (provider) Devices() ([]driver.DeviceInfo, error) {
	list, err := soft.Configs()
	if err != nil {
		return nil, err
	}
	var out []driver.DeviceInfo
	for _, cfg := range list {
		if cfg.Attach {
			out = append(out, soft.Info(cfg))
		}
	}
	return out, nil
}

func (provider) Open(name string) (driver.Device, error) {
	list, err := soft.Configs()
	if err != nil {
		return nil, err
	}
	for _, cfg := range list {
		if cfg.Attach && cfg.Name == name {
			return Open(cfg)
		}
	}
	return nil, fmt.Errorf("%w: %q", driver.ErrNoDevice, name)
}

// Open attaches to the daemon serving cfg.Addr, under cfg.Name.
func Open(cfg soft.Config) (driver.Device, error) {
	if cfg.Name == "" {
		cfg.Name = "sw0"
	}
	if cfg.Conn != nil || cfg.Recorder != nil {
		return nil, fmt.Errorf("%w: %s: an attached device has no socket of its own (Conn, Recorder): the daemon has it", driver.ErrInvalidAttr, cfg.Name)
	}
	if !cfg.Addr.IsValid() {
		return nil, fmt.Errorf("%w: software device %s has no address", driver.ErrInvalidAttr, cfg.Name)
	}
	return open(cfg)
}

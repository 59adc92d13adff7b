//go:build !ibverbs

package cm

import (
	"net/netip"

	"github.com/goverbs/goverbs/verbs"
)

// Without the ibverbs tag there are no kernel RDMA devices: every agent is the
// software CM on QP1.

func newKernel(*verbs.Device, *Config) (*Agent, bool, error) { return nil, false, nil }

func kernelDeviceFor(netip.Addr) (verbs.DeviceInfo, bool) { return verbs.DeviceInfo{}, false }

//go:build ibverbs

package ibverbs

/*
#cgo LDFLAGS: -libverbs
#include <stdlib.h>
#include "shim.h"
*/
import "C"

import (
	"errors"
	"fmt"
	"syscall"
	"unsafe"

	"github.com/goverbs/goverbs/verbs/driver"
)

// ProviderName is the name this provider registers under (verbs.DeviceInfo.Provider).
const ProviderName = "ibverbs"

func init() { driver.Register(ProviderName, provider{}) }

// provider lists and opens the kernel's RDMA devices.
type provider struct{}

// deviceList calls f with the kernel's device list (ibv_get_device_list) and frees it
// after. A machine without RDMA support (no ib_uverbs, no devices) has an empty list: that
// is not an error, or one missing kernel module would hide the software devices too.
func deviceList(f func(devs []*C.struct_ibv_device) error) error {
	var n C.int
	list, err := C.ibv_get_device_list(&n)
	if list == nil {
		if errors.Is(err, syscall.ENOSYS) || errors.Is(err, syscall.ENOENT) || errors.Is(err, syscall.ENODEV) {
			return f(nil)
		}
		return ibvErr("ibv_get_device_list", err)
	}
	defer C.ibv_free_device_list(list)
	return f(unsafe.Slice(list, int(n)))
}

func (provider) Devices() ([]driver.DeviceInfo, error) {
	var out []driver.DeviceInfo
	err := deviceList(func(devs []*C.struct_ibv_device) error {
		for _, d := range devs {
			out = append(out, driver.DeviceInfo{
				Name:      C.GoString(C.ibv_get_device_name(d)),
				NodeGUID:  uint64(C.gv_device_guid(d)),
				NodeType:  driver.NodeType(d.node_type),
				Transport: transportName(d.transport_type),
			})
		}
		return nil
	})
	return out, err
}

func (provider) Open(name string) (driver.Device, error) {
	var dev *device
	err := deviceList(func(devs []*C.struct_ibv_device) error {
		for _, d := range devs {
			if C.GoString(C.ibv_get_device_name(d)) != name {
				continue
			}
			var err error
			dev, err = openDevice(d, name)
			return err
		}
		return fmt.Errorf("%w: %q", driver.ErrNoDevice, name)
	})
	if err != nil {
		return nil, err
	}
	return dev, nil
}

func transportName(t C.enum_ibv_transport_type) string {
	switch t {
	case C.IBV_TRANSPORT_IB:
		return "InfiniBand"
	case C.IBV_TRANSPORT_IWARP:
		return "iWARP"
	case C.IBV_TRANSPORT_USNIC, C.IBV_TRANSPORT_USNIC_UDP:
		return "usNIC"
	}
	return "unknown"
}

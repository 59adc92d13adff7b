//go:build linux

package afxdp

import (
	"fmt"

	"golang.org/x/sys/unix"
)

// Capability numbers (linux/capability.h).
const (
	capNetAdmin = 12
	capNetRaw   = 13
	capSysAdmin = 21
	capBPF      = 39
)

// checkCapabilities reports which of the capabilities AF_XDP needs the calling thread
// lacks in its effective set, as a *CapabilityError, or nil.
func checkCapabilities() error {
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capget(&hdr, &data[0]); err != nil {
		return fmt.Errorf("afxdp: capget: %w", err)
	}
	return missingCapabilities(uint64(data[0].Effective) | uint64(data[1].Effective)<<32)
}

// missingCapabilities checks an effective capability set. CAP_SYS_ADMIN stands in for
// CAP_BPF, as the kernel's bpf_capable() lets it (kernels before 5.8 know only it).
func missingCapabilities(eff uint64) error {
	has := func(c uint) bool { return eff&(1<<c) != 0 }
	var missing []string
	if !has(capNetAdmin) {
		missing = append(missing, "CAP_NET_ADMIN")
	}
	if !has(capBPF) && !has(capSysAdmin) {
		missing = append(missing, "CAP_BPF")
	}
	if !has(capNetRaw) {
		missing = append(missing, "CAP_NET_RAW")
	}
	if missing != nil {
		return &CapabilityError{Missing: missing}
	}
	return nil
}

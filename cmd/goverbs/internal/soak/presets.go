package soak

import (
	"time"

	"github.com/goverbs/goverbs/netio/simnet"
)

// Preset is a named fault setting: each fault alone, then all of them together.
type Preset struct {
	Name   string
	Faults simnet.Faults
	// Counter is a device counter that must rise when the fault is really exercised and
	// recovered from ("" for none).
	Counter string
}

// Presets are the soak's standard fault settings.
var Presets = []Preset{
	{"clean", simnet.Faults{Delay: 20 * time.Microsecond}, ""},
	{"loss", simnet.Faults{Loss: 0.03, Delay: 20 * time.Microsecond}, "retransmits"},
	{"reorder", simnet.Faults{Reorder: 0.03, ReorderDelay: 300 * time.Microsecond, Delay: 20 * time.Microsecond}, "out_of_sequence"},
	{"duplicate", simnet.Faults{Duplicate: 0.03, Delay: 20 * time.Microsecond}, "duplicate_request"},
	{"corrupt", simnet.Faults{Corrupt: 0.03, Delay: 20 * time.Microsecond}, "rcvd_icrc_err"},
	{"delay", simnet.Faults{Delay: 2 * time.Millisecond}, ""},
	{"jitter", simnet.Faults{Delay: 100 * time.Microsecond, Jitter: 100 * time.Microsecond}, "out_of_sequence"},
	{"all", simnet.Faults{Loss: 0.02, Reorder: 0.02, Duplicate: 0.02, Corrupt: 0.02, ReorderDelay: 300 * time.Microsecond,
		Delay: 50 * time.Microsecond, Jitter: 30 * time.Microsecond}, "retransmits"},
}

// PresetNamed returns the preset called name.
func PresetNamed(name string) (Preset, bool) {
	for _, p := range Presets {
		if p.Name == name {
			return p, true
		}
	}
	return Preset{}, false
}

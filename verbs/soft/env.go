// The environment: the device list (GOVERBS_DEVICES) and protocol logging
// (GOVERBS_DEBUG).

package soft

import (
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"strings"

	"github.com/goverbs/goverbs/verbs/driver"
)

// EnvDevices is the environment variable that lists the software devices: comma-separated
// NAME=ADDR[:PORT][@BACKEND] entries, for example "sw0=127.0.0.2,sw1=[::1]:4791". Unset,
// there is one device, sw0 on 127.0.0.1. A device runs on a UDP socket unless its entry
// names a registered backend after an @ (Config.Backend), for example
// "sw0=10.0.0.1@xdp:eth0/0". An entry ending in "@serve" is a device that a
// `goverbs serve` daemon runs and this process attaches to (Config.Attach).
const EnvDevices = "GOVERBS_DEVICES"

// EnvAttach is the environment variable that, set to 1, attaches every software device
// (those of GOVERBS_DEVICES, and those a program opens with its own Config) to the
// `goverbs serve` daemon serving its address, as "@serve" does for one entry.
const EnvAttach = "GOVERBS_ATTACH"

// AttachAll reports whether GOVERBS_ATTACH asks for every device to be attached.
func AttachAll() bool { return os.Getenv(EnvAttach) == "1" }

// EnvDebug is the environment variable that, when set (to anything), logs every software
// device's protocol events at debug level to standard error, unless its Config has a
// Logger.
const EnvDebug = "GOVERBS_DEBUG"

// Configs returns the configurations of the listed devices, parsed from GOVERBS_DEVICES
// at each call. A malformed list is an error that wraps driver.ErrNoDevice.
func Configs() ([]Config, error) {
	spec := os.Getenv(EnvDevices)
	if spec == "" {
		return []Config{{Name: "sw0", Addr: netip.MustParseAddr("127.0.0.1"), Attach: AttachAll()}}, nil
	}
	return ParseDevices(spec)
}

// ParseDevices parses a device list in GOVERBS_DEVICES' syntax (`goverbs serve` takes
// one on its command line).
func ParseDevices(spec string) ([]Config, error) {
	var out []Config
	for _, ent := range strings.Split(spec, ",") {
		ent = strings.TrimSpace(ent)
		if ent == "" {
			continue
		}
		name, addr, ok := strings.Cut(ent, "=")
		if !ok || name == "" {
			return nil, fmt.Errorf("%w: %s: entry %q is not NAME=ADDR[:PORT]", driver.ErrNoDevice, EnvDevices, ent)
		}
		cfg := Config{Name: name, Attach: AttachAll()}
		// The backend is looked up when the device opens: a program that does not
		// carry it still lists the device, and opening it says what to import.
		addr, cfg.Backend, _ = strings.Cut(addr, "@")
		if cfg.Backend == "serve" {
			cfg.Backend, cfg.Attach = "", true
		}
		if ap, err := netip.ParseAddrPort(addr); err == nil {
			cfg.Addr, cfg.Port = ap.Addr(), ap.Port()
		} else if a, err := netip.ParseAddr(strings.Trim(addr, "[]")); err == nil {
			cfg.Addr = a
		} else {
			return nil, fmt.Errorf("%w: %s: %q is not an IP address", driver.ErrNoDevice, EnvDevices, addr)
		}
		out = append(out, cfg)
	}
	return out, nil
}

// EnvSameHost is the environment variable that switches the same-host shortcut for
// every device of a process: 0 (or "off", "false", "no") turns it off, 1 ("on", "true",
// "yes") or unset leaves it on, the default. A device's own Config.NoSameHost or
// Config.SameHost, when set, wins over it: a program that chose for one device gets its
// choice. goverbs serve reads it for its devices too.
const EnvSameHost = "GOVERBS_SHM"

// sameHostWanted reports whether the device cfg describes takes the same-host shortcut:
// yes, unless its Config or GOVERBS_SHM turns it off, or another backend carries its
// datagrams. On by default since its wrapper stopped costing the path to remote peers
// (docs/guide/same-host.md, "When it applies", has the A/B over a veth pair); a device
// that finds no peer on the host sends everything by UDP as before.
func sameHostWanted(cfg Config) bool {
	if cfg.NoSameHost || cfg.Backend != "" {
		// Another backend (AF_XDP) has its own path for traffic within the host.
		return false
	}
	if cfg.SameHost {
		return true
	}
	return !sameHostOffByEnv()
}

// sameHostOffByEnv reports whether GOVERBS_SHM turns the shortcut off (0, off, false,
// no); any other value, and none, leaves it on.
func sameHostOffByEnv() bool {
	switch strings.ToLower(strings.TrimSpace(os.Getenv(EnvSameHost))) {
	case "0", "off", "false", "no":
		return true
	}
	return false
}

// debugLogger is the logger of a device whose Config has none: GOVERBS_DEBUG's, or nil.
func debugLogger() *slog.Logger {
	if os.Getenv(EnvDebug) == "" {
		return nil
	}
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

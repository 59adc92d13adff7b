// Congestion control's switches: the Config field's type, the GOVERBS_CC environment
// variable and the MODE[:RATE] text the tools' --cc flag takes.

package soft

import (
	"fmt"
	"net/netip"
	"os"
	"strconv"
	"strings"

	"github.com/goverbs/goverbs/internal/congestion"
	"github.com/goverbs/goverbs/netio"
	"github.com/goverbs/goverbs/verbs/driver"
)

// Congestion is DCQCN's configuration for a device (see docs/guide/congestion.md): the
// zero value is off. Make one with ParseCongestion, or with internal/congestion's
// PaperConfig or ConnectXConfig inside this module.
type Congestion = congestion.Config

// EnvCongestion is the environment variable that switches congestion control on for
// every software device whose Config does not: its value is what ParseCongestion takes
// ("dcqcn", "connectx:25g", "off").
const EnvCongestion = "GOVERBS_CC"

// EnvSelectiveRepeat is the environment variable that, set to anything but "" or "0",
// switches selective repeat on for every software device (Config.SelectiveRepeat).
const EnvSelectiveRepeat = "GOVERBS_SR"

func envOn(name string) bool {
	v := os.Getenv(name)
	return v != "" && v != "0"
}

// defaultLineRate is the line rate of a device whose interface reports no speed
// (loopback, a tunnel): a software device has no port speed, and a low guess would pace
// an uncongested QP below what the machine can do.
const defaultLineRate = 100e9

// ParseCongestion parses MODE[:RATE]: MODE is off, dcqcn (the DCQCN paper's parameters)
// or connectx (ConnectX firmware's, as the HPCC simulator models them); RATE is the
// port's line rate in bits per second with an optional k, m or g suffix (25g). Without
// RATE it is the speed of addr's interface (sysfs), or 100 Gb/s when the interface
// reports none.
func ParseCongestion(spec string, addr netip.Addr) (Congestion, error) {
	mode, rateText, hasRate := strings.Cut(strings.TrimSpace(strings.ToLower(spec)), ":")
	rate := 0.0
	if hasRate {
		r, err := parseRate(rateText)
		if err != nil {
			return Congestion{}, fmt.Errorf("%w: congestion control %q: %v", driver.ErrInvalidAttr, spec, err)
		}
		rate = r
	}
	if rate == 0 && mode != "off" && mode != "" {
		rate = lineRateOf(addr)
	}
	var c Congestion
	switch mode {
	case "", "off":
		return Congestion{}, nil
	case "dcqcn", "on":
		c = congestion.PaperConfig(rate)
	case "connectx":
		c = congestion.ConnectXConfig(rate)
	default:
		return Congestion{}, fmt.Errorf("%w: congestion control %q: mode is off, dcqcn or connectx", driver.ErrInvalidAttr, spec)
	}
	if err := c.Validate(); err != nil {
		return Congestion{}, fmt.Errorf("%w: congestion control %q: %v", driver.ErrInvalidAttr, spec, err)
	}
	return c, nil
}

// parseRate reads a rate in bits per second: 25g, 100m, 1e10.
func parseRate(s string) (float64, error) {
	mult := 1.0
	switch {
	case strings.HasSuffix(s, "g"):
		mult, s = 1e9, s[:len(s)-1]
	case strings.HasSuffix(s, "m"):
		mult, s = 1e6, s[:len(s)-1]
	case strings.HasSuffix(s, "k"):
		mult, s = 1e3, s[:len(s)-1]
	}
	v, err := strconv.ParseFloat(s, 64)
	if err != nil || !(v > 0) {
		return 0, fmt.Errorf("rate %q is not a positive number of bits per second", s)
	}
	return v * mult, nil
}

// lineRateOf is the speed of the interface holding addr, from sysfs (Mb/s), or
// defaultLineRate.
func lineRateOf(addr netip.Addr) float64 {
	if !addr.IsValid() || addr.IsLoopback() {
		return defaultLineRate
	}
	ifi, ok := netio.InterfaceOf(addr)
	if !ok {
		return defaultLineRate
	}
	b, err := os.ReadFile("/sys/class/net/" + ifi.Name + "/speed")
	if err != nil {
		return defaultLineRate
	}
	mbps, err := strconv.ParseFloat(strings.TrimSpace(string(b)), 64)
	if err != nil || mbps <= 0 {
		return defaultLineRate
	}
	return mbps * 1e6
}

// congestionFor is the configuration a device opens with: cfg's own when it is on,
// otherwise GOVERBS_CC's.
func congestionFor(cfg Config, addr netip.Addr) (Congestion, error) {
	if cfg.Congestion.Enabled {
		if err := cfg.Congestion.Validate(); err != nil {
			return Congestion{}, fmt.Errorf("%w: %v", driver.ErrInvalidAttr, err)
		}
		return cfg.Congestion, nil
	}
	if spec := os.Getenv(EnvCongestion); spec != "" {
		return ParseCongestion(spec, addr)
	}
	return Congestion{}, nil
}

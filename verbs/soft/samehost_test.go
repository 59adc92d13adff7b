package soft

import (
	"net/netip"
	"runtime"
	"testing"

	"github.com/goverbs/goverbs/internal/engine"
	"github.com/goverbs/goverbs/internal/testaddr"
	"github.com/goverbs/goverbs/verbs/driver"
)

// TestSameHostSwitch: the shortcut is on by default; GOVERBS_SHM=0 (or off, false, no)
// turns it off; a device's own NoSameHost or SameHost wins over the environment; another
// backend never has it.
func TestSameHostSwitch(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  Config
		env  string
		want bool
	}{
		{"default", Config{}, "", true},
		{"env 1", Config{}, "1", true},
		{"env on", Config{}, " On ", true},
		{"env 0", Config{}, "0", false},
		{"env off", Config{}, "off", false},
		{"env false", Config{}, "false", false},
		{"env no", Config{}, "NO", false},
		{"env other", Config{}, "maybe", true},
		{"NoSameHost", Config{NoSameHost: true}, "", false},
		{"NoSameHost over env 1", Config{NoSameHost: true}, "1", false},
		{"SameHost over env 0", Config{SameHost: true}, "0", true},
		{"NoSameHost over SameHost", Config{SameHost: true, NoSameHost: true}, "", false},
		{"backend", Config{Backend: "xdp:lo/0"}, "1", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv(EnvSameHost, tc.env)
			if got := sameHostWanted(tc.cfg); got != tc.want {
				t.Fatalf("sameHostWanted(%+v) with %s=%q = %v, want %v", tc.cfg, EnvSameHost, tc.env, got, tc.want)
			}
		})
	}
}

// TestSameHostOnByDefault: a device opened with nothing said has the shortcut (its
// counters have the samehost_ entries), one opened with GOVERBS_SHM=0 does not.
func TestSameHostOnByDefault(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("the same-host shortcut is Linux's")
	}
	for _, env := range []string{"", "0"} {
		t.Setenv(EnvSameHost, env)
		d := testaddr.Open(t, testaddr.Soft, func(a netip.Addr) (driver.Device, error) {
			return Open(Config{Name: "shm0", Addr: a})
		})
		has := false
		for _, c := range d.(*engine.Device).Counters() {
			has = has || c.Name == "samehost_peers"
		}
		d.Close()
		if want := env == ""; has != want {
			t.Fatalf("%s=%q: the device has the shortcut: %v, want %v", EnvSameHost, env, has, want)
		}
	}
}

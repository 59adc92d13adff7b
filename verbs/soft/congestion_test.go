package soft

import (
	"errors"
	"net/netip"
	"testing"

	"github.com/goverbs/goverbs/internal/congestion"
	"github.com/goverbs/goverbs/internal/testaddr"
	"github.com/goverbs/goverbs/netio"
	"github.com/goverbs/goverbs/verbs/driver"
)

func TestParseCongestion(t *testing.T) {
	lo := netip.MustParseAddr("127.0.0.1")
	for _, tc := range []struct {
		spec string
		want Congestion
	}{
		{"", Congestion{}},
		{"off", Congestion{}},
		{"OFF:10g", Congestion{}},
		{"dcqcn", congestion.PaperConfig(defaultLineRate)},
		{"dcqcn:25g", congestion.PaperConfig(25e9)},
		{"connectx:100m", congestion.ConnectXConfig(100e6)},
		{" connectx:1e10 ", congestion.ConnectXConfig(1e10)},
	} {
		got, err := ParseCongestion(tc.spec, lo)
		if err != nil || got != tc.want {
			t.Errorf("ParseCongestion(%q) = %+v, %v; want %+v", tc.spec, got, err, tc.want)
		}
	}
	for _, bad := range []string{"dcqcn:", "dcqcn:-5g", "dcqcn:NaN", "dcqcn:fast", "reno", "dcqcn:50m"} {
		if _, err := ParseCongestion(bad, lo); !errors.Is(err, driver.ErrInvalidAttr) {
			t.Errorf("ParseCongestion(%q): %v, want an ErrInvalidAttr", bad, err)
		}
	}
}

func TestCongestionFromEnvironment(t *testing.T) {
	t.Setenv(EnvCongestion, "connectx:25g")
	got, err := congestionFor(Config{}, netip.MustParseAddr("127.0.0.1"))
	if err != nil || got != congestion.ConnectXConfig(25e9) {
		t.Fatalf("GOVERBS_CC=connectx:25g gave %+v, %v", got, err)
	}
	own := congestion.PaperConfig(40e9)
	if got, _ := congestionFor(Config{Congestion: own}, netip.Addr{}); got != own {
		t.Fatalf("the Config's own setting lost to the environment: %+v", got)
	}
	bad := own
	bad.G = 0
	if _, err := congestionFor(Config{Congestion: bad}, netip.Addr{}); err == nil {
		t.Fatal("an invalid Config was accepted")
	}
	t.Setenv(EnvCongestion, "sideways")
	if _, err := congestionFor(Config{}, netip.Addr{}); err == nil {
		t.Fatal("a bad GOVERBS_CC was accepted")
	}
}

// A device asks its UDP socket for received ECN bits exactly when its congestion control
// is on (Config or GOVERBS_CC): then it answers CE with CNPs, as an RNIC's notification
// point does; off, nothing reads them, and the socket is not asked for a control message
// per datagram (issue 31). With it on, the Conn says ECN, so the device sends ECT(0).
func TestECNSocketOnlyWithCongestionControl(t *testing.T) {
	var asked []netio.UDPOptions
	var conns []netio.Conn
	listenUDP = func(addr netip.AddrPort, o netio.UDPOptions) (netio.Conn, error) {
		asked = append(asked, o)
		c, err := netio.ListenUDP(addr, o)
		conns = append(conns, c)
		return c, err
	}
	t.Cleanup(func() { listenUDP = netio.ListenUDP })
	for _, tc := range []struct {
		name string
		cc   Congestion
		env  string
		want bool
	}{
		{"off", Congestion{}, "", false},
		{"config", congestion.PaperConfig(10e9), "", true},
		{"env", Congestion{}, "dcqcn:10g", true},
		{"env-off", Congestion{}, "off", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv(EnvCongestion, tc.env)
			asked, conns = nil, nil
			d := testaddr.Open(t, testaddr.Soft, func(a netip.Addr) (driver.Device, error) {
				return Open(Config{Name: "ecn0", Addr: a, Congestion: tc.cc, NoSameHost: true})
			})
			defer d.Close()
			o := asked[len(asked)-1] // testaddr.Open may have drawn a busy address first
			if o.ECN != tc.want {
				t.Fatalf("ListenUDP asked with %+v, want ECN %v", o, tc.want)
			}
			if got := conns[len(conns)-1].Caps().ECN; got != tc.want {
				t.Fatalf("the device's socket says ECN %v, want %v", got, tc.want)
			}
		})
	}
}

package soft

import (
	"errors"
	"net/netip"
	"strings"
	"testing"

	"github.com/goverbs/goverbs/netio"
	"github.com/goverbs/goverbs/netio/netiotest"
	"github.com/goverbs/goverbs/verbs/driver"
)

// A GOVERBS_DEVICES entry's @BACKEND reaches the registered backend with its arguments,
// the device's address and its busy-poll setting, and the device runs on what it returns.
func TestBackendFromEnvironment(t *testing.T) {
	type call struct {
		args string
		addr netip.AddrPort
		busy bool
	}
	var got []call
	a, b := netip.MustParseAddrPort("127.0.0.2:4791"), netip.MustParseAddrPort("127.0.0.3:4791")
	RegisterBackend("testpipe", func(args string, addr netip.AddrPort, busy bool) (netio.Conn, error) {
		got = append(got, call{args, addr, busy})
		ca, _ := netiotest.Pipe(a, b)
		return ca, nil
	})
	t.Setenv(EnvDevices, "sw7=127.0.0.2@testpipe:eth9/3,sw8=127.0.0.3")
	cfgs, err := Configs()
	if err != nil {
		t.Fatal(err)
	}
	if len(cfgs) != 2 || cfgs[0].Backend != "testpipe:eth9/3" || cfgs[1].Backend != "" || cfgs[0].Addr != a.Addr() {
		t.Fatalf("Configs() = %+v", cfgs)
	}
	cfgs[0].BusyPoll = true
	d, err := Open(cfgs[0])
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if len(got) != 1 || got[0] != (call{"eth9/3", a, true}) {
		t.Fatalf("backend called with %+v", got)
	}
}

// An entry naming a backend this program does not carry is listed, and opening it says
// which backend is missing instead of falling back to UDP.
func TestUnknownBackend(t *testing.T) {
	for _, spec := range []string{"nosuch:eth0", "nosuch"} {
		_, err := Open(Config{Name: "sw9", Addr: netip.MustParseAddr("127.0.0.2"), Backend: spec})
		if err == nil || !strings.Contains(err.Error(), `unknown kind "nosuch"`) {
			t.Fatalf("Open with backend %q: %v", spec, err)
		}
		if !errors.Is(err, driver.ErrUnavailable) {
			t.Fatalf("Open with backend %q: %v does not wrap ErrUnavailable", spec, err)
		}
	}
}

func TestRegisterBackendRefusesDuplicates(t *testing.T) {
	RegisterBackend("testdup", func(string, netip.AddrPort, bool) (netio.Conn, error) { return nil, errors.New("unused") })
	defer func() {
		if recover() == nil {
			t.Fatal("a second registration of the same kind did not panic")
		}
	}()
	RegisterBackend("testdup", func(string, netip.AddrPort, bool) (netio.Conn, error) { return nil, errors.New("unused") })
}

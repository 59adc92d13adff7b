package cm

import (
	"net/netip"
	"testing"

	"github.com/goverbs/goverbs/verbs"
)

func TestSourceAddr(t *testing.T) {
	for _, dst := range []string{"127.0.0.1", "127.44.3.2"} {
		src, err := SourceAddr(netip.MustParseAddr(dst))
		if err != nil {
			t.Fatal(err)
		}
		if !src.IsLoopback() || !src.Is4() {
			t.Errorf("route to %s leaves from %v", dst, src)
		}
	}
}

func TestDeviceFor(t *testing.T) {
	t.Setenv(verbs.EnvDevices, "swa=127.45.0.1,swb=127.45.0.2")
	d, ok := DeviceFor(netip.MustParseAddr("127.45.0.2"))
	if !ok || d.Name != "swb" {
		t.Fatalf("DeviceFor = %+v, %v", d, ok)
	}
	if _, ok := DeviceFor(netip.MustParseAddr("127.45.0.3")); ok {
		t.Fatal("a device for an address none has")
	}
}

package testaddr

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"syscall"
	"testing"

	"github.com/goverbs/goverbs/wire"
)

// Open draws again when an address is in use, and every address it offers is a host
// address of the package's block.
func TestOpenRetriesAddressesInUse(t *testing.T) {
	var tried []netip.Addr
	got := Open(t, Verbs, func(a netip.Addr) (netip.Addr, error) {
		tried = append(tried, a)
		if len(tried) < 4 {
			return netip.Addr{}, fmt.Errorf("listen %v: %w", a, syscall.EADDRINUSE)
		}
		return a, nil
	})
	if len(tried) != 4 || got != tried[3] {
		t.Fatalf("Open returned %v after trying %v", got, tried)
	}
	for _, a := range tried {
		b := a.As4()
		if !a.Is4() || b[0] != 127 || b[1] != byte(Verbs) || b[3] == 0 || b[3] == 255 {
			t.Errorf("address %v is not a host of 127.%d.0.0/16", a, Verbs)
		}
	}
}

// A Free address's RoCEv2 port can be bound, and once it is, binding it again fails with
// the error Open draws again on.
func TestFreeIsBindable(t *testing.T) {
	a := Free(t, Engine)
	c, err := net.ListenUDP("udp4", net.UDPAddrFromAddrPort(netip.AddrPortFrom(a, wire.UDPPort)))
	if err != nil {
		t.Fatalf("Free gave %v, but: %v", a, err)
	}
	defer c.Close()
	// With a held, a probe of a fails with EADDRINUSE, which is what Open retries on.
	_, err = net.ListenUDP("udp4", net.UDPAddrFromAddrPort(netip.AddrPortFrom(a, wire.UDPPort)))
	if !errors.Is(err, syscall.EADDRINUSE) {
		t.Fatalf("second bind of %v: %v, want address in use", a, err)
	}
}

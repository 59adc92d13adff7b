package netio_test

import (
	"io"
	"net/netip"
	"testing"

	"github.com/goverbs/goverbs/netio"
	"github.com/goverbs/goverbs/netio/netiotest"
	"github.com/goverbs/goverbs/pcap"
)

// udpPair makes a pair of UDP Conns on loopback addresses a and b (port 0) with opts,
// each wrapped by wrap when it is not nil.
func udpPair(a, b string, opts netio.UDPOptions, wrap func(testing.TB, netio.Conn) netio.Conn) netiotest.MakePair {
	return func(t *testing.T) (netio.Conn, netio.Conn) {
		open := func(addr string) netio.Conn {
			c, err := netio.ListenUDP(netip.MustParseAddrPort(addr), opts)
			if err != nil {
				if netip.MustParseAddrPort(addr).Addr().Is6() {
					t.Skipf("no IPv6 loopback: %v", err)
				}
				t.Fatal(err)
			}
			t.Cleanup(func() { c.Close() })
			if wrap != nil {
				return wrap(t, c)
			}
			return c
		}
		return open(a), open(b)
	}
}

// teePcap records c's traffic to a pcap stream nobody reads.
func teePcap(t testing.TB, c netio.Conn) netio.Conn {
	w, err := pcap.NewWriter(io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	return netio.Tee(c, w)
}

// TestConformance runs the netiotest suite on the UDP backend, over IPv4 and IPv6, in
// both receive modes, without offloads, without ECN, and through a pcap Tee.
func TestConformance(t *testing.T) {
	for _, tc := range []struct {
		name string
		pair netiotest.MakePair
	}{
		{"ipv4", udpPair("127.0.0.2:0", "127.0.0.3:0", netio.UDPOptions{ECN: true}, nil)},
		{"ipv6", udpPair("[::1]:0", "[::1]:0", netio.UDPOptions{ECN: true}, nil)},
		{"busypoll", udpPair("127.0.0.2:0", "127.0.0.3:0", netio.UDPOptions{BusyPoll: true, ECN: true}, nil)},
		{"busypoll-ipv6", udpPair("[::1]:0", "[::1]:0", netio.UDPOptions{BusyPoll: true, ECN: true}, nil)},
		{"no-offloads", udpPair("127.0.0.2:0", "127.0.0.3:0", netio.UDPOptions{DisableGSO: true, DisableGRO: true, ECN: true}, nil)},
		{"no-ecn", udpPair("127.0.0.2:0", "127.0.0.3:0", netio.UDPOptions{}, nil)}, // the ECN subtest skips
		{"tee", udpPair("127.0.0.2:0", "127.0.0.3:0", netio.UDPOptions{ECN: true}, teePcap)},
		{"tee-ipv6", udpPair("[::1]:0", "[::1]:0", netio.UDPOptions{ECN: true}, teePcap)},
		{"tee-busypoll", udpPair("127.0.0.2:0", "127.0.0.3:0", netio.UDPOptions{BusyPoll: true, ECN: true}, teePcap)},
	} {
		t.Run(tc.name, func(t *testing.T) { netiotest.TestConn(t, tc.pair) })
	}
}

package main

import (
	"net"
	"net/netip"
	"testing"
	"time"
)

// TestUDPGSOBW: udp_gso_bw's row counts bytes that arrived, no more than were sent,
// and with --zerocopy every MSG_ZEROCOPY send is accounted for by the kernel's
// notifications, which on loopback say the kernel copied them (it copies whatever it
// delivers to a socket on the same host).
func TestUDPGSOBW(t *testing.T) {
	for _, zerocopy := range []bool{false, true} {
		addr := netip.MustParseAddr("127.0.0.1")
		o := options{size: 4112, dur: 50 * time.Millisecond, zerocopy: zerocopy, bind: addr, port: freeUDPAndTCPPort(t)}
		served := make(chan error, 1)
		go func() { served <- udpGSOCount(o) }()
		c := o
		c.server = addr
		row, err := udpGSOSend(c)
		if err != nil {
			t.Fatal(err)
		}
		if err := <-served; err != nil {
			t.Fatal(err)
		}
		if row["run_bytes"] != 15*4112 || row["bw_avg_mib_s"] <= 0 || row["bw_avg_mib_s"] > row["sent_mib_s"] {
			t.Fatalf("zerocopy %v: %v", zerocopy, row)
		}
		if zerocopy && (row["zerocopy_sends"] == 0 || row["zerocopy_completed"] != row["zerocopy_sends"] ||
			row["zerocopy_copied"] != row["zerocopy_completed"]) {
			t.Fatalf("zero-copy sends not all reported, or reported as not copied on loopback: %v", row)
		}
		if !zerocopy && row["zerocopy_sends"] != 0 {
			t.Fatalf("a plain run reports zero-copy sends: %v", row)
		}
	}
}

// freeUDPAndTCPPort returns a port free for both UDP and TCP on 127.0.0.1 just now.
func freeUDPAndTCPPort(t *testing.T) int {
	for range 20 {
		u, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
		if err != nil {
			t.Fatal(err)
		}
		port := u.LocalAddr().(*net.UDPAddr).Port
		l, err := net.ListenTCP("tcp", &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: port})
		u.Close()
		if err == nil {
			l.Close()
			return port
		}
	}
	t.Fatal("no port free for both UDP and TCP")
	return 0
}

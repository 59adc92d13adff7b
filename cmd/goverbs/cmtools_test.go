package main

import (
	"errors"
	"io"
	"testing"
	"time"

	"github.com/goverbs/goverbs/pcap"
	"github.com/goverbs/goverbs/wire"
)

// runCMPair runs a CM tool's two sides as two processes: the server until ready shows
// in its output, then the client to its end; both must exit 0.
func runCMPair(t *testing.T, ready string, server, client []string) (srv, cli result) {
	t.Helper()
	s := startServer(t, ready, server...)
	cli = runBin(t, 60*time.Second, client...)
	mustSucceed(t, "client", cli)
	srv = s.wait(t)
	mustSucceed(t, "server", srv)
	return srv, cli
}

// eachRoCEPacket calls each for every packet in the capture file, having checked that
// the packet is RoCEv2 (UDP to 4791) that parses and carries a correct ICRC.
func eachRoCEPacket(t *testing.T, file string, each func(p *wire.Packet)) {
	t.Helper()
	r, f, err := pcap.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for {
		_, pkt, err := r.NextIP()
		if errors.Is(err, io.EOF) {
			return
		}
		if err != nil {
			t.Fatal(err)
		}
		ip, udp, err := wire.ParseIPUDP(pkt)
		if err != nil || ip.DstPort != wire.UDPPort {
			t.Fatalf("not RoCEv2: %v", err)
		}
		var p wire.Packet
		if err := p.Parse(udp, 4096); err != nil {
			t.Fatal(err)
		}
		if !wire.CheckICRC(&ip, udp) {
			t.Fatalf("%v: bad ICRC", p.BTH.Opcode())
		}
		each(&p)
	}
}

package main

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/goverbs/goverbs/cm/mad"
	"github.com/goverbs/goverbs/wire"
)

// TestUdaddy runs udaddy's server and client as two processes with two connections:
// each resolves the server's UD QP through SIDR, sends ten datagrams and gets ten
// replies; the client's capture holds the two SIDR exchanges.
func TestUdaddy(t *testing.T) {
	overUDP(t)
	a, b := addrPair(t)
	file := filepath.Join(t.TempDir(), "udaddy.pcap")
	sr, cli := runCMPair(t, "udaddy: starting server", []string{"udaddy", "-b", a, "-c", "2"},
		[]string{"udaddy", "-s", a, "-b", b, "-c", "2", "--pcap", file})
	mustContain(t, "client", cli.stdout, "udaddy: starting client\nudaddy: connecting\ninitiating data transfers\n"+
		"receiving data transfers\ndata transfers complete\ntest complete\nreturn status 0\n")
	mustContain(t, "server", sr.stdout, "receiving data transfers\nsending replies\ndata transfers complete\n"+
		"test complete\nreturn status 0\n")

	count := map[mad.AttrID]int{}
	sends := 0
	eachRoCEPacket(t, file, func(p *wire.Packet) {
		if p.BTH.DestQP() == mad.QPNGSI {
			m, err := mad.ParseCM(p.Payload)
			if err != nil {
				t.Fatal(err)
			}
			count[m.Header().AttrID()]++
		} else if p.BTH.Opcode() == wire.UDSendOnlyImm && p.DETH.QKey() == 0x01234567 {
			sends++
		}
	})
	if count[mad.AttrSIDRReq] != 2 || count[mad.AttrSIDRRep] != 2 || sends != 40 {
		t.Fatalf("MADs %v, %d datagrams", count, sends)
	}
	tsharkShows(t, file, "CM ServiceIDResReq (", "CM ServiceIDResReqResp")
}

// TestUdaddyNoServer: nobody serves the port, and the client says so.
func TestUdaddyNoServer(t *testing.T) {
	a, b := addrPair(t)
	_ = startServer(t, "rdma_listen", "rping", "-s", "-a", a, "-d") // a CM, but no UD listener
	r := runBin(t, 30*time.Second, "udaddy", "-s", a, "-b", b)
	if r.code != 1 || !strings.Contains(r.stderr, "RDMA_CM_EVENT_UNREACHABLE, error: 1") {
		t.Fatalf("exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
}

package main

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/goverbs/goverbs/internal/testaddr"
	"github.com/goverbs/goverbs/wire"
)

// TestMckey runs mckey as three processes on loopback: two receivers of two QPs each
// and a sender, all joined to one group. Every receiver QP gets every one of the
// sender's datagrams (each receiver's device counts 10 multicast packets, one per
// datagram, for its two QPs); the sender's capture holds the 10 datagrams, to the
// group, at QPN 0xFFFFFF with rdma_cm's Q_Key, valid RoCEv2 that tshark dissects.
func TestMckey(t *testing.T) {
	overUDP(t)
	group := testaddr.Group(testaddr.Goverbs).String()
	r1, r2 := addrPair(t)
	snd := testaddr.Free(t, testaddr.Goverbs).String()
	file := filepath.Join(t.TempDir(), "mckey.pcap")
	recv := func(addr string, extra ...string) *server {
		return startServer(t, "mckey: joined dgid", append([]string{"mckey", "-m", group, "-b", addr, "-c", "2",
			"--settle", "0", "--stats"}, extra...)...)
	}
	a, b := recv(r1, "--pcap", file), recv(r2)
	s := runBin(t, 60*time.Second, "mckey", "-m", group, "-b", snd, "-s", "--settle", "0", "--stats")
	mustSucceed(t, "sender", s)
	mustContain(t, "sender", s.stderr, " sent_pkts 10 ")
	mustContain(t, "sender", s.stdout, "mckey: starting client\nmckey: joining\nmckey: joined dgid: ::ffff:"+group+
		" mlid 0x0 sl 0\ninitiating data transfers\ndata transfers complete\ntest complete\nreturn status 0\n")
	for _, srv := range []*server{a, b} {
		r := srv.wait(t)
		mustSucceed(t, "receiver", r)
		mustContain(t, "receiver", r.stdout, "mckey: starting server\nmckey: joining\nmckey: joined dgid: ::ffff:"+group+
			" mlid 0x0 sl 0\nmckey: joined dgid: ::ffff:"+group+" mlid 0x0 sl 0\nreceiving data transfers\n"+
			"data transfers complete\ntest complete\nreturn status 0\n")
		mustContain(t, "receiver", r.stderr, " rcvd_mcast_pkts 10")
	}
	sends := 0
	eachRoCEPacket(t, file, func(p *wire.Packet) {
		if p.BTH.Opcode() == wire.UDSendOnlyImm && p.BTH.DestQP() == 0xFFFFFF && p.DETH.QKey() == 0x01234567 &&
			len(p.Payload) == 100 {
			sends++
		}
	})
	if sends != 10 {
		t.Fatalf("capture holds %d datagrams to the group, want 10", sends)
	}
	tsharkShows(t, file, "Destination Address: "+group, "Destination Queue Pair: 0xffffff")
}

// A sender that joined without loopback (-l) never hears its own datagrams (its device
// would drop them for want of a receive), and one that joined send-only (-o) does not
// join the group at all. (Without either it may hear some before it exits.)
func TestMckeyLoopback(t *testing.T) {
	group := testaddr.Group(testaddr.Goverbs).String()
	for _, tc := range []struct{ flag, not string }{
		{"-l", "no_recv_wqe_drop"},
		{"-o", "rcvd_mcast_pkts"},
	} {
		r := runBin(t, 30*time.Second, "mckey", "-m", group, "-b", testaddr.Free(t, testaddr.Goverbs).String(), "-s",
			"--settle", "0", "--stats", tc.flag)
		mustSucceed(t, "mckey "+tc.flag, r)
		if !strings.Contains(r.stderr, "sent_pkts 10") || strings.Contains(r.stderr, tc.not) {
			t.Errorf("mckey -s %s: stats want sent_pkts 10 and no %s:\n%s", tc.flag, tc.not, r.stderr)
		}
	}
}

// What mckey refuses before it joins anything.
func TestMckeyRefuses(t *testing.T) {
	b := testaddr.Free(t, testaddr.Goverbs).String()
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"mckey", "-b", b}, "a multicast address is required"},
		{[]string{"mckey", "-M", "::ffff:239.1.2.3"}, "requires binding"},
		{[]string{"mckey", "-m", "239.1.2.3", "-b", b, "-p", "0x0002"}, "only 0x111"},
		{[]string{"mckey", "-m", "127.0.0.1", "-b", b}, "failure joining"},
		{[]string{"mckey", "-m", "239.1.2.3", "-b", b, "-S", "5000"}, "larger than active mtu"},
	} {
		r := runBin(t, 30*time.Second, tc.args...)
		if r.code == 0 || !strings.Contains(r.stdout+r.stderr, tc.want) {
			t.Errorf("%s: exit %d\n%s%s", strings.Join(tc.args, " "), r.code, r.stdout, r.stderr)
		}
	}
}

// -M names the group by its MGID, as an IPv6 address: ::ffff:a.b.c.d is the IPv4 group.
func TestMckeyUnmapped(t *testing.T) {
	group := testaddr.Group(testaddr.Goverbs).String()
	r := runBin(t, 30*time.Second, "mckey", "-M", "::ffff:"+group, "-b", testaddr.Free(t, testaddr.Goverbs).String(),
		"-s", "-o", "--settle", "0", "--stats")
	mustSucceed(t, "mckey -M", r)
	mustContain(t, "mckey -M", r.stdout, "mckey: joined dgid: ::ffff:"+group+" mlid 0x0 sl 0\n")
	mustContain(t, "mckey -M", r.stderr, "sent_pkts 10")
}

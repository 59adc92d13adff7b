package verbs

import (
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/goverbs/goverbs/wire"
)

// TestICRCPolicy sends hand-built UD packets from a plain UDP socket, the way a foreign
// RoCEv2 peer would, and checks the receive-side ICRC policy (docs/DESIGN.md): a packet
// whose ICRC was computed for a non-zero IPv4 Identification is accepted by solving for
// it, a corrupt one is dropped and counted, and once the QP's peer is known to send
// Identification 0 only strict matches pass.
func TestICRCPolicy(t *testing.T) {
	b := newHost(t, "127.10.0.3")
	qb := udQP(t, b, 0x1234)
	buf := b.mr(t, 4096, allAccess)
	for i := 0; i < 4; i++ {
		qb.PostRecv(RecvWR{ID: uint64(i), SGL: []SGE{buf.SGE(0, 4096)}})
	}
	conn, err := net.ListenUDP("udp4", net.UDPAddrFromAddrPort(netip.MustParseAddrPort("127.10.0.2:0")))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	srcAP := conn.LocalAddr().(*net.UDPAddr).AddrPort()
	dst := netip.AddrPortFrom(netip.MustParseAddr("127.10.0.3"), wire.UDPPort)
	send := func(id uint16, df, corrupt bool) {
		h := wire.Headers{BTH: wire.BTHFields{Opcode: wire.UDSendOnly, PKey: 0xffff, DestQP: qb.QPN(), PSN: 1},
			DETH: wire.DETHFields{QKey: 0x1234, SrcQP: 0x99}}
		pkt := make([]byte, 256)
		hl := h.Encode(pkt)
		copy(pkt[hl:], "payload!")
		n := wire.Finish(pkt, hl, 8)
		ip := wire.IPHeader{Src: srcAP.Addr(), Dst: dst.Addr(), SrcPort: srcAP.Port(), DstPort: dst.Port(), ID: id, DF: df}
		wire.PutICRC(&ip, pkt, n)
		if corrupt {
			pkt[hl+3] ^= 0x10
		}
		if _, err := conn.WriteToUDPAddrPort(pkt[:n+4], dst); err != nil {
			t.Fatal(err)
		}
	}
	counter := func(name string) uint64 { return b.dev.Counters().Get(name) }
	waitCounter := func(name string, want uint64) {
		deadline := time.Now().Add(5 * time.Second)
		for counter(name) != want {
			if time.Now().After(deadline) {
				t.Fatalf("%s = %d, want %d", name, counter(name), want)
			}
			time.Sleep(time.Millisecond)
		}
	}
	send(4242, false, false) // like Linux rxe: numbered, no DF
	expectStatus(t, b.rcq, 0, WCSuccess)
	waitCounter("icrc_ipid_recovered", 1)
	send(4243, true, true) // corrupt: no Identification explains it
	waitCounter("rcvd_icrc_err", 1)
	send(0, true, false) // a goverbs-style packet: strict
	expectStatus(t, b.rcq, 1, WCSuccess)
	send(4244, false, false) // now only strict matches pass for this QP
	waitCounter("rcvd_icrc_err", 2)
	if n, _ := b.rcq.Poll(make([]WC, 1)); n != 0 {
		t.Fatal("a corrupt or unverifiable packet completed")
	}
}

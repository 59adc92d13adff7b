package engine_test

import (
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/goverbs/goverbs/verbs"
	"github.com/goverbs/goverbs/wire"
)

// TestICRCPolicy sends hand-built UD packets from a plain UDP socket, the way a foreign
// RoCEv2 peer would, and checks the receive-side ICRC policy (docs/DESIGN.md): a packet
// whose ICRC was computed for a non-zero IPv4 Identification is accepted by solving for
// it, a corrupt one is dropped and counted, and once a QP's peer has shown itself a
// goverbs peer only the Identifications goverbs sends pass.
func TestICRCPolicy(t *testing.T) {
	b := newHost(t)
	qb := udQP(t, b, 0x1234)
	buf := b.MR(t, 4096, allAccess)
	for i := 0; i < 8; i++ {
		qb.PostRecv(verbs.RecvWR{ID: uint64(i), SGL: []verbs.SGE{buf.SGE(0, 4096)}})
	}
	qp := qb
	conn, err := net.ListenUDP("udp4", net.UDPAddrFromAddrPort(netip.MustParseAddrPort("127.10.0.2:0")))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	srcAP := conn.LocalAddr().(*net.UDPAddr).AddrPort()
	dst := netip.AddrPortFrom(b.GID.Addr(), wire.UDPPort)
	send := func(id uint16, df, corrupt bool) {
		h := wire.Headers{BTH: wire.BTHFields{Opcode: wire.UDSendOnly, PKey: 0xffff, DestQP: qp.QPN(), PSN: 1},
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
	counter := func(name string) uint64 { return b.Dev.Counters().Get(name) }
	waitCounter := func(name string, want uint64) {
		deadline := time.Now().Add(5 * time.Second)
		for counter(name) != want {
			if time.Now().After(deadline) {
				t.Fatalf("%s = %d, want %d", name, counter(name), want)
			}
			time.Sleep(time.Millisecond)
		}
	}
	// Like Linux rxe: a counter, with DF, passing through 0 (the wrap that once made a
	// QP refuse its peer for good): every one verifies by solving for the number.
	ids := []uint16{65534, 65535, 0, 1, 2, 100, 101}
	for i, id := range ids {
		send(id, true, false)
		expectStatus(t, b.RCQ, uint64(i), verbs.WCSuccess)
	}
	waitCounter("icrc_ipid_recovered", uint64(len(ids)-1)) // ID 0 verifies directly
	send(4243, true, true)                                 // corrupt: no Identification explains it
	waitCounter("rcvd_icrc_err", 1)

	// A second QP whose peer sends only goverbs-style packets becomes strict.
	qc := udQP(t, b, 0x1234)
	qp = qc
	for i := 0; i < 140; i++ {
		qc.PostRecv(verbs.RecvWR{ID: uint64(1000 + i), SGL: []verbs.SGE{buf.SGE(0, 4096)}})
	}
	for i := 0; i < 130; i++ {
		send(0, true, false)
		expectStatus(t, b.RCQ, uint64(1000+i), verbs.WCSuccess)
	}
	send(4244, true, false) // a numbered packet to a strict QP: refused
	waitCounter("rcvd_icrc_err", 2)
	if n, _ := b.RCQ.Poll(make([]verbs.WC, 1)); n != 0 {
		t.Fatal("a corrupt or unverifiable packet completed")
	}
}

//go:build linux

package verbs_test

import (
	"net/netip"
	"testing"
	"time"

	"github.com/goverbs/goverbs/internal/testaddr"
	"github.com/goverbs/goverbs/netio"
	"github.com/goverbs/goverbs/verbs"
	"github.com/goverbs/goverbs/wire"
)

// A path's traffic class (the QP's address vector, a UD request's AH: the GRH's traffic
// class, which rdma_cm's TOS sets) reaches the IP header's DS field of every packet sent
// on it, as Linux rxe and RNICs put it there: read back with IP_RECVTOS by a plain
// socket at the peer's address. Two RC QPs with different classes post multi-packet
// WRITEs at once, so their packets share transmit batches and GSO runs would mix them
// if a run could carry more than one TOS (the kernel writes one for the whole run).
// The ECN bits are congestion control's whatever the class says: Not-ECT with it off;
// with it on, ECT(0) on RC and Not-ECT on UD.
func TestTrafficClassOnTheWire(t *testing.T) {
	for _, cc := range []string{"off", "dcqcn:10g"} {
		t.Run(cc, func(t *testing.T) {
			t.Setenv("GOVERBS_CC", cc)
			testTrafficClassOnTheWire(t, cc != "off")
		})
	}
}

func testTrafficClassOnTheWire(t *testing.T, cc bool) {
	h := newHost(t)
	peer := testaddr.Open(t, testaddr.Verbs, func(a netip.Addr) (netio.Conn, error) {
		return netio.ListenUDP(netip.AddrPortFrom(a, wire.UDPPort), netio.UDPOptions{ECN: true})
	})
	defer peer.Close()
	if !peer.Caps().ECN {
		t.Skip("the kernel reports no TOS of received datagrams")
	}
	pgid := verbs.GIDFromAddr(peer.LocalAddr().Addr())
	// The classes by destination QPN; 0x22's QP is given its class with both ECN bits
	// set, which must not reach the wire.
	want := map[uint32]uint8{0x11: 0xb8, 0x22: 0x28, 0x33: 0x60, 0x44: 0}
	mr := h.MR(t, 1<<16, allAccess)
	var rcs []*verbs.QP
	for _, qpn := range []uint32{0x11, 0x22} {
		qp := h.QP(t, verbs.QPTypeRC)
		tc := want[qpn]
		if qpn == 0x22 {
			tc |= 0b11
		}
		mustModify(t, qp, &verbs.QPAttr{State: verbs.QPStateInit, Port: 1, AccessFlags: allAccess},
			verbs.QPAttrState|verbs.QPAttrPKeyIndex|verbs.QPAttrPort|verbs.QPAttrAccessFlags)
		mustModify(t, qp, &verbs.QPAttr{State: verbs.QPStateRTR, PathMTU: verbs.MTU1024, DestQPN: qpn, RQPSN: 1,
			MaxDestRdAtomic: 1, MinRNRTimer: 1, AH: verbs.AHAttr{DGID: pgid, Port: 1, HopLimit: 64, TrafficClass: tc}},
			verbs.QPAttrState|verbs.QPAttrAV|verbs.QPAttrPathMTU|verbs.QPAttrDestQPN|verbs.QPAttrRQPSN|
				verbs.QPAttrMaxDestRdAtomic|verbs.QPAttrMinRNRTimer)
		mustModify(t, qp, &verbs.QPAttr{State: verbs.QPStateRTS, SQPSN: 1, Timeout: 14, RetryCnt: 7, RNRRetry: 7, MaxRdAtomic: 1},
			verbs.QPAttrState|verbs.QPAttrSQPSN|verbs.QPAttrTimeout|verbs.QPAttrRetryCnt|verbs.QPAttrRNRRetry|verbs.QPAttrMaxQPRdAtomic)
		rcs = append(rcs, qp)
	}
	ud := udQP(t, h, 0x11111111)
	for i, qpn := range []uint32{0x33, 0x44} {
		ah, err := h.PD.CreateAH(verbs.AHAttr{DGID: pgid, Port: 1, HopLimit: 64, TrafficClass: want[qpn]})
		if err != nil {
			t.Fatal(err)
		}
		defer ah.Close()
		if err := ud.PostSend(verbs.SendWR{ID: uint64(i), Opcode: verbs.WRSend, SGL: []verbs.SGE{mr.SGE(0, 64)},
			AH: ah, RemoteQPN: qpn, RemoteQKey: 0x11111111}); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 2 {
		for _, qp := range rcs {
			if err := qp.PostSend(verbs.SendWR{ID: uint64(i), Opcode: verbs.WRRDMAWrite,
				SGL: []verbs.SGE{mr.SGE(i*8192, 8192)}, RemoteAddr: 0x1000, RKey: 1}); err != nil {
				t.Fatal(err)
			}
		}
	}
	type got struct {
		qpn uint32
		tc  uint8
		ecn netio.ECN
	}
	pkts := make(chan got, 1024)
	go func() {
		msgs := make([]netio.Message, 8)
		for i := range msgs {
			msgs[i].Buf = make([]byte, max(peer.Caps().GROBufSize, 8192))
		}
		for {
			n, err := peer.ReadBatch(msgs)
			if err != nil {
				return // closed
			}
			for _, m := range msgs[:n] {
				m.Segments(func(_ int, seg []byte) bool {
					select {
					case pkts <- got{wire.BTH(seg).DestQP(), m.TrafficClass, m.ECN}:
					default:
					}
					return true
				})
			}
		}
	}()
	seen := map[uint32]int{}
	timeout := time.After(5 * time.Second)
	for seen[0x11] < 16 || seen[0x22] < 16 || seen[0x33] < 1 || seen[0x44] < 1 {
		select {
		case p := <-pkts:
			w, ok := want[p.qpn]
			if !ok {
				t.Fatalf("a packet for QPN %#x", p.qpn)
			}
			wecn := netio.ECNNotECT
			if cc && p.qpn < 0x33 {
				wecn = netio.ECNECT0
			}
			if p.tc != w || p.ecn != wecn {
				t.Fatalf("QPN %#x: traffic class %#x, %v on the wire; want %#x, %v", p.qpn, p.tc, p.ecn, w, wecn)
			}
			seen[p.qpn]++
		case <-timeout:
			t.Fatalf("packets seen by QPN: %v", seen)
		}
	}
}

func mustModify(t *testing.T, qp *verbs.QP, attr *verbs.QPAttr, mask verbs.QPAttrMask) {
	t.Helper()
	if err := qp.Modify(attr, mask); err != nil {
		t.Fatal(err)
	}
}

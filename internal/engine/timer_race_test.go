package engine

import (
	"net/netip"
	"testing"
	"time"

	"github.com/goverbs/goverbs/netio"
	"github.com/goverbs/goverbs/netio/netiotest"
	"github.com/goverbs/goverbs/verbs/driver"
	"github.com/goverbs/goverbs/wire"
)

// TestResetRacesRNRTimer: moving a QP to RESET while its RNR timer fires. completer.reset
// rewrote the whole completer (`*c = completer{qp: qp, retrans: c.retrans, rnr: c.rnr}`,
// which also zeroed the timers' own mutex, since removed) under qp.mu, while the timer's
// goroutine read c.qp in onRNRTimer (and onRetransmitTimer) before it took qp.mu: a data
// race, and a mutex overwritten while another goroutine may be about to use it. Only
// -race sees it.
func TestResetRacesRNRTimer(t *testing.T) {
	conn := netiotest.NewConn(netip.MustParseAddrPort("127.0.200.11:4791"))
	dev, pd, _, qp := rcOnConn(t, "race", conn, wire.MTU1024, 1024,
		driver.QPCap{MaxSendWR: 4, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1})
	defer dev.Close()
	peer := fuzzPeer
	src, _ := pd.regMR(make([]byte, 64), driver.AccessLocalWrite)
	for i := 0; i < 300; i++ {
		must(t, qp.Modify(&driver.QPAttr{State: driver.QPStateReset}, driver.QPAttrState))
		rcUp(t, qp, peer.Addr(), fuzzPeerQPN, 0, 0x100)
		must(t, qp.PostSend([]driver.SendWR{{ID: 1, Opcode: driver.WRSend, SGL: []driver.SGE{{Addr: src.Addr(), Length: 8, LKey: src.LKey()}}}}))
		// RNR NAK with timer 1 (0.01 ms): the timer fires almost at once.
		h := wire.Headers{BTH: wire.BTHFields{Opcode: wire.RCAck, PKey: 0xffff, DestQP: qp.QPN(), PSN: 0x100},
			AETH: wire.AETHFields{Syndrome: wire.RNRNAKSyndrome(1)}}
		b := make([]byte, 64)
		n := h.Encode(b)
		ip := wire.IPHeader{Src: peer.Addr(), Dst: conn.LocalAddr().Addr(), SrcPort: peer.Port(), DstPort: conn.LocalAddr().Port(), DF: true}
		wire.PutICRC(&ip, b, n)
		conn.Deliver([]netio.Message{{Buf: b[:n+4], N: n + 4, Addr: peer}}, 1)
		time.Sleep(time.Duration(i%20) * time.Microsecond)
	}
}

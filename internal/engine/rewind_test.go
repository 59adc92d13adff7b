package engine

import (
	"testing"
	"time"

	"github.com/goverbs/goverbs/netio"
	"github.com/goverbs/goverbs/netio/netiotest"
	"github.com/goverbs/goverbs/verbs/driver"
	"github.com/goverbs/goverbs/wire"
)

// TestNewMessageAfterAckedRewindTakesFreshPSNs: an RNR NAK makes the requester go back to
// its PSN, and before it resends, an ACK arrives for everything it had sent (the
// responder executed the first copies after all: the ACK and the NAK crossed). The next
// message must take the PSNs after all those sent, not the PSN the rewind went back to:
// the responder would take it for a duplicate, acknowledge it and never deliver it.
// Seen as lost SENDs in send_bw on a loaded machine (the requester completed messages
// its peer never received).
func TestNewMessageAfterAckedRewindTakesFreshPSNs(t *testing.T) {
	conn := netiotest.NewConn(fuzzLocal)
	conn.KeepWritten()
	dev, pd, cq, qp := rcOnConn(t, "rewind", conn, wire.MTU1024, 64,
		driver.QPCap{MaxSendWR: 16, MaxRecvWR: 16, MaxSendSGE: 1, MaxRecvSGE: 1, MaxInline: 64})
	defer dev.Close()
	rcUp(t, qp, fuzzPeer.Addr(), fuzzPeerQPN, 0, fuzzSQPSN)
	mr, err := pd.regMR([]byte("12345678"), driver.AccessLocalWrite)
	if err != nil {
		t.Fatal(err)
	}
	send := func(id uint64) {
		t.Helper()
		must(t, qp.PostSend([]driver.SendWR{{ID: id, Opcode: driver.WRSend, Flags: driver.SendSignaled,
			SGL: []driver.SGE{{Addr: mr.Addr(), Length: 8, LKey: mr.LKey()}}}}))
	}
	var sent [][]byte // everything the device sent
	waitSent := func(n int) [][]byte {
		t.Helper()
		for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Microsecond) {
			if sent = append(sent, conn.TakeWritten()...); len(sent) >= n {
				return sent
			}
		}
		t.Fatalf("the device did not send %d packets", n)
		return nil
	}
	for id := range uint64(4) { // PSNs 0x100..0x103
		send(id)
		waitSent(int(id) + 1)
	}
	respond := func(syn wire.Syndrome, psn wire.PSN) { deliverAck(conn, qp.QPN(), syn, psn) }
	respond(wire.RNRNAKSyndrome(20), fuzzSQPSN)                 // go back to 0x100 in 10.24 ms
	respond(wire.ACKSyndrome(wire.CreditsInvalid), fuzzSQPSN+3) // but all four arrived
	wcs := make([]driver.WC, 8)
	for done, deadline := 0, time.Now().Add(5*time.Second); done < 4; {
		if time.Now().After(deadline) {
			t.Fatalf("%d of 4 sends completed", done)
		}
		k, _ := cq.Poll(wcs)
		for _, wc := range wcs[:k] {
			if wc.ID != uint64(done) || wc.Status != driver.WCSuccess {
				t.Fatalf("completion %+v, want send %d done", wc, done)
			}
			done++
		}
	}
	send(4)
	last := waitSent(5)
	var p wire.Packet
	if err := p.Parse(last[len(last)-1], 0); err != nil {
		t.Fatal(err)
	}
	if got, want := p.BTH.PSN(), wire.PSN(fuzzSQPSN+4); p.Op.Flags.Has(wire.OpSend) && got != want {
		t.Fatalf("the fifth SEND left with PSN %#x, want %#x: PSNs the responder already executed", uint32(got), uint32(want))
	} else if !p.Op.Flags.Has(wire.OpSend) {
		t.Fatalf("the last packet sent is %v, want the fifth SEND", p.Op)
	}
}

// deliverAck hands the device an ACK or NAK from fuzzPeer for the QP destQP, as a
// responder would send it, and returns when the device has processed it.
func deliverAck(conn *netiotest.Conn, destQP uint32, syn wire.Syndrome, psn wire.PSN) {
	h := wire.Headers{BTH: wire.BTHFields{Opcode: wire.RCAck, PKey: 0xffff, DestQP: destQP, PSN: psn},
		AETH: wire.AETHFields{Syndrome: syn}}
	b := make([]byte, h.Len()+wire.ICRCLen)
	n := wire.Finish(b, h.Encode(b), 0)
	ip := wire.IPHeader{Src: fuzzPeer.Addr(), Dst: fuzzLocal.Addr(), SrcPort: fuzzPeer.Port(), DstPort: fuzzLocal.Port(), DF: true}
	wire.PutICRC(&ip, b, n)
	conn.Deliver([]netio.Message{{Buf: b, N: len(b), Addr: fuzzPeer}}, 1)
}

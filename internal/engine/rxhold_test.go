package engine

import (
	"testing"
	"time"

	"github.com/goverbs/goverbs/netio"
	"github.com/goverbs/goverbs/netio/netiotest"
	"github.com/goverbs/goverbs/verbs/driver"
	"github.com/goverbs/goverbs/wire"
)

// TestRunPinDroppedBeforeInvalidate: within a GRO run the receive path keeps the QP's
// lock and a WRITE's region pin from one packet to the next (releaseRx). A packet of
// the run that does not continue the WRITE must drop the pin before it is handled: here
// the run's last segment is the READ response that completes a READ, behind which a
// fenced LOCAL_INV of the very window the WRITE is pinned in was waiting; the LOCAL_INV
// runs in the receive path's own goroutine and waits for the window's pins. Kept, the
// pin would never be released (the receive path would wait for itself).
func TestRunPinDroppedBeforeInvalidate(t *testing.T) {
	conn := netiotest.NewConn(fuzzLocal)
	conn.KeepWritten()
	dev, pd, cq, qp := rcOnConn(t, "rxhold", conn, wire.MTU1024, 64,
		driver.QPCap{MaxSendWR: 16, MaxRecvWR: 16, MaxSendSGE: 1, MaxRecvSGE: 1, MaxInline: 64})
	defer dev.Close()
	rcUp(t, qp, fuzzPeer.Addr(), fuzzPeerQPN, 0, fuzzSQPSN)
	mem := make([]byte, 4096)
	mr, err := pd.regMR(mem, driver.AccessLocalWrite|driver.AccessRemoteWrite|driver.AccessMWBind)
	if err != nil {
		t.Fatal(err)
	}
	mw, err := pd.allocMW(2)
	if err != nil {
		t.Fatal(err)
	}
	rkey := driver.IncRKey(mw.RKey())
	local := make([]byte, 64)
	lmr, err := pd.regMR(local, driver.AccessLocalWrite)
	if err != nil {
		t.Fatal(err)
	}
	wrs := []driver.SendWR{
		{ID: 1, Opcode: driver.WRBindMW, Flags: driver.SendSignaled, Bind: &driver.MWBindWR{MW: mw, RKey: rkey,
			MWBind: driver.MWBind{MR: mr, Addr: mr.Addr(), Length: uint64(len(mem)), Access: driver.AccessRemoteWrite}}},
		{ID: 2, Opcode: driver.WRRDMARead, Flags: driver.SendSignaled, SGL: []driver.SGE{{Addr: lmr.Addr(), Length: 8, LKey: lmr.LKey()}},
			RemoteAddr: 0x1000, RKey: 0x77},
		{ID: 3, Opcode: driver.WRLocalInv, Flags: driver.SendSignaled | driver.SendFence, Imm: rkey},
	}
	if err := qp.PostSend(wrs); err != nil {
		t.Fatal(err)
	}
	// One GRO run from the peer: a WRITE FIRST of 2 KiB into the window (PSN 0: its
	// region is pinned and, the run going on, stays pinned), then the READ's response
	// (PSN fuzzSQPSN), shorter, as a run's last segment may be.
	const first = 12 + 16 + 1024 + 4
	buf := make([]byte, first+12+4+8+4)
	h := wire.Headers{BTH: wire.BTHFields{Opcode: wire.RCWriteFirst, PKey: 0xffff, DestQP: qp.QPN(), PSN: 0},
		RETH: wire.RETHFields{VA: mr.Addr(), RKey: rkey, DMALen: 2048}}
	hl := h.Encode(buf)
	n := wire.Finish(buf, hl, 1024)
	ip := wire.IPHeader{Src: fuzzPeer.Addr(), Dst: fuzzLocal.Addr(), SrcPort: fuzzPeer.Port(), DstPort: fuzzLocal.Port(), DF: true}
	wire.PutICRC(&ip, buf, n)
	resp := buf[first:]
	h = wire.Headers{BTH: wire.BTHFields{Opcode: wire.RCReadResponseOnly, PKey: 0xffff, DestQP: qp.QPN(), PSN: fuzzSQPSN},
		AETH: wire.AETHFields{Syndrome: wire.ACKSyndrome(wire.CreditsInvalid), MSN: 1}}
	hl = h.Encode(resp)
	n = wire.Finish(resp, hl, 8)
	ip.ID = 1
	wire.PutICRC(&ip, resp, n)

	// Delivered and polled in a goroutine of its own: either may wait for the receive path.
	done := make(chan map[uint64]driver.WCStatus, 1)
	go func() {
		conn.Deliver([]netio.Message{{Buf: buf, N: len(buf), SegSize: first, Addr: fuzzPeer}}, 1)
		got := map[uint64]driver.WCStatus{}
		wcs := make([]driver.WC, 8)
		for len(got) < 3 {
			k, _ := cq.Poll(wcs)
			for _, wc := range wcs[:k] {
				got[wc.ID] = wc.Status
			}
			time.Sleep(100 * time.Microsecond)
		}
		done <- got
	}()
	var got map[uint64]driver.WCStatus
	select {
	case got = <-done:
	case <-time.After(5 * time.Second):
		// The receive goroutine is stuck for good: leave the device unclosed.
		t.Fatal("no completions for the bind, the READ and the LOCAL_INV in 5 s: the receive path waits for its own pin")
	}
	for id, st := range got {
		if st != driver.WCSuccess {
			t.Errorf("WR %d: %v", id, st)
		}
	}
}

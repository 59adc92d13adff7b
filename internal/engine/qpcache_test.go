package engine

import (
	"testing"
	"time"

	"github.com/goverbs/goverbs/verbs/driver"
)

// TestQPNReusedAfterDestroy: the receive path remembers the QP its last packet was for.
// When that QP is destroyed and its number is given to a new QP, packets for the number
// reach the new QP, not the destroyed one.
func TestQPNReusedAfterDestroy(t *testing.T) {
	devA, devB := openUDPDevice(t), openUDPDevice(t)
	addrA, addrB := devA.LocalAddr().Addr(), devB.LocalAddr().Addr()
	pdA, _ := devA.allocPD()
	pdB, _ := devB.allocPD()
	cqA, _ := devA.newCQ(64)
	cqB, _ := devB.newCQ(64)
	qpCap := driver.QPCap{MaxSendWR: 8, MaxRecvWR: 8, MaxSendSGE: 1, MaxRecvSGE: 1, MaxInline: 64}
	mkQP := func(d *Device, pd *PD, cq *CQ) *QP {
		qp, err := d.CreateQP(pd, QPInit{Type: driver.QPTypeRC, SendCQ: cq, RecvCQ: cq, Cap: qpCap})
		if err != nil {
			t.Fatal(err)
		}
		return qp
	}
	src, err := pdA.regMR(make([]byte, 8), driver.AccessLocalWrite)
	if err != nil {
		t.Fatal(err)
	}
	dst, err := pdB.regMR(make([]byte, 64), driver.AccessLocalWrite)
	if err != nil {
		t.Fatal(err)
	}
	// exchange sends one SEND from a fresh QP on A to qb and waits for both completions.
	exchange := func(qb *QP, id uint64) {
		t.Helper()
		qa := mkQP(devA, pdA, cqA)
		rcUp(t, qa, addrB, qb.QPN(), 0, 0)
		rcUp(t, qb, addrA, qa.QPN(), 0, 0)
		must(t, qb.PostRecv([]driver.RecvWR{{ID: id, SGL: []driver.SGE{{Addr: dst.Addr(), Length: 64, LKey: dst.LKey()}}}}))
		must(t, qa.PostSend([]driver.SendWR{{ID: id, Opcode: driver.WRSend, Flags: driver.SendSignaled,
			SGL: []driver.SGE{{Addr: src.Addr(), Length: 8, LKey: src.LKey()}}}}))
		waitFor(t, cqA, id, 5*time.Second)
		waitFor(t, cqB, id, 5*time.Second)
	}
	old := mkQP(devB, pdB, cqB)
	exchange(old, 1) // the receive path now remembers old
	qpn := old.QPN()
	if err := old.Close(); err != nil {
		t.Fatal(err)
	}
	devB.qpMu.Lock()
	devB.nextQPN = qpn // the number comes round again
	devB.qpMu.Unlock()
	reborn := mkQP(devB, pdB, cqB)
	if reborn.QPN() != qpn {
		t.Fatalf("new QP got QPN %#x, want %#x again", reborn.QPN(), qpn)
	}
	exchange(reborn, 2)
}

//go:build linux

package attach_test

import (
	"testing"

	"github.com/goverbs/goverbs/internal/attach/attachtest"
	"github.com/goverbs/goverbs/verbs/attach"
	"github.com/goverbs/goverbs/verbs/driver"
	"github.com/goverbs/goverbs/verbs/soft"
)

// TestReceiveTakenWhenPostReturns: on a UD or UC QP, the daemon has taken a receive into
// its engine by the time PostRecv returns (its ring has nothing pending), since a message
// that finds no receive there is dropped; on an RC QP the post does not wait (an early
// message draws an RNR NAK and comes again). Before the wait, a send that overtook the
// receive was lost (seen with pyverbs' UD tests on the C client).
func TestReceiveTakenWhenPostReturns(t *testing.T) {
	_, addr := attachtest.Daemon(t)
	d, err := attach.Open(soft.Config{Name: "sw0", Addr: addr, Attach: true})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	pd, err := d.AllocPD()
	if err != nil {
		t.Fatal(err)
	}
	cq, err := d.CreateCQ(64, nil)
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 1<<16)
	mr, err := pd.RegMR(buf, driver.AccessLocalWrite)
	if err != nil {
		t.Fatal(err)
	}
	for _, typ := range []driver.QPType{driver.QPTypeUD, driver.QPTypeUC} {
		dq, err := pd.CreateQP(&driver.QPInit{Type: typ, SendCQ: cq, RecvCQ: cq,
			Cap: driver.QPCap{MaxSendWR: 4, MaxRecvWR: 64, MaxSendSGE: 1, MaxRecvSGE: 1}})
		if err != nil {
			t.Fatal(err)
		}
		q := dq
		init, mask := &driver.QPAttr{State: driver.QPStateInit, Port: 1}, driver.QPAttrState|driver.QPAttrPKeyIndex|driver.QPAttrPort
		if typ == driver.QPTypeUD {
			init.QKey, mask = 0x1111, mask|driver.QPAttrQKey
		} else {
			mask |= driver.QPAttrAccessFlags
		}
		if err := q.Modify(init, mask); err != nil {
			t.Fatal(err)
		}
		for i := range 50 {
			sge := driver.SGE{Addr: mr.Addr(), Length: 4096, LKey: mr.LKey()}
			if err := q.PostRecv([]driver.RecvWR{{ID: uint64(i), SGL: []driver.SGE{sge}}}); err != nil {
				t.Fatal(err)
			}
			if n := attach.RecvPending(q); n != 0 {
				t.Fatalf("%v: %d receives still in the ring after PostRecv returned (post %d)", typ, n, i)
			}
		}
		q.Close()
	}
}

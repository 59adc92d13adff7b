package engine

import (
	"sync"
	"testing"
	"time"

	"github.com/goverbs/goverbs/netio"
	"github.com/goverbs/goverbs/netio/netiotest"
	"github.com/goverbs/goverbs/verbs/driver"
	"github.com/goverbs/goverbs/wire"
)

// splitConn is a netiotest.Conn that reports Caps.SplitAcks and counts its writes.
type splitConn struct {
	*netiotest.Conn
	mu     sync.Mutex
	writes []int // datagrams per WriteBatch call
}

func (c *splitConn) Caps() netio.Caps {
	caps := c.Conn.Caps()
	caps.SplitAcks = true
	return caps
}

func (c *splitConn) WriteBatch(msgs []netio.Message) (int, error) {
	c.mu.Lock()
	c.writes = append(c.writes, len(msgs))
	c.mu.Unlock()
	return c.Conn.WriteBatch(msgs)
}

func (c *splitConn) takeWrites() []int {
	c.mu.Lock()
	defer c.mu.Unlock()
	w := c.writes
	c.writes = nil
	return w
}

// TestSplitAcks: on a Conn with Caps.SplitAcks a busy poller's reply leaves in a send
// of its own, and the ACK it owes follows at once in another, the reply first (on a
// Conn without it both leave in one send: TestBusyAckWaitsForTheReply).
func TestSplitAcks(t *testing.T) {
	conn := &splitConn{Conn: netiotest.NewConn(fuzzLocal)}
	conn.KeepWritten()
	dev, err := New(Config{Name: "splitacks", Conn: conn, MTU: wire.MTU1024, BusyPoll: true})
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Close()
	pd, _ := dev.allocPD()
	scq, _ := dev.newCQ(64)
	rcq, _ := dev.newCQ(64)
	qp, err := dev.CreateQP(pd, QPInit{Type: driver.QPTypeRC, SendCQ: scq, RecvCQ: rcq,
		Cap: driver.QPCap{MaxSendWR: 16, MaxRecvWR: 16, MaxSendSGE: 1, MaxRecvSGE: 1}})
	if err != nil {
		t.Fatal(err)
	}
	rcUp(t, qp, fuzzPeer.Addr(), fuzzPeerQPN, 0, fuzzSQPSN)
	mem := make([]byte, 64)
	mr, err := pd.regMR(mem, driver.AccessLocalWrite)
	if err != nil {
		t.Fatal(err)
	}
	sge := []driver.SGE{{Addr: mr.Addr(), Length: 8, LKey: mr.LKey()}}
	must(t, qp.PostRecv([]driver.RecvWR{{ID: 1, SGL: sge}}))
	wcs := make([]driver.WC, 4)
	// Poll for a while first: the background goroutine, seeing polls, stays away (it
	// would answer the request's ACK at once, alone).
	for warm := time.Now(); time.Since(warm) < 3*busyIdle; {
		_, err := scq.Poll(wcs)
		must(t, err)
	}
	conn.Inject(sendOnly(qp.QPN(), 0))
	if n, err := rcq.Poll(wcs); err != nil || n != 1 {
		t.Skipf("the poll found no request (%d, %v): the receive path was busy", n, err)
	}
	conn.takeWrites()
	if w := conn.TakeWritten(); len(w) != 0 {
		t.Skip("the ACK left before the reply: the test goroutine stalled")
	}
	for wait := time.Now(); time.Since(wait) < 2*streamGap; {
	}
	must(t, qp.PostSend([]driver.SendWR{{ID: 9, Opcode: driver.WRSend, SGL: sge}}))
	w, writes := conn.TakeWritten(), conn.takeWrites()
	if len(w) != 2 || opcode(t, w[0]) != wire.RCSendOnly || opcode(t, w[1]) != wire.RCAck {
		t.Fatalf("%d datagrams after the reply's post, want the reply and the ACK", len(w))
	}
	if len(writes) != 2 || writes[0] != 1 || writes[1] != 1 {
		t.Errorf("WriteBatch calls of %v datagrams, want [1 1]", writes)
	}
}

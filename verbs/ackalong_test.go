package verbs_test

import (
	"net/netip"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/goverbs/goverbs/netio"
	"github.com/goverbs/goverbs/netio/netiotest"
	"github.com/goverbs/goverbs/verbs"
	"github.com/goverbs/goverbs/wire"
)

// TestChannelWaiterReplyCarriesAck: on a default-mode device, a program blocked on a
// completion channel that answers each request at once sends the ACK its device owes for
// the request in the same batch as its reply, after it (the receive goroutine lets the
// woken waiter run before sending the batch's ACKs). The requester then gets one
// wake-up per turn, not an ACK and a moment later the reply. One P makes the hand-off's
// order deterministic: the waiter is next in line on the receive goroutine's P.
func TestChannelWaiterReplyCarriesAck(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	ea, ec := netip.MustParseAddrPort("127.10.0.2:4791"), netip.MustParseAddrPort("127.10.0.3:4791")
	ca, cc := netiotest.Pipe(ea, ec)
	a := newHostCfg(t, verbs.SoftConfig{Addr: ea.Addr(), Conn: ca})
	bc := &batchConn{Conn: cc}
	c := newHostCfg(t, verbs.SoftConfig{Addr: ec.Addr(), Conn: bc})
	wc := newCQWaiter(t, c.Dev, 64)
	pp := newPingPong(t, a, c, a.RCQ, wc.cq)
	pp.ping.Flags |= verbs.SendSignaled

	cc.OnWrite(func(_ netip.AddrPort, d []byte) { bc.record(wire.Opcode(d[0])) })
	const rounds = 50
	done := make(chan struct{})
	go func() { // the far side answers every ping, blocked on its channel in between
		defer close(done)
		for n := 0; n < rounds; {
			for range wc.poll(t) {
				pp.qc.PostRecv(pp.recvC)
				if err := pp.qc.PostSend(pp.pong); err != nil {
					t.Error(err)
					return
				}
				n++
			}
		}
	}()
	for i := 0; i < rounds; i++ {
		if err := pp.qa.PostSend(pp.ping); err != nil {
			t.Fatal(err)
		}
		waitWC(t, a.RCQ, 1, 5*time.Second)
		pp.qa.PostRecv(pp.recvA)
		waitWC(t, a.CQ, 1, 5*time.Second) // the ping's send completion: its ACK came
	}
	<-done

	bc.mu.Lock()
	defer bc.mu.Unlock()
	// Each ping asks for an ACK and gets one (a ping is acknowledged before the next
	// leaves). An ACK in a send call with no reply in it left alone.
	alone, replies := 0, 0
	for _, b := range bc.batches {
		ack, send := false, false
		for _, op := range b {
			switch op {
			case wire.RCSendOnly:
				send = true
				replies++
			case wire.RCAck:
				ack = true
			}
		}
		if ack && !send {
			alone++
		}
	}
	if replies != rounds {
		t.Fatalf("c sent %d replies, want %d: %v", replies, rounds, bc.batches)
	}
	if alone > rounds/10 {
		t.Errorf("in %d of %d rounds the ACK left alone instead of with the reply: %v", alone, rounds, bc.batches)
	}
}

// batchConn records what each WriteBatch call (a sendmmsg, on the UDP backend) sent.
type batchConn struct {
	*netiotest.Conn
	mu      sync.Mutex
	batches [][]wire.Opcode
}

func (c *batchConn) WriteBatch(msgs []netio.Message) (int, error) {
	c.mu.Lock()
	c.batches = append(c.batches, nil)
	c.mu.Unlock()
	return c.Conn.WriteBatch(msgs)
}

// record is the OnWrite hook: WriteBatch calls it for each datagram it sends.
func (c *batchConn) record(op wire.Opcode) {
	c.mu.Lock()
	if n := len(c.batches); n > 0 {
		c.batches[n-1] = append(c.batches[n-1], op)
	}
	c.mu.Unlock()
}

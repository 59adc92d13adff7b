package verbs

import (
	"net/netip"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/goverbs/goverbs/netio/netiotest"
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
	a := newHostCfg(t, SoftConfig{Addr: ea.Addr(), Conn: ca})
	c := newHostCfg(t, SoftConfig{Addr: ec.Addr(), Conn: cc})
	wc := newCQWaiter(t, c.dev, 64)
	pp := newPingPong(t, a, c, a.rcq, wc.cq)
	pp.ping.Flags |= SendSignaled

	var mu sync.Mutex
	var ops []wire.Opcode // what c sends, in order
	cc.OnWrite(func(_ netip.AddrPort, d []byte) {
		mu.Lock()
		ops = append(ops, wire.Opcode(d[0]))
		mu.Unlock()
	})
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
		waitWC(t, a.rcq, 1, 5*time.Second)
		pp.qa.PostRecv(pp.recvA)
		waitWC(t, a.cq, 1, 5*time.Second) // the ping's send completion: its ACK came
	}
	<-done

	mu.Lock()
	defer mu.Unlock()
	// Each ping asks for an ACK and gets one (a ping is acknowledged before the next
	// leaves): the k-th ACK is the k-th round's.
	ackFirst, replies, acks := 0, 0, 0
	for _, op := range ops {
		switch op {
		case wire.RCSendOnly:
			replies++
		case wire.RCAck:
			acks++
			if acks > replies {
				ackFirst++ // this round's ACK left alone, before the reply
			}
		}
	}
	if replies != rounds {
		t.Fatalf("c sent %d replies, want %d: %v", replies, rounds, ops)
	}
	if ackFirst > rounds/10 {
		t.Errorf("in %d of %d rounds the ACK left before the reply instead of with it: %v", ackFirst, rounds, ops)
	}
}

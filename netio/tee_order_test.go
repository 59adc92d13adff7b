package netio

import (
	"net/netip"
	"sync"
	"testing"
	"time"
)

// echoConn is a Conn whose peer answers every datagram at once: the reply is readable
// before WriteBatch returns, as on loopback where the peer's ACK can come back while the
// sender is still leaving the send syscall.
type echoConn struct {
	replies  chan []byte
	recorded chan struct{} // a read was recorded (signalled by orderRecorder)
}

var (
	echoLocal = netip.MustParseAddrPort("127.0.0.2:4791")
	echoPeer  = netip.MustParseAddrPort("127.0.0.3:4791")
)

func (c *echoConn) ReadBatch(msgs []Message) (int, error) {
	b := <-c.replies
	msgs[0].N = copy(msgs[0].Buf, b)
	msgs[0].Addr, msgs[0].SegSize = echoPeer, 0
	return 1, nil
}

func (c *echoConn) WriteBatch(msgs []Message) (int, error) {
	for i := range msgs {
		c.replies <- []byte("ack of " + string(msgs[i].Buf[:msgs[i].N]))
	}
	// Give the receive loop every chance to record the reply before this returns.
	select {
	case <-c.recorded:
	case <-time.After(50 * time.Millisecond):
	}
	return len(msgs), nil
}

func (c *echoConn) LocalAddr() netip.AddrPort  { return echoLocal }
func (c *echoConn) SourceAddr() netip.AddrPort { return echoLocal }
func (c *echoConn) Caps() Caps                 { return Caps{BatchSize: 1} }
func (c *echoConn) Close() error               { return nil }

type orderRecorder struct {
	mu   sync.Mutex
	got  []string
	read chan struct{}
}

func (r *orderRecorder) Record(_ time.Time, src, _ netip.AddrPort, _ uint16, b []byte) error {
	r.mu.Lock()
	r.got = append(r.got, string(b))
	r.mu.Unlock()
	if src == echoPeer {
		select {
		case r.read <- struct{}{}:
		default:
		}
	}
	return nil
}

// TestTeeRecordsInWireOrder: a reply read while its request's send is still returning is
// recorded after the request (an ACK before its request misled capture readers). The
// order of datagrams that do not answer each other may differ from the wire's by as
// much as two goroutines racing for a lock; a reply never precedes its request.
func TestTeeRecordsInWireOrder(t *testing.T) {
	rec := &orderRecorder{read: make(chan struct{}, 1)}
	c := &echoConn{replies: make(chan []byte, 16), recorded: rec.read}
	tc := Tee(c, rec)
	done := make(chan struct{})
	go func() { // the receive loop
		defer close(done)
		msgs := []Message{{Buf: make([]byte, 64)}}
		for i := 0; i < 3; i++ {
			if _, err := tc.ReadBatch(msgs); err != nil {
				t.Error(err)
				return
			}
		}
	}()
	for _, req := range []string{"req 1", "req 2", "req 3"} {
		if _, err := tc.WriteBatch([]Message{{Buf: []byte(req), N: len(req), Addr: echoPeer}}); err != nil {
			t.Fatal(err)
		}
	}
	<-done
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if len(rec.got) != 6 {
		t.Fatalf("recorded %q, want 3 requests and 3 replies", rec.got)
	}
	at := map[string]int{}
	for i, r := range rec.got {
		at[r] = i
	}
	for _, req := range []string{"req 1", "req 2", "req 3"} {
		if at["ack of "+req] < at[req] {
			t.Errorf("the reply to %q is recorded before it: %q", req, rec.got)
		}
	}
}

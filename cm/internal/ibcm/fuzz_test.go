package ibcm

import (
	"bytes"
	"testing"
	"time"

	"github.com/goverbs/goverbs/cm/mad"
)

// FuzzAgentInput feeds hostile MADs, from the peer's address and from a stranger's, to
// an agent that listens and holds connections in several states. Nothing panics, the
// agent's state stays bounded by its backlog, and every connection it still holds has
// a state and, unless it waits for the consumer, a timer.
func FuzzAgentInput(f *testing.F) {
	// Seeds: every message of a real handshake, disconnection and SIDR exchange.
	n := newNet(f)
	var seeds [][]byte
	n.deliver = func(p packet) int {
		seeds = append(seeds, bytes.Clone(p.out.MAD[:]))
		return 1
	}
	n.B().a.Listen(svc, 4)
	n.B().a.Listen(udSvc, 4)
	{
		A, B := n.A(), n.B()
		ca, _ := A.a.Connect(n.now, addrB, req(32, []byte("x")))
		n.flush()
		for _, e := range B.events {
			if e.Kind == EventRequest {
				B.a.Accept(n.now, e.Conn, rep(28, nil))
			}
		}
		n.flush()
		A.a.RTU(n.now, ca, nil)
		n.flush()
		A.a.Disconnect(n.now, ca, nil)
		A.a.SIDRRequest(n.now, addrB, sidrReq(nil))
		n.flush()
	}
	for _, s := range seeds {
		f.Add(s, false)
	}
	f.Fuzz(func(t *testing.T, b []byte, stranger bool) {
		cfg := fastConfig(9)
		a := New(cfg)
		a.Listen(svc, 2)
		a.Listen(udSvc, 2)
		now := time.Unix(1e9, 0)
		// A connection of ours in each of a few states, so that the MADs have
		// something to hit.
		a.Connect(now, addrA, req(40, nil))
		from := addrA
		if stranger {
			from = addrB
		}
		for i := 0; i < 3; i++ {
			a.Input(now, from, b)
			// The same MAD with its comm IDs pointed at our connections.
			if len(b) == mad.Len {
				for _, c := range a.conns {
					v := bytes.Clone(b)
					if len(v) >= mad.HeaderLen+8 {
						put32(v[mad.HeaderLen+4:], c.LocalID)
						a.Input(now, from, v)
					}
				}
			}
			now = now.Add(time.Second)
			a.Tick(now)
			a.TakeOutputs()
			for _, e := range a.TakeEvents() {
				switch e.Kind {
				case EventRequest:
					a.Accept(now, e.Conn, rep(50, nil))
				case EventReply:
					a.RTU(now, e.Conn, nil)
				case EventSIDRRequest:
					a.SIDRReply(now, e.Conn, &mad.SIDRRepFields{})
				}
			}
		}
		if len(a.conns) > 1+2+2+8 {
			t.Fatalf("%d connections from three MADs", len(a.conns))
		}
		for _, c := range a.conns {
			if c.state == StateIdle {
				t.Fatalf("an idle connection is kept: %+v", c)
			}
		}
	})
}

func put32(b []byte, v uint32) {
	b[0], b[1], b[2], b[3] = byte(v>>24), byte(v>>16), byte(v>>8), byte(v)
}

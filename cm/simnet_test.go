package cm

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"testing"
	"testing/synctest"
	"time"

	"github.com/goverbs/goverbs/cm/mad"
	"github.com/goverbs/goverbs/netio/simnet"
	"github.com/goverbs/goverbs/verbs"
	"github.com/goverbs/goverbs/wire"
)

// Connection management on the simulated network, with fake time: MADs
// (and the data after them) lost, duplicated and reordered.

func simSide(t *testing.T, n *simnet.Network, addr string) *side {
	t.Helper()
	c, err := n.Listen(netip.AddrPortFrom(netip.MustParseAddr(addr), wire.UDPPort))
	if err != nil {
		t.Fatal(err)
	}
	return newSide(t, nil, verbs.SoftConfig{Addr: netip.MustParseAddr(addr), Conn: c, MTU: verbs.MTU1024}, nil)
}

// TestSimnetHandshakeUnderFaults: with a fifth of all datagrams lost, a
// fifth duplicated and a fifth held back, Dial and Accept still meet, a
// SEND crosses the connection, and a disconnection reaches the other side.
func TestSimnetHandshakeUnderFaults(t *testing.T) {
	for seed := range uint64(12) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				net := simnet.New(seed, simnet.Faults{Loss: 0.2, Duplicate: 0.2, Reorder: 0.2,
					Delay: 50 * time.Microsecond, ReorderDelay: 2 * time.Millisecond})
				cl, sv := simSide(t, net, "127.0.100.1"), simSide(t, net, "127.0.100.2")
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
				defer cancel()
				l, err := sv.a.Listen(7174, 4)
				if err != nil {
					t.Fatal(err)
				}
				accepted := make(chan *Conn, 1)
				go func() {
					r, err := l.Accept(ctx)
					if err != nil {
						t.Error(err)
						accepted <- nil
						return
					}
					c, err := r.Accept(ctx, sv.param([]byte("ok")))
					if err != nil {
						t.Error(err)
					}
					accepted <- c
				}()
				cc, err := cl.a.Dial(ctx, l.Addr(), cl.param([]byte("hi")))
				if err != nil {
					t.Fatal(err)
				}
				sc := <-accepted
				if sc == nil {
					t.FailNow()
				}
				sendOne(t, sv, sc, cl, cc)
				cc.Disconnect(ctx, nil)
				select {
				case <-sc.Done():
				case <-ctx.Done():
					t.Fatal("the server never heard of the disconnection")
				}
				if cl.a.Counters().MADsSent < 3 {
					t.Fatalf("client counters %+v", cl.a.Counters())
				}
				t.Logf("%+v; client %+v server %+v", net.Stats(), cl.a.Counters(), sv.a.Counters())
				cl.a.Close()
				sv.a.Close()
				cl.dev.Close()
				sv.dev.Close()
			})
		})
	}
}

// sendOne sends one SEND from a to b over their connection and waits for
// both completions.
func sendOne(t *testing.T, a *side, ac *Conn, b *side, bc *Conn) {
	t.Helper()
	rbuf := make([]byte, 16)
	rmr, _ := b.pd.RegMR(rbuf, verbs.AccessLocalWrite)
	if err := bc.QP().PostRecv(verbs.RecvWR{ID: 1, SGL: []verbs.SGE{rmr.SGE(0, 16)}}); err != nil {
		t.Fatal(err)
	}
	sbuf := []byte("over the network")
	smr, _ := a.pd.RegMR(sbuf, verbs.AccessLocalWrite)
	if err := ac.QP().PostSend(verbs.SendWR{ID: 2, Opcode: verbs.WRSend, Flags: verbs.SendSignaled,
		SGL: []verbs.SGE{smr.SGE(0, 16)}}); err != nil {
		t.Fatal(err)
	}
	poll(t, a.cq)
	poll(t, b.cq)
	if string(rbuf) != "over the network" {
		t.Fatalf("received %q", rbuf)
	}
}

// TestSimnetCrashedPeer: the server's device dies after the REQ; the
// client gives up after the CM's retries (rdma_cm's timing: 16 sends of
// the REQ, 4.3 s + 2 × 1.07 s apart) with ErrTimeout, and keeps nothing.
func TestSimnetCrashedPeer(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		net := simnet.New(1, simnet.Faults{Delay: 50 * time.Microsecond})
		cl, sv := simSide(t, net, "127.0.100.1"), simSide(t, net, "127.0.100.2")
		sv.a.Listen(7174, 4)
		var reqs int
		dead := false
		server := netip.MustParseAddr("127.0.100.2")
		net.SetFilter(func(src, dst netip.AddrPort, b []byte) simnet.Verdict {
			if isMAD(b, mad.AttrREQ) {
				reqs++
			}
			if dst.Addr() == server && dead {
				return simnet.Drop
			}
			if dst.Addr() == server && reqs == 1 {
				dead = true // the server dies as the first REQ reaches it
			}
			return simnet.Pass
		})
		start := time.Now()
		_, err := cl.a.Dial(context.Background(), netip.MustParseAddrPort("127.0.100.2:7174"), cl.param(nil))
		if !errors.Is(err, ErrTimeout) {
			t.Fatal(err)
		}
		took := time.Since(start)
		if reqs != 16 || took < 16*6*time.Second || took > 16*7*time.Second {
			t.Fatalf("%d REQs over %v", reqs, took)
		}
		if cl.a.tracked() != 0 {
			t.Fatal("the dead connection was kept")
		}
		cl.a.Close()
		cl.dev.Close()
		sv.a.Close()
		sv.dev.Close()
	})
}

// isMAD reports whether the RoCEv2 datagram b carries a CM MAD of attr.
func isMAD(b []byte, attr mad.AttrID) bool {
	var p wire.Packet
	if p.Parse(b, 0) != nil || p.BTH.DestQP() != 1 {
		return false
	}
	m, err := mad.ParseCM(p.Payload)
	return err == nil && m.Header().AttrID() == attr
}

// TestSimnetRestartedClientReconnects: a client process is killed with its
// connection up (nothing tells the server), and restarts at once on the same
// address with a new device. Its REQ must not be taken for the dead
// connection's (IBA 12.9.8.3.1 rejects a REQ from a QPN still connected as
// stale): a device that numbered its QPs from 17 every time reused the dead
// one's QPN and was refused until the server gave the old connection up.
func TestSimnetRestartedClientReconnects(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		net := simnet.New(1, simnet.Faults{Delay: 50 * time.Microsecond})
		const client = "127.0.100.1"
		sv := simSide(t, net, "127.0.100.2")
		l, err := sv.a.Listen(7174, 4)
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		accepted := make(chan *Conn, 2)
		go func() {
			for {
				r, err := l.Accept(ctx)
				if err != nil {
					close(accepted)
					return
				}
				c, err := r.Accept(ctx, sv.param(nil))
				if err != nil {
					t.Error(err)
				}
				accepted <- c
			}
		}()

		first := simSide(t, net, client)
		if _, err := first.a.Dial(ctx, l.Addr(), first.param(nil)); err != nil {
			t.Fatal(err)
		}
		old := <-accepted
		// The process dies: its device and socket go, and nothing it would have
		// said (a DREQ) reaches the server.
		from := netip.MustParseAddr(client)
		net.SetFilter(func(src, _ netip.AddrPort, _ []byte) simnet.Verdict {
			if src.Addr() == from {
				return simnet.Drop
			}
			return simnet.Pass
		})
		first.a.Close()
		first.dev.Close()
		net.SetFilter(nil)

		again := simSide(t, net, client)
		cc, err := again.a.Dial(ctx, l.Addr(), again.param(nil))
		if err != nil {
			t.Fatalf("the restarted client's Dial: %v", err)
		}
		sc := <-accepted
		if sc == nil {
			t.FailNow()
		}
		sendOne(t, again, cc, sv, sc)
		select {
		case <-old.Done():
			t.Fatal("the dead client's connection ended before the server heard anything of it")
		default:
		}
		again.a.Close()
		again.dev.Close()
		cancel()
		sv.a.Close()
		sv.dev.Close()
	})
}

package cm

import (
	"context"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/goverbs/goverbs/cm/internal/ibcm"
	"github.com/goverbs/goverbs/cm/mad"
)

// TestCloseSendsDREP: the peer's DREQ arrives, the CM answers with a DREP, and
// the agent closes while that DREP is still on its way to the port (rdmanet
// closes the device as soon as its connection has ended). The DREP must still
// go out: lost, the peer would keep its connection in DREQ_SENT, and the next
// REQ from the same QPN (a new device numbers its QPs from 17 again) would be
// rejected as stale.
func TestCloseSendsDREP(t *testing.T) {
	hub, cl, sv := memPair(t, nil)
	hub.mu.Lock()
	clientPort := hub.ports[cl.a.Addr()]
	hub.mu.Unlock()
	sending := make(chan struct{})
	var once sync.Once
	hub.mu.Lock()
	hub.drop = func(from, _ netip.Addr, m []byte) bool {
		if from != cl.a.Addr() || len(m) < mad.Len || mad.MAD(m).Header().AttrID() != mad.AttrDREP {
			return false
		}
		once.Do(func() { close(sending) })
		// A closed port sends nothing: the DREP is lost if the agent closes
		// its port under it; Close has this long to do so.
		select {
		case <-clientPort.done:
			return true
		case <-time.After(200 * time.Millisecond):
			return false
		}
	}
	hub.mu.Unlock()

	ctx := ctxT(t)
	l, err := sv.a.Listen(7174, 1)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	accepted := make(chan *Conn, 1)
	go func() {
		r, err := l.Accept(ctx)
		if err != nil {
			t.Error(err)
			accepted <- nil
			return
		}
		c, err := r.Accept(ctx, sv.param(nil))
		if err != nil {
			t.Error(err)
		}
		accepted <- c
	}()
	if _, err := cl.a.Dial(ctx, netipPort(sv, 7174), cl.param(nil)); err != nil {
		t.Fatal(err)
	}
	sc := <-accepted
	if sc == nil {
		t.FailNow()
	}

	// The server disconnects; its DREQ is retransmitted only after 4.3 s, so
	// within this deadline only the first DREP can end the server's side.
	dctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	disconnected := make(chan error, 1)
	go func() { disconnected <- sc.Disconnect(dctx, nil) }()
	select {
	case <-sending:
	case <-dctx.Done():
		t.Fatal("the client never answered the DREQ")
	}
	cl.a.Close()
	if err := <-disconnected; err != nil {
		t.Fatalf("server's Disconnect: %v (the client's DREP was lost to its Close)", err)
	}
	sv.a.mu.Lock()
	state := sc.ic.State()
	sv.a.mu.Unlock()
	if state != ibcm.StateTimeWait {
		t.Fatalf("server's connection in %v after the DREP, want %v", state, ibcm.StateTimeWait)
	}
}

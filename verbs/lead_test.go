package verbs_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/goverbs/goverbs/verbs"
)

// TestChannelWaitersShareTheDevice: two goroutines blocked on two completion channels
// of one default-mode device both get their completions when traffic for both keeps
// coming. One of them reads the device's socket at a time (leader/follower); the other
// is handed its completion through its channel, and takes the socket over when the
// reader leaves.
func TestChannelWaitersShareTheDevice(t *testing.T) {
	a, c := newHost(t), newHost(t)
	w1, w2 := newCQWaiter(t, c.Dev, 64), newCQWaiter(t, c.Dev, 64)
	p1 := newPingPong(t, a, c, a.RCQ, w1.cq)
	p2 := newPingPong(t, a, c, a.RCQ, w2.cq)
	const rounds = 200
	var wg sync.WaitGroup
	for _, s := range []struct {
		w *cqWaiter
		p *pingPong
	}{{w1, p1}, {w2, p2}} {
		wg.Add(1)
		go func() { // answers every ping on its QP, blocked on its channel in between
			defer wg.Done()
			for n := 0; n < rounds; {
				for range s.w.poll(t) {
					s.p.qc.PostRecv(s.p.recvC)
					if err := s.p.qc.PostSend(s.p.pong); err != nil {
						t.Error(err)
						return
					}
					n++
				}
			}
		}()
	}
	for i := 0; i < rounds; i++ {
		for _, p := range []*pingPong{p1, p2} {
			if err := p.qa.PostSend(p.ping); err != nil {
				t.Fatal(err)
			}
		}
		waitWC(t, a.RCQ, 2, 5*time.Second)
		p1.qa.PostRecv(p1.recvA)
		p2.qa.PostRecv(p2.recvA)
	}
	wg.Wait()
}

// TestChannelCloseEndsAServingWait: a goroutine that serves its device while it waits on
// a channel (blocked in the socket's read) returns ErrClosed when the channel closes, and
// ctx.Err() when its context ends.
func TestChannelCloseEndsAServingWait(t *testing.T) {
	h := newHost(t)
	ch := h.Dev.CreateCompChannel()
	if !verbs.ChannelServes(ch) {
		t.Fatal("a default-mode software device does not let its channel's waiter serve it")
	}
	wait := func(ctx context.Context) chan error {
		done := make(chan error, 1)
		go func() { _, err := ch.Wait(ctx); done <- err }()
		return done
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := wait(ctx)
	time.Sleep(20 * time.Millisecond)
	cancel()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("Wait after cancel = %v, want context.Canceled", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("cancelling the context did not end a serving Wait")
	}
	done = wait(context.Background())
	time.Sleep(20 * time.Millisecond)
	if err := ch.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if !errors.Is(err, verbs.ErrClosed) {
			t.Fatalf("Wait after Close = %v, want ErrClosed", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("closing the channel did not end a serving Wait")
	}
}

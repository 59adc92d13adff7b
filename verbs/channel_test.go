package verbs_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/goverbs/goverbs/verbs"
)

func TestCompletionChannelWakesAndCancels(t *testing.T) {
	a, b := newHost(t), newHost(t)
	ch := b.Dev.CreateCompChannel()
	rcq, _ := b.Dev.CreateCQ(16, ch)
	qa := a.QP(t, verbs.QPTypeRC)
	qb, _ := b.PD.CreateQP(verbs.QPInitAttr{Type: verbs.QPTypeRC, SendCQ: b.CQ, RecvCQ: rcq, Cap: verbs.QPCap{MaxSendWR: 4, MaxRecvWR: 16, MaxSendSGE: 1, MaxRecvSGE: 1}})
	connect(t, qa, defaultRC(), b.GID, qb.QPN(), 1, 2)
	connect(t, qb, defaultRC(), a.GID, qa.QPN(), 2, 1)
	src, dst := a.MR(t, 16, allAccess), b.MR(t, 16, allAccess)
	for i := 0; i < 5; i++ {
		qb.PostRecv(verbs.RecvWR{ID: uint64(i), SGL: []verbs.SGE{dst.SGE(0, 16)}})
	}
	woke := make(chan uint64, 5)
	go func() {
		wcs := make([]verbs.WC, 1)
		for i := 0; i < 5; {
			if err := rcq.RequestNotify(false); err != nil {
				t.Error(err)
				return
			}
			if n, _ := rcq.Poll(wcs); n == 1 { // arrived before the arm
				woke <- wcs[0].ID
				i++
				continue
			}
			cq, err := ch.Wait(context.Background())
			if err != nil || cq != rcq {
				t.Errorf("Wait: %v %v", cq, err)
				return
			}
			cq.AckEvents(1)
			// An event may be for a completion the poll above took already (it came
			// between the arm and the poll), as with ibv_get_cq_event: wait again then.
			if n, _ := rcq.Poll(wcs); n == 1 {
				woke <- wcs[0].ID
				i++
			}
		}
	}()
	for i := 0; i < 5; i++ {
		qa.PostSend(verbs.SendWR{ID: uint64(i), Opcode: verbs.WRSend, SGL: []verbs.SGE{src.SGE(0, 8)}})
		select {
		case id := <-woke:
			if id != uint64(i) {
				t.Fatalf("woke for %d, want %d", id, i)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("consumer did not wake for completion %d", i)
		}
	}
	// Each of the consumer's arms may have raised an event for a completion its poll took
	// (the poll reads the socket itself, so the completion can come between the two): a
	// pending event is for the past, as with ibv_get_cq_event. Take them all first.
	for {
		drain, stop := context.WithTimeout(context.Background(), 50*time.Millisecond)
		cq, err := ch.Wait(drain)
		stop()
		if err != nil {
			break
		}
		cq.AckEvents(1)
	}
	// A cancelled context unblocks a waiter with no completion coming.
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	rcq.RequestNotify(false)
	go func() { _, err := ch.Wait(ctx); errc <- err }()
	time.Sleep(10 * time.Millisecond)
	cancel()
	select {
	case err := <-errc:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("Wait returned %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("cancel did not unblock Wait")
	}
}

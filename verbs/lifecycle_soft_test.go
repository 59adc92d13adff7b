package verbs_test

import (
	"context"
	"errors"
	"net/netip"
	"sync/atomic"
	"testing"
	"time"

	"github.com/goverbs/goverbs/verbs"
)

// sentCounter counts the datagrams a device sends (a Recorder sees both directions).
type sentCounter struct {
	from atomic.Pointer[netip.Addr]
	n    atomic.Int64
}

func (c *sentCounter) Record(_ time.Time, src, _ netip.AddrPort, _ uint16, _ []byte) error {
	if a := c.from.Load(); a != nil && src.Addr() == *a {
		c.n.Add(1)
	}
	return nil
}

// writes posts n signalled 64 KiB WRITEs from qp into the peer's region.
func writes(t *testing.T, qp *verbs.QP, src, dst *verbs.MR, n int) {
	t.Helper()
	for i := range n {
		if err := qp.PostSend(verbs.SendWR{ID: uint64(i), Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled,
			SGL: []verbs.SGE{src.SGE(0, 64<<10)}, RemoteAddr: dst.Addr(), RKey: dst.RKey()}); err != nil {
			t.Fatalf("WRITE %d: %v", i, err)
		}
	}
}

// TestDeviceCloseStopsTraffic: once Device.Close returns, the device sends nothing,
// refuses posts and polls, and work it had in flight completes nowhere.
func TestDeviceCloseStopsTraffic(t *testing.T) {
	rec := &sentCounter{}
	a, b := newHostCfg(t, verbs.SoftConfig{Recorder: rec}), newHost(t)
	addr := a.GID.Addr()
	rec.from.Store(&addr)
	qa, qb := a.QP(t, verbs.QPTypeRC), b.QP(t, verbs.QPTypeRC)
	connect(t, qa, defaultRC(), b.GID, qb.QPN(), 0, 0)
	connect(t, qb, defaultRC(), a.GID, qa.QPN(), 0, 0)
	src, dst := a.MR(t, 64<<10, allAccess), b.MR(t, 64<<10, allAccess)

	writes(t, qa, src, dst, 1)
	waitWC(t, a.CQ, 1, 5*time.Second)
	if rec.n.Load() == 0 {
		t.Fatal("the recorder saw no datagram of a completed WRITE")
	}
	writes(t, qa, src, dst, 64) // in flight when the device closes
	if err := a.Dev.Close(); err != nil {
		t.Fatal(err)
	}
	sent := rec.n.Load()
	if err := qa.PostSend(verbs.SendWR{Opcode: verbs.WRRDMAWrite, SGL: []verbs.SGE{src.SGE(0, 8)}, RemoteAddr: dst.Addr(), RKey: dst.RKey()}); !errors.Is(err, verbs.ErrClosed) {
		t.Fatalf("PostSend after Device.Close: %v, want ErrClosed", err)
	}
	time.Sleep(100 * time.Millisecond)
	if _, err := a.CQ.Poll(make([]verbs.WC, 64)); !errors.Is(err, verbs.ErrClosed) {
		t.Fatalf("Poll after Device.Close: %v, want ErrClosed", err)
	}
	if now := rec.n.Load(); now != sent {
		t.Fatalf("the closed device sent %d datagrams after Close returned", now-sent)
	}
}

// TestQPCloseCompletesNothingLater: work a QP had in flight when it closed never
// completes afterwards, though its CQ stays open.
func TestQPCloseCompletesNothingLater(t *testing.T) {
	a, b := newHost(t), newHost(t)
	qa, qb := a.QP(t, verbs.QPTypeRC), b.QP(t, verbs.QPTypeRC)
	connect(t, qa, defaultRC(), b.GID, qb.QPN(), 0, 0)
	connect(t, qb, defaultRC(), a.GID, qa.QPN(), 0, 0)
	src, dst := a.MR(t, 64<<10, allAccess), b.MR(t, 64<<10, allAccess)
	writes(t, qa, src, dst, 64)
	if err := qa.Close(); err != nil {
		t.Fatal(err)
	}
	wcs := make([]verbs.WC, 64)
	for { // what completed before Close returned may be polled
		n, err := a.CQ.Poll(wcs)
		if err != nil {
			t.Fatal(err)
		}
		if n == 0 {
			break
		}
	}
	time.Sleep(100 * time.Millisecond) // the peer's ACKs and the retry timer have had time
	if n, err := a.CQ.Poll(wcs); n != 0 || err != nil {
		t.Fatalf("%d completions (%v) appeared after QP.Close returned: %+v", n, err, wcs[:n])
	}
}

// TestDeviceCloseWhileInUse: goroutines posting, polling and waiting on a channel while
// the device closes see ErrClosed, never a panic or a race, and all return.
func TestDeviceCloseWhileInUse(t *testing.T) {
	a, b := newHost(t), newHost(t)
	ch := a.Dev.CreateCompChannel()
	cq, err := a.Dev.CreateCQ(256, ch)
	if err != nil {
		t.Fatal(err)
	}
	qa, err := a.PD.CreateQP(verbs.QPInitAttr{Type: verbs.QPTypeRC, SendCQ: cq, RecvCQ: cq,
		Cap: verbs.QPCap{MaxSendWR: 256, MaxRecvWR: 256, MaxSendSGE: 1, MaxRecvSGE: 1}})
	if err != nil {
		t.Fatal(err)
	}
	qb := b.QP(t, verbs.QPTypeRC)
	connect(t, qa, defaultRC(), b.GID, qb.QPN(), 0, 0)
	connect(t, qb, defaultRC(), a.GID, qa.QPN(), 0, 0)
	src, dst := a.MR(t, 4096, allAccess), b.MR(t, 4096, allAccess)
	if err := cq.RequestNotify(false); err != nil {
		t.Fatal(err)
	}

	done := make(chan error, 3)
	go func() { // posts until refused
		for {
			err := qa.PostSend(verbs.SendWR{Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled, SGL: []verbs.SGE{src.SGE(0, 64)},
				RemoteAddr: dst.Addr(), RKey: dst.RKey()})
			if errors.Is(err, verbs.ErrClosed) {
				done <- nil
				return
			}
			if err != nil && !errors.Is(err, verbs.ErrQueueFull) {
				done <- err
				return
			}
		}
	}()
	go func() { // polls until refused
		wcs := make([]verbs.WC, 16)
		for {
			if _, err := cq.Poll(wcs); err != nil {
				if errors.Is(err, verbs.ErrCQOverflow) {
					// The poster's send slots free as its WRs complete, not as they are
					// polled, so a poller starved of a core (-race, CI) can fall more than
					// the CQ's depth behind, and the CQ overruns, as it may (IBTA
					// 11.4.2.1). It stays overrun until the close (seen once in CI).
					continue
				}
				if !errors.Is(err, verbs.ErrClosed) {
					done <- err
					return
				}
				done <- nil
				return
			}
		}
	}()
	go func() { // waits on the channel, re-arming, until it closes
		for {
			if _, err := ch.Wait(context.Background()); err != nil {
				if !errors.Is(err, verbs.ErrClosed) {
					done <- err
					return
				}
				done <- nil
				return
			}
			cq.RequestNotify(false)
		}
	}()
	time.Sleep(20 * time.Millisecond)
	if err := a.Dev.Close(); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("a user of the closing device got %v, want ErrClosed", err)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("a user of the device still runs 10s after Device.Close")
		}
	}
}

package verbs_test

import (
	"context"
	"fmt"
	"log"
	"net/netip"
	"time"

	"github.com/goverbs/goverbs/verbs"
)

// endpoint is one side of a SEND/RECV connection. Its CQ reports to a completion channel
// when armed, so a receiver can block instead of polling.
type endpoint struct {
	dev *verbs.Device
	ch  *verbs.CompChannel
	cq  *verbs.CQ
	qp  *verbs.QP
	mr  *verbs.MR
}

func openEndpoint(addr string) (*endpoint, error) {
	dev, err := verbs.OpenSoft(verbs.SoftConfig{Addr: netip.MustParseAddr(addr)})
	if err != nil {
		return nil, err
	}
	e := &endpoint{dev: dev, ch: dev.CreateCompChannel()}
	pd, err := dev.AllocPD()
	if err != nil {
		return nil, err
	}
	if e.cq, err = dev.CreateCQ(16, e.ch); err != nil {
		return nil, err
	}
	e.qp, err = pd.CreateQP(verbs.QPInitAttr{Type: verbs.QPTypeRC, SendCQ: e.cq, RecvCQ: e.cq,
		Cap: verbs.QPCap{MaxSendWR: 8, MaxRecvWR: 8, MaxSendSGE: 1, MaxRecvSGE: 1}})
	if err != nil {
		return nil, err
	}
	e.mr, err = pd.RegMR(make([]byte, 64), verbs.AccessLocalWrite)
	return e, err
}

// connect brings the QP to RTS towards the peer's (INIT, RTR, RTS: IBTA 11.2.4.2).
func (e *endpoint) connect(peer *endpoint) error {
	gid, err := peer.dev.QueryGID(1, 0)
	if err != nil {
		return err
	}
	steps := []struct {
		attr verbs.QPAttr
		mask verbs.QPAttrMask
	}{
		{verbs.QPAttr{State: verbs.QPStateInit, Port: 1},
			verbs.QPAttrState | verbs.QPAttrPKeyIndex | verbs.QPAttrPort | verbs.QPAttrAccessFlags},
		{verbs.QPAttr{State: verbs.QPStateRTR, PathMTU: verbs.MTU1024, DestQPN: peer.qp.QPN(), MinRNRTimer: 12,
			AH: verbs.AHAttr{DGID: gid, Port: 1, HopLimit: 64}},
			verbs.QPAttrState | verbs.QPAttrAV | verbs.QPAttrPathMTU | verbs.QPAttrDestQPN |
				verbs.QPAttrRQPSN | verbs.QPAttrMaxDestRdAtomic | verbs.QPAttrMinRNRTimer},
		{verbs.QPAttr{State: verbs.QPStateRTS, Timeout: 14, RetryCnt: 7, RNRRetry: 7},
			verbs.QPAttrState | verbs.QPAttrSQPSN | verbs.QPAttrTimeout | verbs.QPAttrRetryCnt |
				verbs.QPAttrRNRRetry | verbs.QPAttrMaxQPRdAtomic},
	}
	for _, s := range steps {
		if err := e.qp.Modify(&s.attr, s.mask); err != nil {
			return err
		}
	}
	return nil
}

// next blocks on the completion channel until the CQ has a completion, and returns it:
// arm, wait, acknowledge, poll (the ibv_req_notify_cq / ibv_get_cq_event loop). The
// CQ is armed before the first poll, so a completion that lands in between still
// raises an event.
func (e *endpoint) next(ctx context.Context) (verbs.WC, error) {
	var wcs [1]verbs.WC
	for {
		if err := e.cq.RequestNotify(false); err != nil {
			return verbs.WC{}, err
		}
		n, err := e.cq.Poll(wcs[:])
		if err != nil || n == 1 {
			return wcs[0], err
		}
		cq, err := e.ch.Wait(ctx)
		if err != nil {
			return verbs.WC{}, err
		}
		cq.AckEvents(1)
	}
}

// A SEND into a posted receive; the receiver sleeps on a completion channel until the
// message is there.
func Example_sendRecvWithCompletionChannel() {
	a, err := openEndpoint("127.12.0.3")
	if err != nil {
		log.Fatal(err)
	}
	defer a.dev.Close()
	b, err := openEndpoint("127.12.0.4")
	if err != nil {
		log.Fatal(err)
	}
	defer b.dev.Close()
	if err := a.connect(b); err != nil {
		log.Fatal(err)
	}
	if err := b.connect(a); err != nil {
		log.Fatal(err)
	}

	// b posts a receive before a sends: a SEND finds its buffer there.
	if err := b.qp.PostRecv(verbs.RecvWR{ID: 7, SGL: []verbs.SGE{b.mr.SGE(0, 64)}}); err != nil {
		log.Fatal(err)
	}
	received := make(chan verbs.WC)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		wc, err := b.next(ctx)
		if err != nil {
			log.Fatal(err)
		}
		received <- wc
	}()

	n := copy(a.mr.Buf(), "hello, b")
	if err := a.qp.PostSend(verbs.SendWR{ID: 8, Opcode: verbs.WRSend, Flags: verbs.SendSignaled,
		SGL: []verbs.SGE{a.mr.SGE(0, n)}}); err != nil {
		log.Fatal(err)
	}
	wc := <-received
	fmt.Printf("b: %v of work request %d, %v: %q\n", wc.Opcode, wc.ID, wc.Status, b.mr.Buf()[:wc.ByteLen])

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	wc, err = a.next(ctx)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("a: %v of work request %d, %v\n", wc.Opcode, wc.ID, wc.Status)
	// Output:
	// b: RECV of work request 7, success: "hello, b"
	// a: SEND of work request 8, success
}

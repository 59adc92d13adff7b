//go:build ibverbs

package cm

import (
	"bytes"
	"context"
	"errors"
	"net/netip"
	"os"
	"testing"
	"time"

	"github.com/goverbs/goverbs/cm/mad"
	"github.com/goverbs/goverbs/verbs"
	"github.com/goverbs/goverbs/verbs/ibverbs"
)

// These tests run the CM on a kernel RDMA device through the kernel's rdma_cm:
// GOVERBS_TEST_DEVICE names it (rxe0), else the first device the ibverbs provider
// lists; without one they skip. Both ends are on the one device, which rdma_cm and
// rxe loop back. The rxe VM (../shared/rxe-vm) runs them: build with
// `go test -c -tags ibverbs ./cm`, copy, run with -test.run '^TestKernel' (the
// TestFakeKernel tests need software devices, which cannot bind UDP 4791 beside rxe).

// kernelSide opens the kernel device, its agent (which must be the kernel one), a PD
// and a CQ. The QPs are the ibverbs provider's, on its own ibv_context: librdmacm's ids
// have another context on the same device, and only the QP number travels.
func kernelSide(t *testing.T) *side {
	t.Helper()
	name := os.Getenv("GOVERBS_TEST_DEVICE")
	if name == "" {
		list, err := verbs.Devices()
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range list {
			if d.Provider == ibverbs.ProviderName {
				name = d.Name
				break
			}
		}
	}
	if name == "" {
		t.Skip("no kernel RDMA device (set GOVERBS_TEST_DEVICE to choose one)")
	}
	dev, err := verbs.Open(name)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { dev.Close() })
	if dev.Info().Provider != ibverbs.ProviderName {
		t.Skipf("%s is not a kernel device", name)
	}
	s := &side{dev: dev}
	if s.pd, err = dev.AllocPD(); err != nil {
		t.Fatal(err)
	}
	if s.cq, err = dev.CreateCQ(64, nil); err != nil {
		t.Fatal(err)
	}
	if s.a, err = NewAgent(dev, nil); err != nil {
		t.Fatal(err)
	}
	if s.a.k == nil {
		t.Fatal("the agent of a kernel device is not the kernel one")
	}
	t.Cleanup(func() { s.a.Close() })
	return s
}

func TestKernelDialAccept(t *testing.T) {
	s := kernelSide(t)
	ctx := ctxT(t)
	if info, ok := DeviceFor(s.a.Addr()); !ok || info.Name != s.dev.Name() {
		t.Errorf("DeviceFor(%v) = %v, %v; want %s", s.a.Addr(), info.Name, ok, s.dev.Name())
	}
	// The agent's address vector names the device's GID of its address: an AH made
	// from it is accepted (GID 0 of rxe, IPv6 link-local, would not be with an IPv4 peer).
	if ah, err := s.pd.CreateAH(s.a.AHAttr(s.a.Addr())); err != nil {
		t.Errorf("AH from the agent's AHAttr %+v: %v", s.a.AHAttr(s.a.Addr()), err)
	} else {
		ah.Close()
	}
	l, err := s.a.Listen(0, 4)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	cc, sc := dialAccepted(ctx, t, s, s, l)
	sendAndRead(t, s, s, cc, sc)

	// The client disconnects (the DREQ drops its private data: librdmacm cannot
	// send any); the server hears of it; both QPs are in ERR.
	disconnect(ctx, t, cc, sc)
}

func TestKernelRejects(t *testing.T) {
	s := kernelSide(t)
	ctx := ctxT(t)
	l, err := s.a.Listen(0, 4)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go func() {
		r, err := l.Accept(ctx)
		if err == nil {
			r.Reject([]byte("go away"))
		}
	}()
	_, err = s.a.Dial(ctx, l.Addr(), s.param(nil))
	var rej *RejectError
	if !errors.As(err, &rej) || rej.Reason != mad.ReasonConsumerReject || !bytes.HasPrefix(rej.PrivateData, []byte("go away")) ||
		len(rej.PrivateData) != mad.RejectPrivateLen {
		t.Fatalf("Dial to a rejecting listener: %v", err)
	}

	// No listener: rdma_cm's REJ "invalid service ID".
	_, err = s.a.Dial(ctx, netip.AddrPortFrom(s.a.Addr(), l.Addr().Port()+1), s.param(nil))
	if !errors.Is(err, ErrRejected) {
		t.Fatalf("Dial to no listener: %v", err)
	}
	t.Logf("no listener: %v", err)

	// Budgets are the software CM's, checked before anything is sent.
	if _, err := s.a.Dial(ctx, l.Addr(), s.param(make([]byte, mad.ConnectPrivateLen+1))); !errors.Is(err, ErrPrivateDataTooLong) {
		t.Fatalf("Dial with 57 bytes: %v", err)
	}
}

// TestKernelResolveUD: SIDR through the kernel's rdma_cm, then a datagram to the QP
// and Q_Key learnt; a refusal and a missing listener are SIDRErrors.
func TestKernelResolveUD(t *testing.T) {
	s := kernelSide(t)
	ctx := ctxT(t)
	l, err := s.a.ListenUD(0, 4)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	sqp := s.udQP(t)
	go func() {
		for i := 0; ; i++ {
			r, err := l.Accept(ctx)
			if err != nil {
				return
			}
			if r.Transport != verbs.QPTypeUD || len(r.PrivateData) != mad.UDPrivateLen {
				t.Errorf("request %+v", r)
			}
			if i == 0 {
				if err := r.AcceptUD(&Param{QP: sqp, PrivateData: []byte("served")}); err != nil {
					t.Error(err)
				}
			} else {
				r.Reject([]byte("no"))
			}
		}
	}()
	cqp := s.udQP(t)
	d, err := s.a.ResolveUD(ctx, l.Addr(), &Param{QP: cqp, PrivateData: []byte("ud hello")})
	if err != nil {
		t.Fatal(err)
	}
	if d.QPN != sqp.QPN() || d.QKey != UDPQKey || d.AH == nil || !bytes.HasPrefix(d.PrivateData, []byte("served")) {
		t.Fatalf("resolved %+v", d)
	}
	rbuf := make([]byte, 40+16)
	rmr, _ := s.pd.RegMR(rbuf, verbs.AccessLocalWrite)
	if err := sqp.PostRecv(verbs.RecvWR{ID: 1, SGL: []verbs.SGE{rmr.SGE(0, len(rbuf))}}); err != nil {
		t.Fatal(err)
	}
	msg := []byte("datagram")
	smr, _ := s.pd.RegMR(msg, 0)
	if err := cqp.PostSend(verbs.SendWR{ID: 2, Opcode: verbs.WRSend, Flags: verbs.SendSignaled,
		SGL: []verbs.SGE{smr.SGE(0, len(msg))}, AH: d.AH, RemoteQPN: d.QPN, RemoteQKey: d.QKey}); err != nil {
		t.Fatal(err)
	}
	poll(t, s.cq)
	poll(t, s.cq)
	if string(rbuf[40:40+len(msg)]) != "datagram" {
		t.Fatalf("received %q", rbuf[40:])
	}

	var serr *SIDRError
	_, err = s.a.ResolveUD(ctx, l.Addr(), &Param{PD: s.pd})
	if !errors.As(err, &serr) || serr.Status != mad.SIDRRejected || !bytes.HasPrefix(serr.PrivateData, []byte("no")) {
		t.Fatalf("refused: %v", err)
	}
	_, err = s.a.ResolveUD(ctx, netip.AddrPortFrom(s.a.Addr(), l.Addr().Port()+1), &Param{PD: s.pd})
	if !errors.Is(err, ErrRejected) {
		t.Fatalf("no listener: %v", err)
	}
	t.Logf("no UD listener: %v", err)
	if _, err := s.a.ResolveUD(ctx, l.Addr(), &Param{PrivateData: make([]byte, mad.UDPrivateLen+1)}); !errors.Is(err, ErrPrivateDataTooLong) {
		t.Fatal(err)
	}
}

// TestKernelJoinMulticast: a join through the kernel's rdma_cm gives rdma_cm's MGID,
// QPN and Q_Key and attaches the QP; a send-only join attaches nothing; Leave twice is
// no error.
func TestKernelJoinMulticast(t *testing.T) {
	s := kernelSide(t)
	group := netip.MustParseAddr("239.77.0.9")
	rqp, sqp := s.udQP(t), s.udQP(t)
	rm, err := s.a.JoinMulticast(group, &JoinParam{QP: rqp})
	if err != nil {
		t.Fatal(err)
	}
	sm, err := s.a.JoinMulticast(group, &JoinParam{QP: sqp, SendOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer sm.Leave()
	want := verbs.GIDFromAddr(group)
	for _, m := range []*Multicast{rm, sm} {
		if m.Group != group || m.MGID != want || m.QPN != McastQPN || m.QKey != UDPQKey || m.AH == nil {
			t.Fatalf("joined %+v", m)
		}
	}
	if rqp.State() != verbs.QPStateRTS || rqp.Query().QKey != UDPQKey {
		t.Fatalf("receiver QP in %v with Q_Key %#x", rqp.State(), rqp.Query().QKey)
	}
	msg := []byte("to the group")
	smr, _ := s.pd.RegMR(msg, 0)
	if err := sqp.PostSend(verbs.SendWR{ID: 2, Opcode: verbs.WRSend, Flags: verbs.SendSignaled,
		SGL: []verbs.SGE{smr.SGE(0, len(msg))}, AH: sm.AH, RemoteQPN: sm.QPN, RemoteQKey: sm.QKey}); err != nil {
		t.Fatal(err)
	}
	poll(t, s.cq)
	if err := rm.Leave(); err != nil {
		t.Fatal(err)
	}
	if err := rm.Leave(); err != nil {
		t.Fatal(err)
	}
}

// TestKernelDialCancelled: a listener that never answers, a Dial whose context ends:
// the Dial returns the context's error and its id is gone.
func TestKernelDialCancelled(t *testing.T) {
	s := kernelSide(t)
	l, err := s.a.Listen(0, 4)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_, err = s.a.Dial(ctx, l.Addr(), s.param(nil))
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Dial: %v", err)
	}
	// The request reached the listener; answering it now fails, as the peer is gone.
	r, err := l.Accept(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	actx, acancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer acancel()
	if _, err := r.Accept(actx, s.param(nil)); err == nil {
		t.Fatal("Accept of an abandoned request succeeded")
	} else {
		t.Logf("accepting the abandoned request: %v", err)
	}
	s.a.k.mu.Lock()
	n := len(s.a.k.conns)
	s.a.k.mu.Unlock()
	if n != 0 {
		t.Fatalf("%d ids left", n)
	}
}

// TestKernelAgentClose: closing an agent ends its connections, and the peer hears.
func TestKernelAgentClose(t *testing.T) {
	s, s2 := kernelSide(t), kernelSide(t)
	ctx := ctxT(t)
	l, err := s2.a.Listen(0, 4)
	if err != nil {
		t.Fatal(err)
	}
	ch := kernelAccept(ctx, l, s2.param(nil))
	cc, err := s.a.Dial(ctx, l.Addr(), s.param(nil))
	if err != nil {
		t.Fatal(err)
	}
	acc := <-ch
	if acc.err != nil {
		t.Fatal(acc.err)
	}
	s.a.Close()
	if !errors.Is(cc.Err(), ErrClosed) {
		t.Fatalf("after Close: %v", cc.Err())
	}
	select {
	case <-acc.c.Done():
	case <-ctx.Done():
		t.Fatal("the peer never saw the agent close")
	}
	if _, err := s.a.Listen(0, 1); !errors.Is(err, ErrClosed) {
		t.Fatalf("Listen after Close: %v", err)
	}
}

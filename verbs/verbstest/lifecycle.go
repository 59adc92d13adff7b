// Package verbstest holds test suites that every verbs provider passes, run through
// package verbs against a device the caller opens: the software provider's tests run
// them on a loopback device, verbs/ibverbs' on an RDMA device of the kernel.
package verbstest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/goverbs/goverbs/verbs"
)

// Env says how a suite reaches the provider under test.
type Env struct {
	// Open opens a new device of the provider; the suite closes it.
	Open func(t testing.TB) *verbs.Device
	// GIDIndex is the index, in port 1's GID table, of the GID the suite's address
	// handles and UD QP use.
	GIDIndex int
}

// objects is one of each kind of object, made on one device.
type objects struct {
	dev    *verbs.Device
	pd     *verbs.PD
	ch     *verbs.CompChannel
	cq     *verbs.CQ
	srq    *verbs.SRQ
	qp     *verbs.QP // RC, in RTS connected to itself
	ud     *verbs.QP // UD, in RTS, for sends naming the address handle
	mr     *verbs.MR
	mw1    *verbs.MW
	mw2    *verbs.MW
	ah     *verbs.AH
	gid    verbs.GID
	gidIdx int
}

// must returns v, ending the test if err is not nil: must(t, "what")(call()).
func must[T any](t testing.TB, what string) func(v T, err error) T {
	return func(v T, err error) T {
		t.Helper()
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		return v
	}
}

func (e Env) objects(t testing.TB, dev *verbs.Device) *objects {
	t.Helper()
	o := &objects{dev: dev, gidIdx: e.GIDIndex}
	o.gid = must[verbs.GID](t, "QueryGID")(dev.QueryGID(1, e.GIDIndex))
	o.pd = must[*verbs.PD](t, "AllocPD")(dev.AllocPD())
	o.ch = dev.CreateCompChannel()
	o.cq = must[*verbs.CQ](t, "CreateCQ")(dev.CreateCQ(16, o.ch))
	o.srq = must[*verbs.SRQ](t, "CreateSRQ")(o.pd.CreateSRQ(verbs.SRQAttr{MaxWR: 4, MaxSGE: 1}))
	cap := verbs.QPCap{MaxSendWR: 4, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1}
	o.qp = must[*verbs.QP](t, "CreateQP")(o.pd.CreateQP(verbs.QPInitAttr{Type: verbs.QPTypeRC, SendCQ: o.cq, RecvCQ: o.cq, SRQ: o.srq, Cap: cap}))
	o.ud = must[*verbs.QP](t, "CreateQP UD")(o.pd.CreateQP(verbs.QPInitAttr{Type: verbs.QPTypeUD, SendCQ: o.cq, RecvCQ: o.cq, Cap: cap}))
	steps := []struct {
		attr verbs.QPAttr
		mask verbs.QPAttrMask
	}{
		{verbs.QPAttr{State: verbs.QPStateInit, Port: 1, QKey: 0x11111111}, verbs.QPAttrState | verbs.QPAttrPKeyIndex | verbs.QPAttrPort | verbs.QPAttrQKey},
		{verbs.QPAttr{State: verbs.QPStateRTR}, verbs.QPAttrState},
		{verbs.QPAttr{State: verbs.QPStateRTS, SQPSN: 1}, verbs.QPAttrState | verbs.QPAttrSQPSN},
	}
	for _, s := range steps {
		if err := o.ud.Modify(&s.attr, s.mask); err != nil {
			t.Fatalf("UD QP to %v: %v", s.attr.State, err)
		}
	}
	rc := []struct {
		attr verbs.QPAttr
		mask verbs.QPAttrMask
	}{
		{verbs.QPAttr{State: verbs.QPStateInit, Port: 1, AccessFlags: verbs.AccessRemoteRead | verbs.AccessMWBind},
			verbs.QPAttrState | verbs.QPAttrPKeyIndex | verbs.QPAttrPort | verbs.QPAttrAccessFlags},
		{verbs.QPAttr{State: verbs.QPStateRTR, PathMTU: verbs.MTU1024, DestQPN: o.qp.QPN(), RQPSN: 1, MaxDestRdAtomic: 1, MinRNRTimer: 12,
			AH: verbs.AHAttr{DGID: o.gid, SGIDIndex: uint8(e.GIDIndex), HopLimit: 64, Port: 1}},
			verbs.QPAttrState | verbs.QPAttrAV | verbs.QPAttrPathMTU | verbs.QPAttrDestQPN | verbs.QPAttrRQPSN |
				verbs.QPAttrMaxDestRdAtomic | verbs.QPAttrMinRNRTimer},
		{verbs.QPAttr{State: verbs.QPStateRTS, SQPSN: 1, Timeout: 14, RetryCnt: 7, RNRRetry: 7, MaxRdAtomic: 1},
			verbs.QPAttrState | verbs.QPAttrSQPSN | verbs.QPAttrTimeout | verbs.QPAttrRetryCnt | verbs.QPAttrRNRRetry | verbs.QPAttrMaxQPRdAtomic},
	}
	for _, s := range rc {
		if err := o.qp.Modify(&s.attr, s.mask); err != nil {
			t.Fatalf("RC QP to %v: %v", s.attr.State, err)
		}
	}
	o.mr = must[*verbs.MR](t, "RegMR")(o.pd.RegMR(make([]byte, 4096), verbs.AccessLocalWrite|verbs.AccessMWBind))
	o.mw1 = must[*verbs.MW](t, "AllocMW type 1")(o.pd.AllocMW(verbs.MWType1))
	o.mw2 = must[*verbs.MW](t, "AllocMW type 2")(o.pd.AllocMW(verbs.MWType2))
	o.ah = must[*verbs.AH](t, "CreateAH")(o.pd.CreateAH(verbs.AHAttr{DGID: o.gid, SGIDIndex: uint8(e.GIDIndex), HopLimit: 64, Port: 1}))
	return o
}

// The objects a case closes itself, named by what closing them needs first.
const (
	byDevice = iota
	byPD
	byMR
	byMW
	byAH
	byCQ
	byChannel
	byQP
	bySRQ
)

// closeFor closes the object of kind k and, first, those that use it: every Close on
// the way must succeed.
func (o *objects) closeFor(t testing.TB, k int) {
	t.Helper()
	order := map[int][]string{
		byDevice: {"device"}, byPD: {"qp", "ud", "srq", "mw1", "mw2", "ah", "mr", "pd"},
		byMR: {"mr"}, byMW: {"mw1", "mw2"}, byAH: {"ah"}, byCQ: {"qp", "ud", "cq"},
		byChannel: {"qp", "ud", "cq", "ch"}, byQP: {"qp", "ud"}, bySRQ: {"qp", "srq"},
	}[k]
	closers := map[string]func() error{
		"device": o.dev.Close, "pd": o.pd.Close, "ch": o.ch.Close, "cq": o.cq.Close, "srq": o.srq.Close,
		"qp": o.qp.Close, "ud": o.ud.Close, "mr": o.mr.Close, "mw1": o.mw1.Close, "mw2": o.mw2.Close, "ah": o.ah.Close,
	}
	for _, name := range order {
		if err := closers[name](); err != nil {
			t.Fatalf("Close of the %s: %v", name, err)
		}
	}
}

// lifecycleCase is one call that must fail with ErrClosed once the object of kind owner
// is closed, or its device is.
type lifecycleCase struct {
	name  string
	owner int
	call  func(o *objects) error
}

func lifecycleCases() []lifecycleCase {
	sge := func(o *objects) []verbs.SGE { return []verbs.SGE{{Addr: o.mr.Addr(), Length: 8, LKey: o.mr.LKey()}} }
	grh := make([]byte, verbs.GRHLen) // a UD receive's GRH area holding an IPv4 header
	grh[20] = 0x45
	copy(grh[32:36], []byte{127, 0, 0, 1})
	return []lifecycleCase{
		{"Device.Close", byDevice, func(o *objects) error { return o.dev.Close() }},
		{"Device.QueryPort", byDevice, func(o *objects) error { _, err := o.dev.QueryPort(1); return err }},
		{"Device.GIDTable", byDevice, func(o *objects) error { _, err := o.dev.GIDTable(1); return err }},
		{"Device.QueryGID", byDevice, func(o *objects) error { _, err := o.dev.QueryGID(1, o.gidIdx); return err }},
		{"Device.AllocPD", byDevice, func(o *objects) error { _, err := o.dev.AllocPD(); return err }},
		{"Device.CreateCQ", byDevice, func(o *objects) error { _, err := o.dev.CreateCQ(8, nil); return err }},
		{"Device.CreateCompChannel", byDevice, func(o *objects) error {
			_, err := o.dev.CreateCompChannel().Wait(context.Background())
			return err
		}},

		{"PD.Close", byPD, func(o *objects) error { return o.pd.Close() }},
		{"PD.RegMR", byPD, func(o *objects) error { _, err := o.pd.RegMR(make([]byte, 64), verbs.AccessLocalWrite); return err }},
		{"PD.AllocMW", byPD, func(o *objects) error { _, err := o.pd.AllocMW(verbs.MWType2); return err }},
		{"PD.CreateAH", byPD, func(o *objects) error {
			_, err := o.pd.CreateAH(verbs.AHAttr{DGID: o.gid, SGIDIndex: uint8(o.gidIdx), HopLimit: 64, Port: 1})
			return err
		}},
		{"PD.CreateAHFromWC", byPD, func(o *objects) error {
			_, err := o.pd.CreateAHFromWC(&verbs.WC{Flags: verbs.WCWithGRH}, grh, 1)
			return err
		}},
		{"PD.CreateSRQ", byPD, func(o *objects) error { _, err := o.pd.CreateSRQ(verbs.SRQAttr{MaxWR: 4, MaxSGE: 1}); return err }},
		{"PD.CreateQP", byPD, func(o *objects) error {
			cq, err := o.dev.CreateCQ(8, nil)
			if err != nil {
				return err
			}
			defer cq.Close()
			_, err = o.pd.CreateQP(verbs.QPInitAttr{Type: verbs.QPTypeRC, SendCQ: cq, RecvCQ: cq,
				Cap: verbs.QPCap{MaxSendWR: 1, MaxRecvWR: 1, MaxSendSGE: 1, MaxRecvSGE: 1}})
			return err
		}},

		{"MR.Close", byMR, func(o *objects) error { return o.mr.Close() }},
		{"QP.BindMW of a closed MR", byMR, func(o *objects) error {
			_, err := o.qp.BindMW(o.mw1, 1, verbs.SendSignaled, verbs.MWBind{MR: o.mr, Addr: o.mr.Addr(), Length: 8, Access: verbs.AccessRemoteRead})
			return err
		}},
		{"QP.PostSend BIND_MW of a closed MR", byMR, func(o *objects) error {
			return o.qp.PostSend(bindWR(o))
		}},
		{"MW.Close", byMW, func(o *objects) error { return o.mw2.Close() }},
		{"QP.BindMW of a closed MW", byMW, func(o *objects) error {
			_, err := o.qp.BindMW(o.mw1, 1, verbs.SendSignaled, verbs.MWBind{MR: o.mr, Addr: o.mr.Addr(), Length: 8, Access: verbs.AccessRemoteRead})
			return err
		}},
		{"QP.PostSend BIND_MW of a closed MW", byMW, func(o *objects) error {
			return o.qp.PostSend(bindWR(o))
		}},
		{"AH.Close", byAH, func(o *objects) error { return o.ah.Close() }},
		{"QP.PostSend naming a closed AH", byAH, func(o *objects) error {
			return o.ud.PostSend(verbs.SendWR{Opcode: verbs.WRSend, SGL: sge(o), AH: o.ah, RemoteQPN: 1, RemoteQKey: 0x11111111})
		}},

		{"CQ.Close", byCQ, func(o *objects) error { return o.cq.Close() }},
		{"CQ.Poll", byCQ, func(o *objects) error { _, err := o.cq.Poll(make([]verbs.WC, 4)); return err }},
		{"CQ.Resize", byCQ, func(o *objects) error { return o.cq.Resize(32) }},
		{"CQ.RequestNotify", byCQ, func(o *objects) error { return o.cq.RequestNotify(false) }},
		{"PD.CreateQP on a closed CQ", byCQ, func(o *objects) error {
			_, err := o.pd.CreateQP(verbs.QPInitAttr{Type: verbs.QPTypeRC, SendCQ: o.cq, RecvCQ: o.cq,
				Cap: verbs.QPCap{MaxSendWR: 1, MaxRecvWR: 1, MaxSendSGE: 1, MaxRecvSGE: 1}})
			return err
		}},

		{"CompChannel.Close", byChannel, func(o *objects) error { return o.ch.Close() }},
		{"CompChannel.Wait", byChannel, func(o *objects) error {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			_, err := o.ch.Wait(ctx)
			return err
		}},
		{"Device.CreateCQ on a closed channel", byChannel, func(o *objects) error {
			cq, err := o.dev.CreateCQ(8, o.ch)
			if err == nil {
				cq.Close()
			}
			return err
		}},

		{"QP.Close", byQP, func(o *objects) error { return o.qp.Close() }},
		{"QP.Modify", byQP, func(o *objects) error {
			return o.qp.Modify(&verbs.QPAttr{State: verbs.QPStateErr}, verbs.QPAttrState)
		}},
		{"QP.PostSend", byQP, func(o *objects) error {
			return o.ud.PostSend(verbs.SendWR{Opcode: verbs.WRSend, SGL: sge(o), AH: o.ah})
		}},
		{"QP.PostRecv", byQP, func(o *objects) error { return o.ud.PostRecv(verbs.RecvWR{SGL: sge(o)}) }},
		{"QP.BindMW", byQP, func(o *objects) error {
			_, err := o.qp.BindMW(o.mw1, 1, verbs.SendSignaled, verbs.MWBind{MR: o.mr, Addr: o.mr.Addr(), Length: 8, Access: verbs.AccessRemoteRead})
			return err
		}},

		{"SRQ.Close", bySRQ, func(o *objects) error { return o.srq.Close() }},
		{"SRQ.PostRecv", bySRQ, func(o *objects) error { return o.srq.PostRecv(verbs.RecvWR{SGL: sge(o)}) }},
		{"SRQ.Arm", bySRQ, func(o *objects) error { return o.srq.Arm(1) }},
		{"PD.CreateQP on a closed SRQ", bySRQ, func(o *objects) error {
			_, err := o.pd.CreateQP(verbs.QPInitAttr{Type: verbs.QPTypeRC, SendCQ: o.cq, RecvCQ: o.cq, SRQ: o.srq,
				Cap: verbs.QPCap{MaxSendWR: 1, MaxRecvWR: 1, MaxSendSGE: 1, MaxRecvSGE: 1}})
			return err
		}},
	}
}

// bindWR binds the type 2 window to the region's first 8 bytes.
func bindWR(o *objects) verbs.SendWR {
	return verbs.SendWR{Opcode: verbs.WRBindMW, Flags: verbs.SendSignaled, Bind: &verbs.MWBindWR{MW: o.mw2,
		RKey:   o.mw2.RKey()&^0xff | (o.mw2.RKey()+1)&0xff,
		MWBind: verbs.MWBind{MR: o.mr, Addr: o.mr.Addr(), Length: 8, Access: verbs.AccessRemoteRead}}}
}

// TestLifecycle checks every method that returns an error, after its object's own Close
// and after its device's Close: each returns an error matching verbs.ErrClosed, and the
// calls that return no error neither panic nor report a live object.
func TestLifecycle(t *testing.T, e Env) {
	for _, c := range lifecycleCases() {
		if c.owner == byDevice {
			continue // its own Close is the device's
		}
		t.Run("own Close/"+c.name, func(t *testing.T) {
			dev := e.Open(t)
			defer dev.Close()
			o := e.objects(t, dev)
			o.closeFor(t, c.owner)
			wantClosed(t, c.call(o))
			o.touch(t)
		})
	}
	t.Run("Device.Close", func(t *testing.T) {
		dev := e.Open(t)
		o := e.objects(t, dev)
		if err := dev.Close(); err != nil {
			t.Fatalf("Device.Close with every kind of object open: %v", err)
		}
		for _, c := range lifecycleCases() {
			t.Run(c.name, func(t *testing.T) { wantClosed(t, c.call(o)) })
		}
		o.touch(t)
		if dev.Progress() {
			t.Error("Progress drove a closed device")
		}
		select {
		case _, ok := <-dev.Events():
			if ok {
				t.Error("the event channel delivers after Device.Close")
			}
		case <-time.After(10 * time.Second):
			t.Error("the event channel is open 10s after Device.Close")
		}
	})
}

// touch calls the methods that return no error, which must not panic on closed objects,
// and checks what they say of a closed QP.
func (o *objects) touch(t testing.TB) {
	t.Helper()
	o.dev.Query()
	o.dev.Counters()
	o.cq.Depth()
	o.cq.AckEvents(0)
	o.srq.Query()
	o.mr.LKey()
	o.mr.RKey()
	o.mw1.RKey()
	o.qp.QPN()
	o.qp.Query()
	o.qp.Counters()
	if o.qp.State() != verbs.QPStateErr && closedQP(o) {
		t.Errorf("a closed QP's State is %v, want ERR", o.qp.State())
	}
}

// closedQP reports whether the QP is closed, by its own Close or its device's.
func closedQP(o *objects) bool {
	return errors.Is(o.qp.Modify(&verbs.QPAttr{State: verbs.QPStateErr}, verbs.QPAttrState), verbs.ErrClosed)
}

func wantClosed(t testing.TB, err error) {
	t.Helper()
	if !errors.Is(err, verbs.ErrClosed) {
		t.Fatalf("error %v, want one matching verbs.ErrClosed", err)
	}
}

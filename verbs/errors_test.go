package verbs_test

import (
	"context"
	"errors"
	"net/netip"
	"strings"
	"testing"

	"github.com/goverbs/goverbs/internal/testaddr"
	"github.com/goverbs/goverbs/verbs"
)

// TestErrorsMatchSentinels: every error path of the API wraps the sentinel a program
// matches with errors.Is, says "verbs:" once, and does not repeat the layers below it.
func TestErrorsMatchSentinels(t *testing.T) {
	a, b := newHost(t), newHost(t)
	busyQP := a.QP(t, verbs.QPTypeRC) // keeps a.cq and a.pd in use
	rc := a.QP(t, verbs.QPTypeRC)     // stays in RESET
	mr := a.MR(t, 64, allAccess)

	closedDev := testaddr.Open(t, testaddr.Verbs, func(a netip.Addr) (*verbs.Device, error) { return verbs.OpenSoft(verbs.SoftConfig{Addr: a}) })
	closedDev.Close()

	closedQP := a.QP(t, verbs.QPTypeRC)
	connect(t, closedQP, defaultRC(), b.GID, 1, 0, 0)
	closedQP.Close()

	full := a.QP(t, verbs.QPTypeRC) // RTS towards nobody, its 256-WR send queue to be filled
	connect(t, full, defaultRC(), b.GID, 1, 0, 0)
	fill := make([]verbs.SendWR, 300)
	for i := range fill {
		fill[i] = verbs.SendWR{Opcode: verbs.WRRDMAWrite, RemoteAddr: 1, RKey: 1}
	}

	ch := a.Dev.CreateCompChannel()
	ch.Close()
	pd2, err := a.Dev.AllocPD()
	if err != nil {
		t.Fatal(err)
	}
	pd2.Close()
	mw, err := a.PD.AllocMW(verbs.MWType2)
	if err != nil {
		t.Fatal(err)
	}
	mw1, err := a.PD.AllocMW(verbs.MWType1)
	if err != nil {
		t.Fatal(err)
	}
	srq, err := a.PD.CreateSRQ(verbs.SRQAttr{MaxWR: 8, MaxSGE: 1})
	if err != nil {
		t.Fatal(err)
	}

	cases := []struct {
		name string
		want error
		call func() error
	}{
		{"Open of an unknown device", verbs.ErrNoDevice, func() error { _, err := verbs.Open("no-such-device"); return err }},
		{"Devices with a malformed GOVERBS_DEVICES", verbs.ErrNoDevice, func() error {
			t.Setenv(verbs.EnvDevices, "sw0")
			_, err := verbs.Devices()
			return err
		}},
		{"OpenSoft on an address in use", verbs.ErrUnavailable, func() error {
			_, err := verbs.OpenSoft(verbs.SoftConfig{Addr: a.GID.Addr()})
			return err
		}},
		{"OpenSoft without an address", verbs.ErrInvalidAttr, func() error { _, err := verbs.OpenSoft(verbs.SoftConfig{}); return err }},
		{"QueryPort of port 2", verbs.ErrInvalidPort, func() error { _, err := a.Dev.QueryPort(2); return err }},
		{"QueryGID past the table", verbs.ErrInvalidGID, func() error { _, err := a.Dev.QueryGID(1, 5); return err }},
		{"AllocPD after Device.Close", verbs.ErrClosed, func() error { _, err := closedDev.AllocPD(); return err }},
		{"CreateCQ after Device.Close", verbs.ErrClosed, func() error { _, err := closedDev.CreateCQ(8, nil); return err }},
		{"CreateCQ of depth 0", verbs.ErrInvalidAttr, func() error { _, err := a.Dev.CreateCQ(0, nil); return err }},
		{"RegMR of no memory", verbs.ErrInvalidAttr, func() error { _, err := a.PD.RegMR(nil, verbs.AccessLocalWrite); return err }},
		{"RegMR remote write without local write", verbs.ErrInvalidAttr, func() error {
			_, err := a.PD.RegMR(make([]byte, 8), verbs.AccessRemoteWrite)
			return err
		}},
		{"RegMR after PD.Close", verbs.ErrClosed, func() error { _, err := pd2.RegMR(make([]byte, 8), verbs.AccessLocalWrite); return err }},
		{"AllocMW after PD.Close", verbs.ErrClosed, func() error { _, err := pd2.AllocMW(verbs.MWType1); return err }},
		{"PD.Close while in use", verbs.ErrBusy, a.PD.Close},
		{"CQ.Close while a QP uses it", verbs.ErrBusy, a.CQ.Close},
		{"CreateQP without CQs", verbs.ErrInvalidAttr, func() error { _, err := a.PD.CreateQP(verbs.QPInitAttr{Type: verbs.QPTypeRC}); return err }},
		{"CreateQP with another device's CQ", verbs.ErrWrongDevice, func() error {
			_, err := a.PD.CreateQP(verbs.QPInitAttr{Type: verbs.QPTypeRC, SendCQ: b.CQ, RecvCQ: a.CQ})
			return err
		}},
		{"CreateQP beyond the device's limits", verbs.ErrLimit, func() error {
			_, err := a.PD.CreateQP(verbs.QPInitAttr{Type: verbs.QPTypeRC, SendCQ: a.CQ, RecvCQ: a.CQ, Cap: verbs.QPCap{MaxSendWR: 1 << 30}})
			return err
		}},
		{"Modify RESET -> RTS", verbs.ErrInvalidState, func() error { return rc.Modify(&verbs.QPAttr{State: verbs.QPStateRTS}, verbs.QPAttrState) }},
		{"Modify to INIT without a port", verbs.ErrMissingAttr, func() error {
			return rc.Modify(&verbs.QPAttr{State: verbs.QPStateInit}, verbs.QPAttrState|verbs.QPAttrPKeyIndex|verbs.QPAttrAccessFlags)
		}},
		{"Modify to INIT with a Q_Key on RC", verbs.ErrExtraAttr, func() error {
			return rc.Modify(&verbs.QPAttr{State: verbs.QPStateInit, Port: 1}, verbs.QPAttrState|verbs.QPAttrPKeyIndex|verbs.QPAttrPort|verbs.QPAttrAccessFlags|verbs.QPAttrQKey)
		}},
		{"Modify to port 2", verbs.ErrInvalidPort, func() error {
			return rc.Modify(&verbs.QPAttr{State: verbs.QPStateInit, Port: 2}, verbs.QPAttrState|verbs.QPAttrPKeyIndex|verbs.QPAttrPort|verbs.QPAttrAccessFlags)
		}},
		{"PostSend in RESET", verbs.ErrQPState, func() error { return rc.PostSend(verbs.SendWR{Opcode: verbs.WRSend}) }},
		{"PostRecv in RESET", verbs.ErrQPState, func() error { return rc.PostRecv(verbs.RecvWR{}) }},
		{"PostSend after QP.Close", verbs.ErrClosed, func() error { return closedQP.PostSend(verbs.SendWR{Opcode: verbs.WRSend}) }},
		{"PostRecv after QP.Close", verbs.ErrClosed, func() error { return closedQP.PostRecv(verbs.RecvWR{}) }},
		{"Modify after QP.Close", verbs.ErrClosed, func() error { return closedQP.Modify(&verbs.QPAttr{State: verbs.QPStateErr}, verbs.QPAttrState) }},
		{"PostSend with too many SGEs", verbs.ErrInvalidAttr, func() error { return full.PostSend(verbs.SendWR{Opcode: verbs.WRSend, SGL: make([]verbs.SGE, 5)}) }},
		{"PostRecv with too many SGEs", verbs.ErrInvalidAttr, func() error { return full.PostRecv(verbs.RecvWR{SGL: make([]verbs.SGE, 5)}) }},
		{"BindMW naming a nil region", verbs.ErrInvalidAttr, func() error {
			_, err := busyQP.BindMW(mw1, 1, 0, verbs.MWBind{MR: (*verbs.MR)(nil), Length: 8})
			return err
		}},
		{"BIND_MW naming a nil region", verbs.ErrInvalidAttr, func() error {
			return full.PostSend(verbs.SendWR{Opcode: verbs.WRBindMW, Bind: &verbs.MWBindWR{MW: mw, RKey: verbs.IncRKey(mw.RKey()),
				MWBind: verbs.MWBind{MR: (*verbs.MR)(nil), Length: 8}}})
		}},
		{"PostSend into a full send queue", verbs.ErrQueueFull, func() error { return full.PostSend(fill...) }},
		{"AllocMW of type 3", verbs.ErrInvalidAttr, func() error { _, err := a.PD.AllocMW(3); return err }},
		{"BindMW of a type 2 window", verbs.ErrInvalidAttr, func() error {
			_, err := busyQP.BindMW(mw, 1, 0, verbs.MWBind{MR: mr})
			return err
		}},
		{"SRQ.Arm at max_wr", verbs.ErrInvalidAttr, func() error { return srq.Arm(8) }},
		{"CreateAH without a GID", verbs.ErrInvalidAttr, func() error { _, err := a.PD.CreateAH(verbs.AHAttr{Port: 1}); return err }},
		{"CompChannel.Wait after Close", verbs.ErrClosed, func() error { _, err := ch.Wait(context.Background()); return err }},
	}
	for _, c := range cases {
		err := c.call()
		t.Logf("%s: %v", c.name, err)
		switch {
		case err == nil:
			t.Errorf("%s: no error, want %v", c.name, c.want)
		case !errors.Is(err, c.want):
			t.Errorf("%s: %q does not match %v", c.name, err, c.want)
		case !strings.HasPrefix(err.Error(), "verbs: ") || strings.Count(err.Error(), "verbs:") != 1:
			t.Errorf("%s: %q does not say \"verbs:\" once, first", c.name, err)
		case strings.Contains(err.Error(), "netio:"):
			t.Errorf("%s: %q repeats the layers below", c.name, err)
		}
	}
}

// TestPostErrorNamesTheRequest: a refused request in a batch is named by its index, and
// the error still matches its sentinel.
func TestPostErrorNamesTheRequest(t *testing.T) {
	a := newHost(t)
	qp := a.QP(t, verbs.QPTypeRC)
	if err := qp.Modify(&verbs.QPAttr{State: verbs.QPStateInit, Port: 1, AccessFlags: allAccess},
		verbs.QPAttrState|verbs.QPAttrPKeyIndex|verbs.QPAttrPort|verbs.QPAttrAccessFlags); err != nil {
		t.Fatal(err)
	}
	err := qp.PostRecv(verbs.RecvWR{ID: 1}, verbs.RecvWR{ID: 2, SGL: make([]verbs.SGE, 5)})
	var pe *verbs.PostError
	if !errors.As(err, &pe) || pe.Index != 1 || !errors.Is(err, verbs.ErrInvalidAttr) {
		t.Fatalf("PostRecv = %v, want a *PostError for request 1 matching ErrInvalidAttr", err)
	}
	if got := err.Error(); got != "verbs: work request 1: too many scatter/gather elements" {
		t.Errorf("text %q", got)
	}
}

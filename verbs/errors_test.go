package verbs

import (
	"context"
	"errors"
	"net/netip"
	"strings"
	"testing"

	"github.com/goverbs/goverbs/internal/testaddr"
)

// TestErrorsMatchSentinels: every error path of the API wraps the sentinel a program
// matches with errors.Is, says "verbs:" once, and does not repeat the layers below it.
func TestErrorsMatchSentinels(t *testing.T) {
	a, b := newHost(t), newHost(t)
	busyQP := a.qp(t, QPTypeRC) // keeps a.cq and a.pd in use
	rc := a.qp(t, QPTypeRC)     // stays in RESET
	mr := a.mr(t, 64, allAccess)

	closedDev := testaddr.Open(t, testaddr.Verbs, func(a netip.Addr) (*Device, error) { return OpenSoft(SoftConfig{Addr: a}) })
	closedDev.Close()

	closedQP := a.qp(t, QPTypeRC)
	connect(t, closedQP, defaultRC(), b.gid, 1, 0, 0)
	closedQP.Close()

	full := a.qp(t, QPTypeRC) // RTS towards nobody, its 256-WR send queue to be filled
	connect(t, full, defaultRC(), b.gid, 1, 0, 0)
	fill := make([]SendWR, 300)
	for i := range fill {
		fill[i] = SendWR{Opcode: WRRDMAWrite, RemoteAddr: 1, RKey: 1}
	}

	ch := a.dev.CreateCompChannel()
	ch.Close()
	pd2, err := a.dev.AllocPD()
	if err != nil {
		t.Fatal(err)
	}
	pd2.Close()
	mw, err := a.pd.AllocMW(MWType2)
	if err != nil {
		t.Fatal(err)
	}
	mw1, err := a.pd.AllocMW(MWType1)
	if err != nil {
		t.Fatal(err)
	}
	srq, err := a.pd.CreateSRQ(SRQAttr{MaxWR: 8, MaxSGE: 1})
	if err != nil {
		t.Fatal(err)
	}

	cases := []struct {
		name string
		want error
		call func() error
	}{
		{"Open of an unknown device", ErrNoDevice, func() error { _, err := Open("no-such-device"); return err }},
		{"Devices with a malformed GOVERBS_DEVICES", ErrNoDevice, func() error {
			t.Setenv(EnvDevices, "sw0")
			_, err := Devices()
			return err
		}},
		{"OpenSoft on an address in use", ErrUnavailable, func() error {
			_, err := OpenSoft(SoftConfig{Addr: a.gid.Addr()})
			return err
		}},
		{"OpenSoft without an address", ErrInvalidAttr, func() error { _, err := OpenSoft(SoftConfig{}); return err }},
		{"QueryPort of port 2", ErrInvalidPort, func() error { _, err := a.dev.QueryPort(2); return err }},
		{"QueryGID past the table", ErrInvalidGID, func() error { _, err := a.dev.QueryGID(1, 5); return err }},
		{"AllocPD after Device.Close", ErrClosed, func() error { _, err := closedDev.AllocPD(); return err }},
		{"CreateCQ after Device.Close", ErrClosed, func() error { _, err := closedDev.CreateCQ(8, nil); return err }},
		{"CreateCQ of depth 0", ErrInvalidAttr, func() error { _, err := a.dev.CreateCQ(0, nil); return err }},
		{"RegMR of no memory", ErrInvalidAttr, func() error { _, err := a.pd.RegMR(nil, AccessLocalWrite); return err }},
		{"RegMR remote write without local write", ErrInvalidAttr, func() error {
			_, err := a.pd.RegMR(make([]byte, 8), AccessRemoteWrite)
			return err
		}},
		{"RegMR after PD.Close", ErrClosed, func() error { _, err := pd2.RegMR(make([]byte, 8), AccessLocalWrite); return err }},
		{"AllocMW after PD.Close", ErrClosed, func() error { _, err := pd2.AllocMW(MWType1); return err }},
		{"PD.Close while in use", ErrBusy, a.pd.Close},
		{"CQ.Close while a QP uses it", ErrBusy, a.cq.Close},
		{"CreateQP without CQs", ErrInvalidAttr, func() error { _, err := a.pd.CreateQP(QPInitAttr{Type: QPTypeRC}); return err }},
		{"CreateQP with another device's CQ", ErrWrongDevice, func() error {
			_, err := a.pd.CreateQP(QPInitAttr{Type: QPTypeRC, SendCQ: b.cq, RecvCQ: a.cq})
			return err
		}},
		{"CreateQP beyond the device's limits", ErrLimit, func() error {
			_, err := a.pd.CreateQP(QPInitAttr{Type: QPTypeRC, SendCQ: a.cq, RecvCQ: a.cq, Cap: QPCap{MaxSendWR: 1 << 30}})
			return err
		}},
		{"Modify RESET -> RTS", ErrInvalidState, func() error { return rc.Modify(&QPAttr{State: QPStateRTS}, QPAttrState) }},
		{"Modify to INIT without a port", ErrMissingAttr, func() error {
			return rc.Modify(&QPAttr{State: QPStateInit}, QPAttrState|QPAttrPKeyIndex|QPAttrAccessFlags)
		}},
		{"Modify to INIT with a Q_Key on RC", ErrExtraAttr, func() error {
			return rc.Modify(&QPAttr{State: QPStateInit, Port: 1}, QPAttrState|QPAttrPKeyIndex|QPAttrPort|QPAttrAccessFlags|QPAttrQKey)
		}},
		{"Modify to port 2", ErrInvalidPort, func() error {
			return rc.Modify(&QPAttr{State: QPStateInit, Port: 2}, QPAttrState|QPAttrPKeyIndex|QPAttrPort|QPAttrAccessFlags)
		}},
		{"PostSend in RESET", ErrQPState, func() error { return rc.PostSend(SendWR{Opcode: WRSend}) }},
		{"PostRecv in RESET", ErrQPState, func() error { return rc.PostRecv(RecvWR{}) }},
		{"PostSend after QP.Close", ErrClosed, func() error { return closedQP.PostSend(SendWR{Opcode: WRSend}) }},
		{"PostRecv after QP.Close", ErrClosed, func() error { return closedQP.PostRecv(RecvWR{}) }},
		{"Modify after QP.Close", ErrClosed, func() error { return closedQP.Modify(&QPAttr{State: QPStateErr}, QPAttrState) }},
		{"PostSend with too many SGEs", ErrInvalidAttr, func() error { return full.PostSend(SendWR{Opcode: WRSend, SGL: make([]SGE, 5)}) }},
		{"PostRecv with too many SGEs", ErrInvalidAttr, func() error { return full.PostRecv(RecvWR{SGL: make([]SGE, 5)}) }},
		{"BindMW naming a nil region", ErrInvalidAttr, func() error {
			_, err := busyQP.BindMW(mw1, 1, 0, MWBind{MR: (*MR)(nil), Length: 8})
			return err
		}},
		{"BIND_MW naming a nil region", ErrInvalidAttr, func() error {
			return full.PostSend(SendWR{Opcode: WRBindMW, Bind: &MWBindWR{MW: mw, RKey: IncRKey(mw.RKey()),
				MWBind: MWBind{MR: (*MR)(nil), Length: 8}}})
		}},
		{"PostSend into a full send queue", ErrQueueFull, func() error { return full.PostSend(fill...) }},
		{"AllocMW of type 3", ErrInvalidAttr, func() error { _, err := a.pd.AllocMW(3); return err }},
		{"BindMW of a type 2 window", ErrInvalidAttr, func() error {
			_, err := busyQP.BindMW(mw, 1, 0, MWBind{MR: mr})
			return err
		}},
		{"SRQ.Arm at max_wr", ErrInvalidAttr, func() error { return srq.Arm(8) }},
		{"CreateAH without a GID", ErrInvalidAttr, func() error { _, err := a.pd.CreateAH(AHAttr{Port: 1}); return err }},
		{"CompChannel.Wait after Close", ErrClosed, func() error { _, err := ch.Wait(context.Background()); return err }},
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
	qp := a.qp(t, QPTypeRC)
	if err := qp.Modify(&QPAttr{State: QPStateInit, Port: 1, AccessFlags: allAccess},
		QPAttrState|QPAttrPKeyIndex|QPAttrPort|QPAttrAccessFlags); err != nil {
		t.Fatal(err)
	}
	err := qp.PostRecv(RecvWR{ID: 1}, RecvWR{ID: 2, SGL: make([]SGE, 5)})
	var pe *PostError
	if !errors.As(err, &pe) || pe.Index != 1 || !errors.Is(err, ErrInvalidAttr) {
		t.Fatalf("PostRecv = %v, want a *PostError for request 1 matching ErrInvalidAttr", err)
	}
	if got := err.Error(); got != "verbs: work request 1: too many scatter/gather elements" {
		t.Errorf("text %q", got)
	}
}

// Package softtest is test help for the software device driven through package verbs:
// a host (a device with a PD and CQs on a loopback address of its own), QPs brought to
// RTS as rc_pingpong does, connected pairs, and waits for completions. The tests of
// verbs and of internal/engine build their "machines" with it.
package softtest

import (
	"math/rand/v2"
	"net/netip"
	"testing"
	"time"

	"github.com/goverbs/goverbs/internal/testaddr"
	"github.com/goverbs/goverbs/verbs"
)

// Host is one software device with a PD and CQs, the way a test builds a "machine".
type Host struct {
	Dev    *verbs.Device
	PD     *verbs.PD
	CQ     *verbs.CQ // the send CQ of the QPs QP makes
	RCQ    *verbs.CQ // their receive CQ
	GID    verbs.GID
	Closed bool // for tests that close Dev themselves
}

// NewHost opens a host on an address of block b that no other process holds: test
// binaries of several packages (and several people) run at once on one machine.
func NewHost(t testing.TB, b testaddr.Block) *Host {
	t.Helper()
	return NewHostCfg(t, b, verbs.SoftConfig{})
}

// NewHostCfg opens a host as cfg says; without an address or a Conn it binds a free
// address of block b, as NewHost does. The device closes when the test ends.
func NewHostCfg(t testing.TB, b testaddr.Block, cfg verbs.SoftConfig) *Host {
	t.Helper()
	var dev *verbs.Device
	var err error
	if cfg.Addr.IsValid() || cfg.Conn != nil {
		if dev, err = verbs.OpenSoft(cfg); err != nil {
			t.Fatalf("OpenSoft %v: %v", cfg.Addr, err)
		}
	} else {
		dev = testaddr.Open(t, b, func(a netip.Addr) (*verbs.Device, error) {
			c := cfg
			c.Addr = a
			return verbs.OpenSoft(c)
		})
	}
	h := &Host{Dev: dev}
	t.Cleanup(func() { dev.Close() })
	if h.PD, err = dev.AllocPD(); err != nil {
		t.Fatal(err)
	}
	if h.CQ, err = dev.CreateCQ(4096, nil); err != nil {
		t.Fatal(err)
	}
	if h.RCQ, err = dev.CreateCQ(4096, nil); err != nil {
		t.Fatal(err)
	}
	if h.GID, err = dev.QueryGID(1, 0); err != nil {
		t.Fatal(err)
	}
	return h
}

// QP creates a QP of type typ on the host's PD and CQs, in RESET.
func (h *Host) QP(t testing.TB, typ verbs.QPType) *verbs.QP {
	t.Helper()
	qp, err := h.PD.CreateQP(verbs.QPInitAttr{
		Type: typ, SendCQ: h.CQ, RecvCQ: h.RCQ,
		Cap: verbs.QPCap{MaxSendWR: 256, MaxRecvWR: 256, MaxSendSGE: 4, MaxRecvSGE: 4, MaxInline: 256},
	})
	if err != nil {
		t.Fatal(err)
	}
	return qp
}

// MR registers n fresh bytes with access.
func (h *Host) MR(t testing.TB, n int, access verbs.Access) *verbs.MR {
	t.Helper()
	mr, err := h.PD.RegMR(make([]byte, n), access)
	if err != nil {
		t.Fatal(err)
	}
	return mr
}

// AllAccess is every access right a region can give.
const AllAccess = verbs.AccessLocalWrite | verbs.AccessRemoteWrite | verbs.AccessRemoteRead | verbs.AccessRemoteAtomic

// RCParams are what Connect gives a QP on its way to RTS.
type RCParams struct {
	MTU                  verbs.MTU
	Timeout, Retry, RNR  uint8
	MinRNR               uint8
	RdAtomic, DestRdAtom uint8
	Access               verbs.Access
}

// DefaultRC is rc_pingpong's defaults (FACTS.md), with a short timeout for tests.
func DefaultRC() RCParams {
	return RCParams{MTU: verbs.MTU1024, Timeout: 14, Retry: 7, RNR: 7, MinRNR: 1, RdAtomic: 16, DestRdAtom: 16, Access: AllAccess}
}

// Connect brings a QP from RESET to RTS towards (gid, remoteQPN), like rc_pingpong: rq
// is the receive PSN, sq the send PSN.
func Connect(t testing.TB, qp *verbs.QP, p RCParams, gid verbs.GID, remoteQPN, rq, sq uint32) {
	t.Helper()
	if err := qp.Modify(&verbs.QPAttr{State: verbs.QPStateInit, Port: 1, AccessFlags: p.Access},
		verbs.QPAttrState|verbs.QPAttrPKeyIndex|verbs.QPAttrPort|verbs.QPAttrAccessFlags); err != nil {
		t.Fatal("INIT:", err)
	}
	rtr := &verbs.QPAttr{State: verbs.QPStateRTR, PathMTU: p.MTU, DestQPN: remoteQPN, RQPSN: rq,
		MaxDestRdAtomic: p.DestRdAtom, MinRNRTimer: p.MinRNR, AH: verbs.AHAttr{DGID: gid, Port: 1, HopLimit: 64}}
	mask := verbs.QPAttrState | verbs.QPAttrAV | verbs.QPAttrPathMTU | verbs.QPAttrDestQPN | verbs.QPAttrRQPSN
	if typ := qp.Type(); typ == verbs.QPTypeRC || typ == verbs.QPTypeXRCRecv { // a responder's
		mask |= verbs.QPAttrMaxDestRdAtomic | verbs.QPAttrMinRNRTimer
	}
	if err := qp.Modify(rtr, mask); err != nil {
		t.Fatal("RTR:", err)
	}
	rts := &verbs.QPAttr{State: verbs.QPStateRTS, SQPSN: sq, Timeout: p.Timeout, RetryCnt: p.Retry, RNRRetry: p.RNR, MaxRdAtomic: p.RdAtomic}
	mask = verbs.QPAttrState | verbs.QPAttrSQPSN
	switch qp.Type() {
	case verbs.QPTypeRC, verbs.QPTypeXRCSend: // a requester's
		mask |= verbs.QPAttrTimeout | verbs.QPAttrRetryCnt | verbs.QPAttrRNRRetry | verbs.QPAttrMaxQPRdAtomic
	case verbs.QPTypeXRCRecv:
		mask |= verbs.QPAttrTimeout
	}
	if err := qp.Modify(rts, mask); err != nil {
		t.Fatal("RTS:", err)
	}
}

// Pair is two connected QPs on two hosts.
type Pair struct {
	A, B   *Host
	QA, QB *verbs.QP
}

// NewPair connects a QP of a to a QP of b.
func NewPair(t testing.TB, a, b *Host, typ verbs.QPType, p RCParams) *Pair {
	t.Helper()
	qa, qb := a.QP(t, typ), b.QP(t, typ)
	Connect(t, qa, p, b.GID, qb.QPN(), 0x100, 0xabc000)
	Connect(t, qb, p, a.GID, qa.QPN(), 0xabc000, 0x100)
	return &Pair{A: a, B: b, QA: qa, QB: qb}
}

// UDQP is a UD QP of h in RTS with Q_Key qkey.
func UDQP(t testing.TB, h *Host, qkey uint32) *verbs.QP {
	t.Helper()
	qp := h.QP(t, verbs.QPTypeUD)
	must := func(err error) {
		if err != nil {
			t.Fatal(err)
		}
	}
	must(qp.Modify(&verbs.QPAttr{State: verbs.QPStateInit, Port: 1, QKey: qkey}, verbs.QPAttrState|verbs.QPAttrPKeyIndex|verbs.QPAttrPort|verbs.QPAttrQKey))
	must(qp.Modify(&verbs.QPAttr{State: verbs.QPStateRTR}, verbs.QPAttrState))
	must(qp.Modify(&verbs.QPAttr{State: verbs.QPStateRTS, SQPSN: 0x55}, verbs.QPAttrState|verbs.QPAttrSQPSN))
	return qp
}

// WaitWC polls cq until n completions arrived or the deadline passes.
func WaitWC(t testing.TB, cq *verbs.CQ, n int, within time.Duration) []verbs.WC {
	t.Helper()
	return WaitWCFunc(t, cq, n, within, nil, nil)
}

// WaitWCFunc is WaitWC with callbacks, either of which may be nil: polled after every
// poll with the count so far, each for every completion.
func WaitWCFunc(t testing.TB, cq *verbs.CQ, n int, within time.Duration, polled func(done int), each func(verbs.WC)) []verbs.WC {
	t.Helper()
	out := make([]verbs.WC, 0, n)
	buf := make([]verbs.WC, 64)
	deadline := time.Now().Add(within)
	for len(out) < n {
		k, err := cq.Poll(buf[:min(len(buf), n-len(out))])
		if err != nil {
			t.Fatalf("poll: %v", err)
		}
		if each != nil {
			for _, wc := range buf[:k] {
				each(wc)
			}
		}
		out = append(out, buf[:k]...)
		if polled != nil {
			polled(len(out))
		}
		if k == 0 {
			if time.Now().After(deadline) {
				t.Fatalf("got %d of %d completions within %v: %+v", len(out), n, within, out)
			}
			time.Sleep(20 * time.Microsecond)
		}
	}
	return out
}

// ExpectStatus waits for one completion on cq and checks its ID and status.
func ExpectStatus(t testing.TB, cq *verbs.CQ, id uint64, want verbs.WCStatus) verbs.WC {
	t.Helper()
	wc := WaitWC(t, cq, 1, 5*time.Second)[0]
	if wc.ID != id || wc.Status != want {
		t.Fatalf("completion %+v (%v), want wr %d with %v", wc, wc.Status, id, want)
	}
	return wc
}

// WaitState waits until qp is in state want.
func WaitState(t testing.TB, qp *verbs.QP, want verbs.QPState) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for qp.State() != want {
		if time.Now().After(deadline) {
			t.Fatalf("QP %#x in %v, want %v", qp.QPN(), qp.State(), want)
		}
		time.Sleep(100 * time.Microsecond)
	}
}

// Fill fills b with bytes drawn from seed.
func Fill(b []byte, seed uint64) {
	r := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	for i := range b {
		b[i] = byte(r.Uint32())
	}
}

package engine_test

import (
	"net/netip"
	"testing"
	"time"

	"github.com/goverbs/goverbs/internal/engine"
	"github.com/goverbs/goverbs/internal/testaddr"
	"github.com/goverbs/goverbs/verbs"
)

// host is one software device with a PD and CQs, the way a test builds a "machine".
type host struct {
	dev    *verbs.Device
	pd     *verbs.PD
	cq     *verbs.CQ
	rcq    *verbs.CQ
	gid    verbs.GID
	closed bool
}

// newHost opens a host on a loopback address no other process holds: test binaries of
// several packages (and several people) run at once on one machine.
func newHost(t testing.TB) *host {
	t.Helper()
	return newHostCfg(t, verbs.SoftConfig{})
}

// newHostAt opens a host on addr, for the tests that need a particular address (an IPv6
// address they added to lo).
func newHostAt(t testing.TB, addr string) *host {
	t.Helper()
	return newHostCfg(t, verbs.SoftConfig{Addr: netip.MustParseAddr(addr)})
}

// newHostCfg opens a host as cfg says; without an address or a Conn it binds a free
// loopback address, as newHost does.
func newHostCfg(t testing.TB, cfg verbs.SoftConfig) *host {
	t.Helper()
	var dev *verbs.Device
	var err error
	if cfg.Addr.IsValid() || cfg.Conn != nil {
		if dev, err = verbs.OpenSoft(cfg); err != nil {
			t.Fatalf("OpenSoft %v: %v", cfg.Addr, err)
		}
	} else {
		dev = testaddr.Open(t, testaddr.Engine, func(a netip.Addr) (*verbs.Device, error) {
			c := cfg
			c.Addr = a
			return verbs.OpenSoft(c)
		})
	}
	h := &host{dev: dev}
	t.Cleanup(func() { dev.Close() })
	if h.pd, err = dev.AllocPD(); err != nil {
		t.Fatal(err)
	}
	if h.cq, err = dev.CreateCQ(4096, nil); err != nil {
		t.Fatal(err)
	}
	if h.rcq, err = dev.CreateCQ(4096, nil); err != nil {
		t.Fatal(err)
	}
	if h.gid, err = dev.QueryGID(1, 0); err != nil {
		t.Fatal(err)
	}
	return h
}

func (h *host) qp(t testing.TB, typ verbs.QPType) *verbs.QP {
	t.Helper()
	qp, err := h.pd.CreateQP(verbs.QPInitAttr{
		Type: typ, SendCQ: h.cq, RecvCQ: h.rcq,
		Cap: verbs.QPCap{MaxSendWR: 256, MaxRecvWR: 256, MaxSendSGE: 4, MaxRecvSGE: 4, MaxInline: 256},
	})
	if err != nil {
		t.Fatal(err)
	}
	return qp
}

func (h *host) mr(t testing.TB, n int, access verbs.Access) *verbs.MR {
	t.Helper()
	mr, err := h.pd.RegMR(make([]byte, n), access)
	if err != nil {
		t.Fatal(err)
	}
	return mr
}

const allAccess = verbs.AccessLocalWrite | verbs.AccessRemoteWrite | verbs.AccessRemoteRead | verbs.AccessRemoteAtomic

// rcParams are the rc_pingpong defaults (FACTS.md), with a short timeout for tests.
type rcParams struct {
	mtu                  verbs.MTU
	timeout, retry, rnr  uint8
	minRNR               uint8
	rdAtomic, destRdAtom uint8
	access               verbs.Access
}

func defaultRC() rcParams {
	return rcParams{mtu: verbs.MTU1024, timeout: 14, retry: 7, rnr: 7, minRNR: 1, rdAtomic: 16, destRdAtom: 16, access: allAccess}
}

// connect brings a QP from RESET to RTS towards (gid, qpn), like rc_pingpong.
func connect(t testing.TB, qp *verbs.QP, p rcParams, gid verbs.GID, remoteQPN, rq, sq uint32) {
	t.Helper()
	if err := qp.Modify(&verbs.QPAttr{State: verbs.QPStateInit, Port: 1, AccessFlags: p.access},
		verbs.QPAttrState|verbs.QPAttrPKeyIndex|verbs.QPAttrPort|verbs.QPAttrAccessFlags); err != nil {
		t.Fatal("INIT:", err)
	}
	rtr := &verbs.QPAttr{State: verbs.QPStateRTR, PathMTU: p.mtu, DestQPN: remoteQPN, RQPSN: rq,
		MaxDestRdAtomic: p.destRdAtom, MinRNRTimer: p.minRNR, AH: verbs.AHAttr{DGID: gid, Port: 1, HopLimit: 64}}
	mask := verbs.QPAttrState | verbs.QPAttrAV | verbs.QPAttrPathMTU | verbs.QPAttrDestQPN | verbs.QPAttrRQPSN
	if qp.Type() == verbs.QPTypeRC {
		mask |= verbs.QPAttrMaxDestRdAtomic | verbs.QPAttrMinRNRTimer
	}
	if err := qp.Modify(rtr, mask); err != nil {
		t.Fatal("RTR:", err)
	}
	rts := &verbs.QPAttr{State: verbs.QPStateRTS, SQPSN: sq, Timeout: p.timeout, RetryCnt: p.retry, RNRRetry: p.rnr, MaxRdAtomic: p.rdAtomic}
	mask = verbs.QPAttrState | verbs.QPAttrSQPSN
	if qp.Type() == verbs.QPTypeRC {
		mask |= verbs.QPAttrTimeout | verbs.QPAttrRetryCnt | verbs.QPAttrRNRRetry | verbs.QPAttrMaxQPRdAtomic
	}
	if err := qp.Modify(rts, mask); err != nil {
		t.Fatal("RTS:", err)
	}
}

// pair is two connected QPs on two hosts.
type pair struct {
	a, b   *host
	qa, qb *verbs.QP
}

func newPair(t testing.TB, a, b *host, typ verbs.QPType, p rcParams) *pair {
	t.Helper()
	qa, qb := a.qp(t, typ), b.qp(t, typ)
	connect(t, qa, p, b.gid, qb.QPN(), 0x100, 0xabc000)
	connect(t, qb, p, a.gid, qa.QPN(), 0xabc000, 0x100)
	return &pair{a: a, b: b, qa: qa, qb: qb}
}

// waitWC polls cq until n completions arrived or the deadline passes.
func waitWC(t testing.TB, cq *verbs.CQ, n int, within time.Duration) []verbs.WC {
	t.Helper()
	out := make([]verbs.WC, 0, n)
	buf := make([]verbs.WC, 64)
	deadline := time.Now().Add(within)
	for len(out) < n {
		k, err := cq.Poll(buf[:min(len(buf), n-len(out))])
		if err != nil {
			t.Fatalf("poll: %v", err)
		}
		out = append(out, buf[:k]...)
		if k == 0 {
			if time.Now().After(deadline) {
				t.Fatalf("got %d of %d completions within %v: %+v", len(out), n, within, out)
			}
			time.Sleep(20 * time.Microsecond)
		}
	}
	return out
}

// debugA and debugB describe the transport state of the pair's QPs (engine.DebugQP).
func (p *pair) debugA() string { return engine.DebugQP(p.a.gid, p.qa.QPN()) }
func (p *pair) debugB() string { return engine.DebugQP(p.b.gid, p.qb.QPN()) }

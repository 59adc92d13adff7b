package verbs

import (
	"math/rand/v2"
	"net/netip"
	"testing"
	"time"

	"github.com/goverbs/goverbs/internal/testaddr"
)

// host is one software device with a PD and CQs, the way a test builds a "machine".
type host struct {
	dev    *Device
	pd     *PD
	cq     *CQ
	rcq    *CQ
	gid    GID
	closed bool
}

// newHost opens a host on a loopback address no other process holds: test binaries of
// several packages (and several people) run at once on one machine.
func newHost(t testing.TB) *host {
	t.Helper()
	return newHostCfg(t, SoftConfig{})
}

// newHostAt opens a host on addr, for the tests that need a particular address (an IPv6
// address they added to lo).
func newHostAt(t testing.TB, addr string) *host {
	t.Helper()
	return newHostCfg(t, SoftConfig{Addr: netip.MustParseAddr(addr)})
}

// newHostCfg opens a host as cfg says; without an address or a Conn it binds a free
// loopback address, as newHost does.
func newHostCfg(t testing.TB, cfg SoftConfig) *host {
	t.Helper()
	var dev *Device
	var err error
	if cfg.Addr.IsValid() || cfg.Conn != nil {
		if dev, err = OpenSoft(cfg); err != nil {
			t.Fatalf("OpenSoft %v: %v", cfg.Addr, err)
		}
	} else {
		dev = testaddr.Open(t, testaddr.Verbs, func(a netip.Addr) (*Device, error) {
			c := cfg
			c.Addr = a
			return OpenSoft(c)
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

func (h *host) qp(t testing.TB, typ QPType) *QP {
	t.Helper()
	qp, err := h.pd.CreateQP(QPInitAttr{
		Type: typ, SendCQ: h.cq, RecvCQ: h.rcq,
		Cap: QPCap{MaxSendWR: 256, MaxRecvWR: 256, MaxSendSGE: 4, MaxRecvSGE: 4, MaxInline: 256},
	})
	if err != nil {
		t.Fatal(err)
	}
	return qp
}

func (h *host) mr(t testing.TB, n int, access Access) *MR {
	t.Helper()
	mr, err := h.pd.RegMR(make([]byte, n), access)
	if err != nil {
		t.Fatal(err)
	}
	return mr
}

const allAccess = AccessLocalWrite | AccessRemoteWrite | AccessRemoteRead | AccessRemoteAtomic

// rcParams are the rc_pingpong defaults (FACTS.md), with a short timeout for tests.
type rcParams struct {
	mtu                  MTU
	timeout, retry, rnr  uint8
	minRNR               uint8
	rdAtomic, destRdAtom uint8
	access               Access
}

func defaultRC() rcParams {
	return rcParams{mtu: MTU1024, timeout: 14, retry: 7, rnr: 7, minRNR: 1, rdAtomic: 16, destRdAtom: 16, access: allAccess}
}

// connect brings a QP from RESET to RTS towards (gid, qpn), like rc_pingpong.
func connect(t testing.TB, qp *QP, p rcParams, gid GID, remoteQPN, rq, sq uint32) {
	t.Helper()
	if err := qp.Modify(&QPAttr{State: QPStateInit, Port: 1, AccessFlags: p.access},
		QPAttrState|QPAttrPKeyIndex|QPAttrPort|QPAttrAccessFlags); err != nil {
		t.Fatal("INIT:", err)
	}
	rtr := &QPAttr{State: QPStateRTR, PathMTU: p.mtu, DestQPN: remoteQPN, RQPSN: rq,
		MaxDestRdAtomic: p.destRdAtom, MinRNRTimer: p.minRNR, AH: AHAttr{DGID: gid, Port: 1, HopLimit: 64}}
	mask := QPAttrState | QPAttrAV | QPAttrPathMTU | QPAttrDestQPN | QPAttrRQPSN
	if qp.Type() == QPTypeRC {
		mask |= QPAttrMaxDestRdAtomic | QPAttrMinRNRTimer
	}
	if err := qp.Modify(rtr, mask); err != nil {
		t.Fatal("RTR:", err)
	}
	rts := &QPAttr{State: QPStateRTS, SQPSN: sq, Timeout: p.timeout, RetryCnt: p.retry, RNRRetry: p.rnr, MaxRdAtomic: p.rdAtomic}
	mask = QPAttrState | QPAttrSQPSN
	if qp.Type() == QPTypeRC {
		mask |= QPAttrTimeout | QPAttrRetryCnt | QPAttrRNRRetry | QPAttrMaxQPRdAtomic
	}
	if err := qp.Modify(rts, mask); err != nil {
		t.Fatal("RTS:", err)
	}
}

// pair is two connected QPs on two hosts.
type pair struct {
	a, b   *host
	qa, qb *QP
}

func newPair(t testing.TB, a, b *host, typ QPType, p rcParams) *pair {
	t.Helper()
	qa, qb := a.qp(t, typ), b.qp(t, typ)
	connect(t, qa, p, b.gid, qb.QPN(), 0x100, 0xabc000)
	connect(t, qb, p, a.gid, qa.QPN(), 0xabc000, 0x100)
	return &pair{a: a, b: b, qa: qa, qb: qb}
}

// waitWC polls cq until n completions arrived or the deadline passes.
func waitWC(t testing.TB, cq *CQ, n int, within time.Duration) []WC {
	t.Helper()
	out := make([]WC, 0, n)
	buf := make([]WC, 64)
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

// expectStatus waits for one completion on cq and checks its ID and status.
func expectStatus(t *testing.T, cq *CQ, id uint64, want WCStatus) WC {
	t.Helper()
	wc := waitWC(t, cq, 1, 5*time.Second)[0]
	if wc.ID != id || wc.Status != want {
		t.Fatalf("completion %+v (%v), want wr %d with %v", wc, wc.Status, id, want)
	}
	return wc
}

// fill fills b with bytes drawn from seed.
func fill(b []byte, seed uint64) {
	r := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	for i := range b {
		b[i] = byte(r.Uint32())
	}
}

// udQP is a UD QP of h in RTS with Q_Key qkey.
func udQP(t *testing.T, h *host, qkey uint32) *QP {
	qp := h.qp(t, QPTypeUD)
	must := func(err error) {
		if err != nil {
			t.Fatal(err)
		}
	}
	must(qp.Modify(&QPAttr{State: QPStateInit, Port: 1, QKey: qkey}, QPAttrState|QPAttrPKeyIndex|QPAttrPort|QPAttrQKey))
	must(qp.Modify(&QPAttr{State: QPStateRTR}, QPAttrState))
	must(qp.Modify(&QPAttr{State: QPStateRTS, SQPSN: 0x55}, QPAttrState|QPAttrSQPSN))
	return qp
}

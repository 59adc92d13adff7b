//go:build ibverbs

package ibverbs_test

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/goverbs/goverbs/verbs"
	"github.com/goverbs/goverbs/verbs/ibverbs"
)

// The tests run through package verbs against one device: GOVERBS_TEST_DEVICE names it
// (rxe0, mlx5_0; a software device such as sw0 also works, which checks the tests
// themselves), else the first device the ibverbs provider lists; with none they skip.
// GOVERBS_TEST_GID picks the GID index, else the first IPv4 RoCE v2 GID. Every test
// connects QPs of the one device to each other: rxe and RNICs loop such traffic back.

// waitFor bounds every wait: the rxe VM runs under emulation and is slow.
const waitFor = 20 * time.Second

type env struct {
	dev    *verbs.Device
	pd     *verbs.PD
	port   uint8
	gidIdx int
	gid    verbs.GID
	mtu    verbs.MTU
}

func testDevice(t testing.TB) string {
	if name := os.Getenv("GOVERBS_TEST_DEVICE"); name != "" {
		return name
	}
	list, err := verbs.Devices()
	if err != nil {
		t.Fatalf("Devices: %v", err)
	}
	for _, d := range list {
		if d.Provider == ibverbs.ProviderName {
			return d.Name
		}
	}
	t.Skip("no RDMA device: the kernel lists none (set GOVERBS_TEST_DEVICE to choose one)")
	return ""
}

func setup(t testing.TB) *env {
	t.Helper()
	dev, err := verbs.Open(testDevice(t))
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { dev.Close() })
	e := &env{dev: dev, port: 1}
	pa, err := dev.QueryPort(1)
	if err != nil {
		t.Fatal(err)
	}
	if pa.State != verbs.PortActive {
		t.Skipf("%s port 1 is %v", dev.Name(), pa.State)
	}
	e.mtu = min(pa.ActiveMTU, verbs.MTU1024)
	tbl, err := dev.GIDTable(1)
	if err != nil {
		t.Fatal(err)
	}
	e.gidIdx = -1
	if s := os.Getenv("GOVERBS_TEST_GID"); s != "" {
		if e.gidIdx, err = strconv.Atoi(s); err != nil {
			t.Fatalf("GOVERBS_TEST_GID=%q: %v", s, err)
		}
	} else {
		for _, g := range tbl {
			if g.GID.Addr().Is4() && (g.Type == "RoCE v2" || g.Type == "") {
				e.gidIdx = g.Index
				break
			}
		}
	}
	if e.gidIdx < 0 {
		t.Skipf("%s has no IPv4 RoCE v2 GID (set GOVERBS_TEST_GID)", dev.Name())
	}
	if e.gid, err = dev.QueryGID(1, e.gidIdx); err != nil {
		t.Fatal(err)
	}
	if e.pd, err = dev.AllocPD(); err != nil {
		t.Fatal(err)
	}
	return e
}

func (e *env) cq(t testing.TB, depth int, ch *verbs.CompChannel) *verbs.CQ {
	t.Helper()
	cq, err := e.dev.CreateCQ(depth, ch)
	if err != nil {
		t.Fatalf("CreateCQ: %v", err)
	}
	t.Cleanup(func() { cq.Close() })
	return cq
}

const allAccess = verbs.AccessLocalWrite | verbs.AccessRemoteWrite | verbs.AccessRemoteRead | verbs.AccessRemoteAtomic

func (e *env) mr(t testing.TB, n int, access verbs.Access) *verbs.MR {
	t.Helper()
	mr, err := e.pd.RegMR(make([]byte, n), access)
	if err != nil {
		t.Fatalf("RegMR: %v", err)
	}
	t.Cleanup(func() { mr.Close() })
	return mr
}

func (e *env) qp(t testing.TB, typ verbs.QPType, scq, rcq *verbs.CQ, srq *verbs.SRQ) *verbs.QP {
	t.Helper()
	qp, err := e.pd.CreateQP(verbs.QPInitAttr{Type: typ, SendCQ: scq, RecvCQ: rcq, SRQ: srq,
		Cap: verbs.QPCap{MaxSendWR: 128, MaxRecvWR: 128, MaxSendSGE: 2, MaxRecvSGE: 2}})
	if err != nil {
		t.Fatalf("CreateQP %v: %v", typ, err)
	}
	t.Cleanup(func() { qp.Close() })
	return qp
}

const testQKey = 0x11111111

// connect brings qp to RTS talking to the QP numbered remote on this device.
func (e *env) connect(t testing.TB, qp *verbs.QP, remote uint32) {
	t.Helper()
	typ := qp.Type()
	init := verbs.QPAttr{State: verbs.QPStateInit, Port: e.port, QKey: testQKey, AccessFlags: allAccess | verbs.AccessMWBind}
	mask := verbs.QPAttrState | verbs.QPAttrPKeyIndex | verbs.QPAttrPort
	switch typ {
	case verbs.QPTypeUD:
		mask |= verbs.QPAttrQKey
	case verbs.QPTypeUC:
		init.AccessFlags = verbs.AccessRemoteWrite | verbs.AccessMWBind
		mask |= verbs.QPAttrAccessFlags
	default:
		mask |= verbs.QPAttrAccessFlags
	}
	if err := qp.Modify(&init, mask); err != nil {
		t.Fatalf("%v to INIT: %v", typ, err)
	}
	rtr := verbs.QPAttr{State: verbs.QPStateRTR, PathMTU: e.mtu, DestQPN: remote, RQPSN: 100,
		MaxDestRdAtomic: 4, MinRNRTimer: 12,
		AH: verbs.AHAttr{DGID: e.gid, SGIDIndex: uint8(e.gidIdx), HopLimit: 64, Port: e.port}}
	mask = verbs.QPAttrState
	switch typ {
	case verbs.QPTypeRC, verbs.QPTypeXRCRecv:
		mask |= verbs.QPAttrAV | verbs.QPAttrPathMTU | verbs.QPAttrDestQPN | verbs.QPAttrRQPSN |
			verbs.QPAttrMaxDestRdAtomic | verbs.QPAttrMinRNRTimer
	case verbs.QPTypeUC, verbs.QPTypeXRCSend:
		mask |= verbs.QPAttrAV | verbs.QPAttrPathMTU | verbs.QPAttrDestQPN | verbs.QPAttrRQPSN
	}
	if err := qp.Modify(&rtr, mask); err != nil {
		t.Fatalf("%v to RTR: %v", typ, err)
	}
	rts := verbs.QPAttr{State: verbs.QPStateRTS, SQPSN: 100, Timeout: 14, RetryCnt: 7, RNRRetry: 7, MaxRdAtomic: 4}
	mask = verbs.QPAttrState | verbs.QPAttrSQPSN
	switch typ {
	case verbs.QPTypeRC, verbs.QPTypeXRCSend:
		mask |= verbs.QPAttrTimeout | verbs.QPAttrRetryCnt | verbs.QPAttrRNRRetry | verbs.QPAttrMaxQPRdAtomic
	case verbs.QPTypeXRCRecv:
		mask |= verbs.QPAttrTimeout
	}
	if err := qp.Modify(&rts, mask); err != nil {
		t.Fatalf("%v to RTS: %v", typ, err)
	}
}

// pair is two connected QPs of one type, each with its own CQ.
type pair struct {
	a, b     *verbs.QP
	acq, bcq *verbs.CQ
}

func (e *env) pair(t testing.TB, typ verbs.QPType) *pair {
	p := &pair{acq: e.cq(t, 256, nil), bcq: e.cq(t, 256, nil)}
	p.a = e.qp(t, typ, p.acq, p.acq, nil)
	p.b = e.qp(t, typ, p.bcq, p.bcq, nil)
	e.connect(t, p.a, p.b.QPN())
	e.connect(t, p.b, p.a.QPN())
	return p
}

// write8 is the data-path measurement's setup: an RC pair and the signaled WRITE of 8
// bytes from one 64-byte region to another that the benchmarks and the allocation test
// post, a QP to the other.
func (e *env) write8(t testing.TB) (*pair, verbs.SendWR) {
	p := e.pair(t, verbs.QPTypeRC)
	src := e.mr(t, 64, allAccess)
	dst := e.mr(t, 64, allAccess)
	return p, verbs.SendWR{ID: 1, Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled,
		SGL: []verbs.SGE{src.SGE(0, 8)}, RemoteAddr: dst.Addr(), RKey: dst.RKey()}
}

var errNoCompletion = errors.New("no completion before the deadline")

// pollOne spins on cq until one completion arrives in wcs[0] and returns an error
// unless it succeeded. Unlike waitWC it allocates nothing, so that it can run once per
// measured operation; it gives up at deadline, looking at the clock only now and then
// so as not to slow the spin.
func pollOne(cq *verbs.CQ, wcs []verbs.WC, deadline time.Time) error {
	for spins := 1; ; spins++ {
		n, err := cq.Poll(wcs[:1])
		if err != nil {
			return err
		}
		if n > 0 {
			if wcs[0].Status != verbs.WCSuccess {
				return fmt.Errorf("completion %+v (status %v)", wcs[0], wcs[0].Status)
			}
			return nil
		}
		if spins%1024 == 0 && time.Now().After(deadline) {
			return errNoCompletion
		}
	}
}

// waitWC polls until n completions arrived.
func waitWC(t testing.TB, cq *verbs.CQ, n int) []verbs.WC {
	t.Helper()
	out := make([]verbs.WC, 0, n)
	buf := make([]verbs.WC, 16)
	deadline := time.Now().Add(waitFor)
	for len(out) < n {
		k, err := cq.Poll(buf[:min(len(buf), n-len(out))])
		if err != nil {
			t.Fatalf("Poll: %v", err)
		}
		out = append(out, buf[:k]...)
		if k == 0 {
			if time.Now().After(deadline) {
				t.Fatalf("%d of %d completions after %v: %+v", len(out), n, waitFor, out)
			}
			time.Sleep(50 * time.Microsecond)
		}
	}
	return out
}

func wantWC(t testing.TB, wc verbs.WC, id uint64, op verbs.WCOpcode, n uint32) {
	t.Helper()
	if wc.Status != verbs.WCSuccess || wc.ID != id || wc.Opcode != op || wc.ByteLen != n && op != verbs.WCSend && op != verbs.WCRDMAWrite {
		t.Fatalf("completion %+v (status %v), want ID %d %v of %d bytes", wc, wc.Status, id, op, n)
	}
}

func wantErr(t testing.TB, err, kind error) {
	t.Helper()
	if !errors.Is(err, kind) {
		t.Fatalf("error %v, want one matching %v", err, kind)
	}
}

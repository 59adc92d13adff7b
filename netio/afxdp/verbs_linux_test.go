//go:build linux

package afxdp_test

import (
	"bytes"
	"encoding/binary"
	"net/netip"
	"testing"
	"time"

	"github.com/goverbs/goverbs/netio"
	"github.com/goverbs/goverbs/netio/afxdp"
	"github.com/goverbs/goverbs/verbs"
)

// host is a verbs device with a PD and a send and a receive CQ.
type host struct {
	dev      *verbs.Device
	pd       *verbs.PD
	cq, rcq  *verbs.CQ
	gid      verbs.GID
	xdp      *afxdp.Conn // when the device runs on AF_XDP
	busyPoll bool
	ns       string // the namespace it was opened in
}

// openHost opens a software device in namespace ns on addr: on AF_XDP (on ifname) when
// xdp, else on the UDP backend. Opening inside the namespace matters for both: the
// sockets are made there, and the device reads its MTU from the interface there.
func openHost(t testing.TB, ns, ifname string, addr netip.Addr, xdp, busy bool) *host {
	t.Helper()
	h := &host{busyPoll: busy, ns: ns}
	var err error
	in(t, ns, func() {
		cfg := verbs.SoftConfig{Name: "sw-" + ifname, Addr: addr, BusyPoll: busy}
		if xdp {
			if h.xdp, err = afxdp.Open(afxdp.Options{Addr: netip.AddrPortFrom(addr, 4791), Interface: ifname, BusyPoll: busy}); err != nil {
				return
			}
			cfg.Conn = h.xdp // the device owns it now
		}
		h.dev, err = verbs.OpenSoft(cfg)
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.dev.Close() })
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	h.pd, err = h.dev.AllocPD()
	must(err)
	h.cq, err = h.dev.CreateCQ(1024, nil)
	must(err)
	h.rcq, err = h.dev.CreateCQ(1024, nil)
	must(err)
	h.gid, err = h.dev.QueryGID(1, 0)
	must(err)
	return h
}

func (h *host) qp(t *testing.T, typ verbs.QPType) *verbs.QP {
	t.Helper()
	qp, err := h.pd.CreateQP(verbs.QPInitAttr{Type: typ, SendCQ: h.cq, RecvCQ: h.rcq,
		Cap: verbs.QPCap{MaxSendWR: 64, MaxRecvWR: 64, MaxSendSGE: 1, MaxRecvSGE: 1}})
	if err != nil {
		t.Fatal(err)
	}
	return qp
}

const access = verbs.AccessLocalWrite | verbs.AccessRemoteWrite | verbs.AccessRemoteRead | verbs.AccessRemoteAtomic

func (h *host) mr(t *testing.T, n int, seed byte) *verbs.MR {
	t.Helper()
	b := make([]byte, n)
	for i := range b {
		b[i] = seed + byte(i*7)
	}
	mr, err := h.pd.RegMR(b, access)
	if err != nil {
		t.Fatal(err)
	}
	return mr
}

// connect brings qp to RTS towards (gid, qpn) with rc_pingpong's settings.
func connect(t *testing.T, qp *verbs.QP, gid verbs.GID, qpn, rq, sq uint32) {
	t.Helper()
	rc := qp.Type() == verbs.QPTypeRC
	if err := qp.Modify(&verbs.QPAttr{State: verbs.QPStateInit, Port: 1, AccessFlags: access},
		verbs.QPAttrState|verbs.QPAttrPKeyIndex|verbs.QPAttrPort|verbs.QPAttrAccessFlags); err != nil {
		t.Fatal("INIT:", err)
	}
	mask := verbs.QPAttrState | verbs.QPAttrAV | verbs.QPAttrPathMTU | verbs.QPAttrDestQPN | verbs.QPAttrRQPSN
	if rc {
		mask |= verbs.QPAttrMaxDestRdAtomic | verbs.QPAttrMinRNRTimer
	}
	if err := qp.Modify(&verbs.QPAttr{State: verbs.QPStateRTR, PathMTU: verbs.MTU1024, DestQPN: qpn, RQPSN: rq,
		MaxDestRdAtomic: 16, MinRNRTimer: 1, AH: verbs.AHAttr{DGID: gid, Port: 1, HopLimit: 64}}, mask); err != nil {
		t.Fatal("RTR:", err)
	}
	mask = verbs.QPAttrState | verbs.QPAttrSQPSN
	if rc {
		mask |= verbs.QPAttrTimeout | verbs.QPAttrRetryCnt | verbs.QPAttrRNRRetry | verbs.QPAttrMaxQPRdAtomic
	}
	if err := qp.Modify(&verbs.QPAttr{State: verbs.QPStateRTS, SQPSN: sq, Timeout: 14, RetryCnt: 7, RNRRetry: 7, MaxRdAtomic: 16}, mask); err != nil {
		t.Fatal("RTS:", err)
	}
}

// wait polls cq for the completion of work request id and checks its status.
func wait(t *testing.T, cq *verbs.CQ, id uint64) verbs.WC {
	t.Helper()
	wc := make([]verbs.WC, 1)
	deadline := time.Now().Add(5 * time.Second)
	for {
		n, err := cq.Poll(wc)
		if err != nil {
			t.Fatal(err)
		}
		if n == 1 {
			if wc[0].ID != id || wc[0].Status != verbs.WCSuccess {
				t.Fatalf("completion %+v (%v), want work request %d, success", wc[0], wc[0].Status, id)
			}
			return wc[0]
		}
		if time.Now().After(deadline) {
			t.Fatalf("no completion for work request %d", id)
		}
		time.Sleep(20 * time.Microsecond)
	}
}

func post(t *testing.T, qp *verbs.QP, wr verbs.SendWR) {
	t.Helper()
	wr.Flags |= verbs.SendSignaled
	if err := qp.PostSend(wr); err != nil {
		t.Fatal(err)
	}
}

// TestVerbs runs RC, UC and UD traffic through the verbs API between a device on AF_XDP
// in namespace A and a device on the UDP backend in B (and both on AF_XDP), in the
// default and the busy-poll modes: SEND both ways, RDMA WRITE and READ of 64 KiB (64
// packets at MTU 1024), an atomic, UC SEND and WRITE with immediate, UD SEND both ways.
// Every packet AF_XDP sends must pass the peer's ICRC check as sent (Identification 0,
// not recovered).
func TestVerbs(t *testing.T) {
	for _, tc := range []struct {
		name       string
		bXDP, busy bool
	}{
		{"xdp-udp", false, false},
		{"xdp-udp-busypoll", false, true},
		{"xdp-xdp", true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := newTestNet(t, 1500)
			a := openHost(t, n.A, ifA, n.AddrA, true, tc.busy)
			b := openHost(t, n.B, ifB, n.AddrB, tc.bXDP, tc.busy)
			t.Run("RC", func(t *testing.T) { testRC(t, a, b) })
			t.Run("UC", func(t *testing.T) { testUC(t, a, b) })
			t.Run("UD", func(t *testing.T) { testUD(t, a, b) })
			for _, h := range []*host{a, b} {
				c := h.dev.Counters()
				if e := c.Get("rcvd_icrc_err"); e != 0 {
					t.Errorf("%s: %d ICRC errors", h.dev.Name(), e)
				}
			}
			if r := b.dev.Counters().Get("icrc_ipid_recovered"); r != 0 {
				t.Errorf("%d packets from AF_XDP passed the ICRC only with a recovered Identification", r)
			}
			// The device's counters carry the backend's: its mode and its packets.
			if c := a.dev.Counters(); c.Get("xdp_tx_pkts") == 0 || c.Get("xdp_zerocopy") != 0 {
				t.Errorf("%s: xdp_tx_pkts %d, xdp_zerocopy %d (veth has no zero-copy)", a.dev.Name(), c.Get("xdp_tx_pkts"), c.Get("xdp_zerocopy"))
			}
			s := a.xdp.Stats()
			t.Logf("%v: %+v", a.xdp, s)
			if s.RxMalformed != 0 || s.RxNotOurs != 0 || s.TxNoNeighbour != 0 || s.TxTooBig != 0 || s.RxPackets == 0 || s.TxPackets == 0 {
				t.Errorf("AF_XDP counters %+v", s)
			}
		})
	}
}

func testRC(t *testing.T, a, b *host) {
	qa, qb := a.qp(t, verbs.QPTypeRC), b.qp(t, verbs.QPTypeRC)
	connect(t, qa, b.gid, qb.QPN(), 0x100, 0xabc000)
	connect(t, qb, a.gid, qa.QPN(), 0xabc000, 0x100)
	const size = 64 << 10
	ma, mb := a.mr(t, size, 1), b.mr(t, size, 2)

	// SEND each way.
	for _, d := range []struct {
		from, to   *host
		qf, qt     *verbs.QP
		src, dst   *verbs.MR
		sendID, rx uint64
	}{{a, b, qa, qb, ma, mb, 10, 11}, {b, a, qb, qa, mb, ma, 12, 13}} {
		if err := d.qt.PostRecv(verbs.RecvWR{ID: d.rx, SGL: []verbs.SGE{d.dst.SGE(0, 4096)}}); err != nil {
			t.Fatal(err)
		}
		want := bytes.Clone(d.src.Buf()[:3000])
		post(t, d.qf, verbs.SendWR{ID: d.sendID, Opcode: verbs.WRSend, SGL: []verbs.SGE{d.src.SGE(0, 3000)}})
		wait(t, d.from.cq, d.sendID)
		if wc := wait(t, d.to.rcq, d.rx); wc.ByteLen != 3000 || !bytes.Equal(d.dst.Buf()[:3000], want) {
			t.Fatalf("RC SEND: %+v", wc)
		}
	}
	// WRITE 64 KiB from A into B, then READ it back into A elsewhere.
	src := a.mr(t, size, 3)
	post(t, qa, verbs.SendWR{ID: 20, Opcode: verbs.WRRDMAWrite, SGL: []verbs.SGE{src.SGE(0, size)}, RemoteAddr: mb.Addr(), RKey: mb.RKey()})
	wait(t, a.cq, 20)
	if !bytes.Equal(mb.Buf(), src.Buf()) {
		t.Fatal("RC WRITE 64 KiB: data differs")
	}
	back := a.mr(t, size, 4)
	post(t, qa, verbs.SendWR{ID: 21, Opcode: verbs.WRRDMARead, SGL: []verbs.SGE{back.SGE(0, size)}, RemoteAddr: mb.Addr(), RKey: mb.RKey()})
	wait(t, a.cq, 21)
	if !bytes.Equal(back.Buf(), src.Buf()) {
		t.Fatal("RC READ 64 KiB: data differs")
	}
	// B writes 64 KiB into A: the UDP backend's GSO runs arrive at AF_XDP as segments.
	src2 := b.mr(t, size, 5)
	post(t, qb, verbs.SendWR{ID: 22, Opcode: verbs.WRRDMAWrite, SGL: []verbs.SGE{src2.SGE(0, size)}, RemoteAddr: ma.Addr(), RKey: ma.RKey()})
	wait(t, b.cq, 22)
	if !bytes.Equal(ma.Buf(), src2.Buf()) {
		t.Fatal("RC WRITE 64 KiB into AF_XDP: data differs")
	}
	// Fetch-and-add on B's memory.
	binary.NativeEndian.PutUint64(mb.Buf()[:8], 40)
	post(t, qa, verbs.SendWR{ID: 23, Opcode: verbs.WRAtomicFetchAdd, SGL: []verbs.SGE{back.SGE(0, 8)},
		RemoteAddr: mb.Addr(), RKey: mb.RKey(), CompareAdd: 2})
	wait(t, a.cq, 23)
	if got, old := binary.NativeEndian.Uint64(mb.Buf()[:8]), binary.NativeEndian.Uint64(back.Buf()[:8]); got != 42 || old != 40 {
		t.Fatalf("fetch-and-add: memory %d, returned %d", got, old)
	}
}

func testUC(t *testing.T, a, b *host) {
	qa, qb := a.qp(t, verbs.QPTypeUC), b.qp(t, verbs.QPTypeUC)
	connect(t, qa, b.gid, qb.QPN(), 0x200, 0x300)
	connect(t, qb, a.gid, qa.QPN(), 0x300, 0x200)
	src, dst := a.mr(t, 8192, 6), b.mr(t, 8192, 0)
	qb.PostRecv(verbs.RecvWR{ID: 1, SGL: []verbs.SGE{dst.SGE(0, 8192)}})
	post(t, qa, verbs.SendWR{ID: 2, Opcode: verbs.WRSendWithImm, Imm: 0xfeed, SGL: []verbs.SGE{src.SGE(0, 3000)}})
	wait(t, a.cq, 2)
	if wc := wait(t, b.rcq, 1); wc.ByteLen != 3000 || wc.Imm != 0xfeed || !bytes.Equal(dst.Buf()[:3000], src.Buf()[:3000]) {
		t.Fatalf("UC SEND: %+v", wc)
	}
	qb.PostRecv(verbs.RecvWR{ID: 3})
	post(t, qa, verbs.SendWR{ID: 4, Opcode: verbs.WRRDMAWriteWithImm, Imm: 9, SGL: []verbs.SGE{src.SGE(0, 5000)}, RemoteAddr: dst.Addr(), RKey: dst.RKey()})
	wait(t, a.cq, 4)
	if wc := wait(t, b.rcq, 3); wc.Imm != 9 || wc.ByteLen != 5000 || !bytes.Equal(dst.Buf()[:5000], src.Buf()[:5000]) {
		t.Fatalf("UC WRITE with immediate: %+v", wc)
	}
}

// udQP creates a UD QP on h and brings it to RTS with the Q_Key.
func udQP(t *testing.T, h *host, qkey uint32) *verbs.QP {
	t.Helper()
	qp := h.qp(t, verbs.QPTypeUD)
	for _, m := range []struct {
		attr verbs.QPAttr
		mask verbs.QPAttrMask
	}{
		{verbs.QPAttr{State: verbs.QPStateInit, Port: 1, QKey: qkey}, verbs.QPAttrState | verbs.QPAttrPKeyIndex | verbs.QPAttrPort | verbs.QPAttrQKey},
		{verbs.QPAttr{State: verbs.QPStateRTR}, verbs.QPAttrState},
		{verbs.QPAttr{State: verbs.QPStateRTS, SQPSN: 0x55}, verbs.QPAttrState | verbs.QPAttrSQPSN},
	} {
		if err := qp.Modify(&m.attr, m.mask); err != nil {
			t.Fatal(err)
		}
	}
	return qp
}

func testUD(t *testing.T, a, b *host) {
	const qkey = 0x11111111
	qa, qb := udQP(t, a, qkey), udQP(t, b, qkey)
	for i, d := range []struct {
		from, to *host
		qf, qt   *verbs.QP
	}{{a, b, qa, qb}, {b, a, qb, qa}} {
		src, dst := d.from.mr(t, 1000, byte(i)), d.to.mr(t, 1000+verbs.GRHLen, 0)
		ah, err := d.from.pd.CreateAH(verbs.AHAttr{DGID: d.to.gid, Port: 1, HopLimit: 64})
		if err != nil {
			t.Fatal(err)
		}
		id := uint64(30 + 2*i)
		d.qt.PostRecv(verbs.RecvWR{ID: id + 1, SGL: []verbs.SGE{dst.SGE(0, dst.Len())}})
		post(t, d.qf, verbs.SendWR{ID: id, Opcode: verbs.WRSend, SGL: []verbs.SGE{src.SGE(0, 1000)}, AH: ah, RemoteQPN: d.qt.QPN(), RemoteQKey: qkey})
		wait(t, d.from.cq, id)
		if wc := wait(t, d.to.rcq, id+1); wc.ByteLen != verbs.GRHLen+1000 || wc.SrcQP != d.qf.QPN() ||
			!bytes.Equal(dst.Buf()[verbs.GRHLen:], src.Buf()) {
			t.Fatalf("UD SEND: %+v", wc)
		}
	}
}

var _ netio.Conn = (*afxdp.Conn)(nil)

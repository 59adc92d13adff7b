package engine

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"github.com/goverbs/goverbs/internal/congestion"
	"math/rand/v2"
	"net/netip"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"github.com/goverbs/goverbs/netio"
	"github.com/goverbs/goverbs/netio/netiotest"
	"github.com/goverbs/goverbs/verbs/driver"
	"github.com/goverbs/goverbs/wire"
)

// The fuzzed responder (issue 6): arbitrary datagrams, and mutations of valid packets of
// every opcode, go through a device's real receive loop while it has RC, UC and UD QPs
// with posted receives and outstanding requests of its own, and memory regions of every
// kind of right laid out in one arena with guard zones between them. After every input:
//
//   - nothing panicked;
//   - guard zones, unregistered memory, regions without remote-modify rights and the
//     region of another PD are unchanged, byte for byte;
//   - a region with remote write or atomic rights changed only inside the ranges named by
//     delivered WRITE FIRST/ONLY and atomic requests carrying its rkey, in bounds, with the
//     right it grants;
//   - completions are plausible (a SEND never reports more bytes than its WQE holds).
//
// Datagrams enter through a netiotest.Conn, whose Deliver hands the receive loop one batch
// at a time and returns only when the loop comes back for the next, so each check runs
// after the device has finished with the input (and sent that batch's ACKs). Addresses are simnet-style (127.0.200.x) and
// never reach a socket.

var (
	fuzzLocal = netip.MustParseAddrPort("127.0.200.1:4791")
	fuzzPeer  = netip.MustParseAddrPort("127.0.200.2:4791")
	fuzzOther = netip.MustParseAddrPort("127.0.200.3:4791")
	fuzzPort2 = netip.MustParseAddrPort("127.0.200.2:50000")
	fuzzV6    = netip.MustParseAddrPort("[fd00::2]:4791")
)

const (
	fuzzGuard    = 128
	fuzzPeerQPN  = 0x99
	fuzzQKey     = 0x11111111
	fuzzSQPSN    = 0x100
	fuzzRecvSize = 1024
)

// memSpan is one part of the arena.
type memSpan struct {
	name   string
	off, n int
	mr     *MR // nil: unregistered
	// scratch: local landing memory (receive buffers, the device's own READ and atomic
	// results) that inputs may legitimately overwrite anywhere.
	scratch bool
}

// arena is memory of every kind in one buffer, guard zones between the parts.
type arena struct {
	mem     []byte
	pattern []byte
	spans   []memSpan
	pd      *PD      // the PD of the QPs that packets reach
	remote  []target // what a relocated packet may aim at: W, R, A, O, then the windows' bank
	windows []*fuzzWindow
}

// target is something an rkey names: a memory region or a memory window.
type target interface {
	Addr() uint64
	RKey() uint32
}

// fuzzWindow is a memory window bound over part of region M.
type fuzzWindow struct {
	mw     *MW
	va     uint64
	n      int
	access driver.Access
}

func (w *fuzzWindow) Addr() uint64 { return w.va }
func (w *fuzzWindow) RKey() uint32 { return w.mw.RKey() }

// codec turns fuzz input into datagrams for one device (see the input encoding below).
type codec struct {
	local  netip.AddrPort    // the device
	srcs   [4]netip.AddrPort // the source selected by the control bits
	qps    [3]*QP            // RC, UC, UD targets
	remote []target          // W, R, A, O; with the rkey field's top bit: window 1, window 2, M, W
}

type fuzzRig struct {
	dev     *Device
	conn    *netiotest.Conn
	pd, pd2 *PD
	cq, rcq *CQ
	rc, uc  *QP
	ud      *QP
	arena
	codec
	wcs []driver.WC
}

var (
	rigOnce     sync.Once
	rigMu       sync.Mutex
	theRig      *fuzzRig
	rigErr      error
	viewRigOnce sync.Once
	viewRig     *fuzzRig
	viewRigErr  error
	shmRigOnce  sync.Once
	shmRig      *fuzzRig
	shmRigErr   error
)

// getRig returns the process's rig, building it on first use. Inputs run one at a time.
func getRig(t testing.TB) *fuzzRig {
	rigOnce.Do(func() { theRig, rigErr = newFuzzRig(false, false) })
	if rigErr != nil {
		t.Fatal(rigErr)
	}
	return theRig
}

// getViewRig returns a second rig whose Conn lends its datagrams in place
// (netiotest.Conn.Lend), as a same-host ring does: the receive path's view path
// (inputView) under the same inputs and the same oracle.
func getViewRig(t testing.TB) *fuzzRig {
	viewRigOnce.Do(func() { viewRig, viewRigErr = newFuzzRig(true, false) })
	if viewRigErr != nil {
		t.Fatal(viewRigErr)
	}
	return viewRig
}

// getSameHostRig returns a third rig whose Conn lends in place and marks every datagram
// as one that crossed a same-host ring (netiotest.Conn.MarkSameHost): the ICRC is not
// checked, so mutated datagrams meet every other check with nothing before it.
func getSameHostRig(t testing.TB) *fuzzRig {
	shmRigOnce.Do(func() { shmRig, shmRigErr = newFuzzRig(true, true) })
	if shmRigErr != nil {
		t.Fatal(shmRigErr)
	}
	return shmRig
}

func newFuzzRig(lend, sameHost bool) (*fuzzRig, error) {
	conn := netiotest.NewConn(fuzzLocal)
	if lend {
		conn.Lend()
	}
	if sameHost {
		conn.MarkSameHost()
	}
	// Congestion control and selective repeat on: hostile packets reach the CNP, CE and
	// SACK paths too (congestion.go, selective.go).
	dev, err := New(Config{Name: "fuzz", Conn: conn, MTU: wire.MTU1024,
		Congestion: congestion.PaperConfig(10e9), SelectiveRepeat: true})
	if err != nil {
		return nil, err
	}
	r := &fuzzRig{dev: dev, conn: conn, wcs: make([]driver.WC, 64)}
	if r.pd, err = dev.allocPD(); err != nil {
		return nil, err
	}
	if r.pd2, err = dev.allocPD(); err != nil {
		return nil, err
	}
	a, err := newArena(r.pd, r.pd2)
	if err != nil {
		return nil, err
	}
	r.arena = *a
	if r.cq, err = dev.newCQ(MaxCQE); err != nil {
		return nil, err
	}
	if r.rcq, err = dev.newCQ(MaxCQE); err != nil {
		return nil, err
	}
	mk := r.newQP
	if r.rc, err = mk(driver.QPTypeRC); err != nil {
		return nil, err
	}
	if r.uc, err = mk(driver.QPTypeUC); err != nil {
		return nil, err
	}
	if r.ud, err = mk(driver.QPTypeUD); err != nil {
		return nil, err
	}
	// Two windows over M: type 1 on [256, 768) with every remote right, type 2 on
	// [1024, 1536) with write and atomic (a peer's SEND_WITH_INV can revoke it; reset
	// binds it again).
	m := r.spans[8].mr
	for _, w := range []*fuzzWindow{
		{va: m.Addr() + 256, n: 512, access: driver.AccessRemoteWrite | driver.AccessRemoteRead | driver.AccessRemoteAtomic},
		{va: m.Addr() + 1024, n: 512, access: driver.AccessRemoteWrite | driver.AccessRemoteAtomic},
	} {
		if w.mw, err = r.pd.allocMW(uint8(len(r.windows) + 1)); err != nil {
			return nil, err
		}
		r.windows = append(r.windows, w)
	}
	r.arena.remote = append(r.arena.remote, r.windows[0], r.windows[1], m, r.spans[0].mr)
	r.codec = codec{local: fuzzLocal, srcs: [4]netip.AddrPort{fuzzPeer, fuzzPort2, fuzzOther, fuzzV6},
		qps: [3]*QP{r.rc, r.uc, r.ud}, remote: r.arena.remote}
	return r, nil
}

func (r *fuzzRig) newQP(typ driver.QPType) (*QP, error) {
	return r.dev.CreateQP(r.pd, QPInit{Type: typ, SendCQ: r.cq, RecvCQ: r.rcq,
		Cap: driver.QPCap{MaxSendWR: 16, MaxRecvWR: 16, MaxSendSGE: 2, MaxRecvSGE: 2, MaxInline: 64}})
}

// bindWindows binds each window that is not bound (the type 1 window once, the type 2
// window again after a SEND_WITH_INV revoked it), through the RC QP's send queue, where
// binds execute as local operations.
func (r *fuzzRig) bindWindows(t testing.TB) {
	m := r.spans[8].mr
	for i, w := range r.windows {
		w.mw.mu.Lock()
		bound := w.mw.cur.valid.Load()
		w.mw.mu.Unlock()
		if bound {
			continue
		}
		b := &driver.MWBindWR{MW: w.mw, RKey: driver.IncRKey(w.mw.RKey()),
			MWBind: driver.MWBind{MR: m, Addr: w.va, Length: uint64(w.n), Access: w.access}}
		must(t, r.rc.PostSend([]driver.SendWR{{ID: uint64(1000 + i), Opcode: driver.WRBindMW, Bind: b}}))
		// A post right after another may be left to the device's sender goroutine
		// (doorbell batching), so the bind happens soon rather than inside PostSend.
		for deadline := time.Now().Add(5 * time.Second); ; {
			w.mw.mu.Lock()
			bound = w.mw.cur.valid.Load()
			w.mw.mu.Unlock()
			if bound {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("window %d did not bind", i+1)
			}
			time.Sleep(10 * time.Microsecond)
		}
	}
}

// newArena lays out and registers the regions: W (every remote right), R (remote read),
// A (remote atomic), N (local only), O (every right, but in pd2), receive buffers, a sink
// for the device's own READ and atomic results, a send source, M (no remote rights of its
// own: only windows bound over it grant any), and unregistered memory.
func newArena(pd, pd2 *PD) (*arena, error) {
	all := driver.AccessLocalWrite | driver.AccessRemoteWrite | driver.AccessRemoteRead | driver.AccessRemoteAtomic
	layout := []struct {
		name    string
		n       int
		pd      *PD
		access  driver.Access
		reg     bool
		scratch bool
	}{
		{"W (all remote rights)", 4096, pd, all, true, false},
		{"R (remote read only)", 1024, pd, driver.AccessLocalWrite | driver.AccessRemoteRead, true, false},
		{"A (remote atomic only)", 1024, pd, driver.AccessLocalWrite | driver.AccessRemoteAtomic, true, false},
		{"N (local only)", 1024, pd, driver.AccessLocalWrite, true, false},
		{"O (all rights, other PD)", 1024, pd2, all, true, false},
		{"receive buffers", 10 * fuzzRecvSize, pd, driver.AccessLocalWrite, true, true},
		{"READ/atomic sink", 4096, pd, driver.AccessLocalWrite, true, true},
		{"send source", 2048, pd, 0, true, false},
		{"M (windows only)", 2048, pd, driver.AccessLocalWrite | driver.AccessMWBind, true, false},
		{"unregistered", 1024, nil, 0, false, false},
	}
	size := fuzzGuard
	for _, l := range layout {
		size += l.n + fuzzGuard
	}
	a := &arena{mem: make([]byte, size), pd: pd}
	for i := range a.mem {
		a.mem[i] = byte(i*7 + i>>8 + 1)
	}
	off := fuzzGuard
	for _, l := range layout {
		s := memSpan{name: l.name, off: off, n: l.n, scratch: l.scratch}
		if l.reg {
			mr, err := l.pd.regMR(a.mem[off:off+l.n:off+l.n], l.access)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", l.name, err)
			}
			s.mr = mr
		}
		a.spans = append(a.spans, s)
		off += l.n + fuzzGuard
	}
	a.pattern = bytes.Clone(a.mem)
	a.remote = []target{a.spans[0].mr, a.spans[1].mr, a.spans[2].mr, a.spans[4].mr}
	return a, nil
}

func (a *arena) recvSGE(k int) driver.SGE {
	return driver.SGE{Addr: a.spans[5].mr.Addr() + uint64(k*fuzzRecvSize), Length: fuzzRecvSize, LKey: a.spans[5].mr.LKey()}
}

func (a *arena) sinkSGE(off, n int) driver.SGE {
	return driver.SGE{Addr: a.spans[6].mr.Addr() + uint64(off), Length: uint32(n), LKey: a.spans[6].mr.LKey()}
}

func (a *arena) srcSGE(n int) driver.SGE {
	return driver.SGE{Addr: a.spans[7].mr.Addr(), Length: uint32(n), LKey: a.spans[7].mr.LKey()}
}

// reset brings every QP back to a known state (RESET, then up again), restores the
// arena, drains the CQs and posts the same receives and outstanding requests each time,
// so that an input means the same thing whenever it runs.
func (r *fuzzRig) reset(t testing.TB) {
	// An RC QP whose RNR timer may be firing is replaced rather than reset: resetting it
	// races with the timer (ENGINE BUG, TestResetRacesRNRTimer).
	r.rc.mu.Lock()
	armed := r.rc.comp.rnr != nil
	r.rc.mu.Unlock()
	if armed {
		r.rc.Close()
		qp, err := r.newQP(driver.QPTypeRC)
		must(t, err)
		r.rc, r.codec.qps[0] = qp, qp
	}
	for _, qp := range []*QP{r.rc, r.uc, r.ud} {
		must(t, qp.Modify(&driver.QPAttr{State: driver.QPStateReset}, driver.QPAttrState))
	}
	// Nothing touches the arena now: the receive loop is parked, QPs in RESET send nothing.
	copy(r.mem, r.pattern)
	for _, cq := range []*CQ{r.cq, r.rcq} {
		for {
			n, err := cq.Poll(r.wcs)
			if err != nil {
				t.Fatalf("CQ: %v", err)
			}
			if n == 0 {
				break
			}
		}
	}
	for drained := false; !drained; {
		select {
		case <-r.dev.Events():
		default:
			drained = true
		}
	}
	all := driver.AccessLocalWrite | driver.AccessRemoteWrite | driver.AccessRemoteRead | driver.AccessRemoteAtomic
	peerAH := driver.AHAttr{DGID: AddrToGID(fuzzPeer.Addr()), Port: 1}
	for _, qp := range []*QP{r.rc, r.uc} {
		must(t, qp.Modify(&driver.QPAttr{State: driver.QPStateInit, Port: 1, AccessFlags: all}, driver.QPAttrState|driver.QPAttrPort|driver.QPAttrPKeyIndex|driver.QPAttrAccessFlags))
		must(t, qp.Modify(&driver.QPAttr{State: driver.QPStateRTR, AH: peerAH, PathMTU: wire.MTU1024, DestQPN: fuzzPeerQPN, RQPSN: 0,
			MaxDestRdAtomic: 4, MinRNRTimer: 1},
			driver.QPAttrState|driver.QPAttrAV|driver.QPAttrPathMTU|driver.QPAttrDestQPN|driver.QPAttrRQPSN|driver.QPAttrMaxDestRdAtomic|driver.QPAttrMinRNRTimer))
		// Timeout 0: no retransmission timer, so nothing happens between inputs.
		must(t, qp.Modify(&driver.QPAttr{State: driver.QPStateRTS, SQPSN: fuzzSQPSN, Timeout: 0, RetryCnt: 7, RNRRetry: 7, MaxRdAtomic: 4},
			driver.QPAttrState|driver.QPAttrSQPSN|driver.QPAttrTimeout|driver.QPAttrRetryCnt|driver.QPAttrRNRRetry|driver.QPAttrMaxQPRdAtomic))
	}
	must(t, r.ud.Modify(&driver.QPAttr{State: driver.QPStateInit, Port: 1, QKey: fuzzQKey}, driver.QPAttrState|driver.QPAttrPort|driver.QPAttrPKeyIndex|driver.QPAttrQKey))
	must(t, r.ud.Modify(&driver.QPAttr{State: driver.QPStateRTR}, driver.QPAttrState))
	must(t, r.ud.Modify(&driver.QPAttr{State: driver.QPStateRTS, SQPSN: 0}, driver.QPAttrState|driver.QPAttrSQPSN))

	r.bindWindows(t)
	// Receives: RC 4, UC 3, UD 3 buffers of 1 KiB each.
	for k := 0; k < 10; k++ {
		qp := r.rc
		switch {
		case k >= 7:
			qp = r.ud
		case k >= 4:
			qp = r.uc
		}
		must(t, qp.PostRecv([]driver.RecvWR{{ID: uint64(k), SGL: []driver.SGE{r.recvSGE(k)}}}))
	}
	// The RC QP's own outstanding work, so that ACKs, NAKs, READ responses and atomic
	// ACKs have something to complete: SEND (PSN 0x100), WRITE of two packets
	// (0x101–0x102), READ of two packets into the sink (0x103–0x104), FETCH_AND_ADD into
	// the sink (0x105).
	must(t, r.rc.PostSend([]driver.SendWR{
		{ID: 100, Opcode: driver.WRSend, Flags: driver.SendSignaled, SGL: []driver.SGE{r.srcSGE(8)}},
		{ID: 101, Opcode: driver.WRRDMAWrite, Flags: driver.SendSignaled, SGL: []driver.SGE{r.srcSGE(1500)}, RemoteAddr: 0x10000, RKey: 0x4242},
		{ID: 102, Opcode: driver.WRRDMARead, Flags: driver.SendSignaled, SGL: []driver.SGE{r.sinkSGE(0, 2048)}, RemoteAddr: 0x20000, RKey: 0x4343},
		{ID: 103, Opcode: driver.WRAtomicFetchAdd, Flags: driver.SendSignaled, SGL: []driver.SGE{r.sinkSGE(2048, 8)}, RemoteAddr: 0x30000, RKey: 0x4444, CompareAdd: 1},
	}))
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// Input encoding. An input is a sequence of records: a control byte, a big-endian 16-bit
// length, and that many bytes of datagram (UDP payload: BTH through ICRC). Control bits:
//
//	0x01  recompute the ICRC for the source address (after the patches below)
//	0x06  source: 0 the RC/UC QPs' peer, 1 the peer's address on another port,
//	      2 another address, 3 an IPv6 address
//	0x08  relocate: the RETH or AtomicETH VA is an offset from region (ctl>>4)&3's
//	      start (W, R, A, O)
//	0x30  that region
//	0x40  aim: DestQP (mod 3) picks the RC, UC or UD QP
//	0x80  key: the RETH/AtomicETH/IETH rkey is XORed with that region's rkey
//
// so that a mutated valid packet keeps reaching deep into the responder (a right ICRC, a
// live QP, a key and address that mean something in this process) while the fuzzer
// varies everything else, and raw bytes (control 0) still test the outer checks.
const (
	ctlFixICRC  = 0x01
	ctlSrcShift = 1
	ctlRelocate = 0x08
	ctlRegShift = 4
	ctlAim      = 0x40
	ctlKey      = 0x80
	maxRecords  = 32
	maxDatagram = 1 << 11
)

// datagram is one decoded, patched input record.
type datagram struct {
	from netip.AddrPort
	b    []byte
}

func (c *codec) decode(data []byte) []datagram {
	var out []datagram
	for len(data) >= 3 && len(out) < maxRecords {
		ctl := data[0]
		n := int(binary.BigEndian.Uint16(data[1:3])) % maxDatagram
		data = data[3:]
		n = min(n, len(data))
		b := bytes.Clone(data[:n])
		data = data[n:]
		from := c.srcs[ctl>>ctlSrcShift&3]
		sel := int(ctl >> ctlRegShift & 3)
		if len(b) >= wire.BTHLen {
			in := wire.Opcode(b[0]).Info()
			if ctl&ctlAim != 0 {
				wire.BTH(b).SetDestQP(c.qps[wire.BTH(b).DestQP()%3].QPN())
			}
			if ctl&(ctlRelocate|ctlKey) != 0 {
				vaOff, keyOff := -1, -1
				switch {
				case in.RETHOff != 0 && len(b) >= in.RETHOff+wire.RETHLen:
					vaOff, keyOff = in.RETHOff, in.RETHOff+8
				case in.AtomicETHOff != 0 && len(b) >= in.AtomicETHOff+wire.AtomicETHLen:
					vaOff, keyOff = in.AtomicETHOff, in.AtomicETHOff+8
				case in.IETHOff != 0 && len(b) >= in.IETHOff+wire.IETHLen:
					keyOff = in.IETHOff
				}
				// The rkey field's top bit selects the second bank (the windows).
				if keyOff >= 0 && b[keyOff]&0x80 != 0 && len(c.remote) > 4 {
					sel += 4
					b[keyOff] &^= 0x80
				}
				reg := c.remote[sel]
				if ctl&ctlRelocate != 0 && vaOff >= 0 {
					binary.BigEndian.PutUint64(b[vaOff:], binary.BigEndian.Uint64(b[vaOff:])+reg.Addr())
				}
				if ctl&ctlKey != 0 && keyOff >= 0 {
					binary.BigEndian.PutUint32(b[keyOff:], binary.BigEndian.Uint32(b[keyOff:])^reg.RKey())
				}
			}
		}
		if ctl&ctlFixICRC != 0 && len(b) >= wire.ICRCLen {
			ip := wire.IPHeader{Src: from.Addr(), Dst: c.local.Addr(), SrcPort: from.Port(), DstPort: c.local.Port(), DF: true}
			wire.PutICRC(&ip, b, len(b)-wire.ICRCLen)
		}
		out = append(out, datagram{from: from, b: b})
	}
	return out
}

// span is a byte range [lo, hi) of the arena.
type span struct{ lo, hi int }

// allowed returns the arena ranges the delivered datagrams may legitimately modify in
// regions that grant remote write or atomic access: the target of each WRITE FIRST/ONLY or
// atomic request with that region's rkey, inside the region, with the right. It
// over-approximates (PSN, QP state and opcode sequence are not modelled), which only
// makes the check weaker, never wrong.
func (r *arena) allowed(dgs []datagram) []span {
	var out []span
	base := uint64(uintptr(unsafe.Pointer(unsafe.SliceData(r.mem))))
	for _, d := range dgs {
		var p wire.Packet
		if p.Parse(d.b, 0) != nil || !p.Op.Flags.Has(wire.Request) {
			continue
		}
		var va, n uint64
		var key uint32
		var need driver.Access
		switch {
		case p.RETH != nil && p.Op.Flags.Has(wire.OpWrite):
			va, n, key, need = p.RETH.VA(), uint64(p.RETH.DMALen()), p.RETH.RKey(), driver.AccessRemoteWrite
		case p.AtomicETH != nil:
			va, n, key, need = p.AtomicETH.VA(), 8, p.AtomicETH.RKey(), driver.AccessRemoteAtomic
		default:
			continue
		}
		for _, s := range r.spans {
			if s.mr == nil || s.mr.RKey() != key || s.mr.pd != r.pd || s.mr.Access()&need == 0 {
				continue
			}
			start := s.mr.Addr()
			if va < start || va-start > uint64(s.n) || n > uint64(s.n)-(va-start) {
				continue
			}
			lo := int(va - base)
			out = append(out, span{lo, lo + int(n)})
		}
		for _, w := range r.windows {
			if w.RKey() != key || w.access&need == 0 || va < w.va || va-w.va > uint64(w.n) || n > uint64(w.n)-(va-w.va) {
				continue
			}
			lo := int(va - base)
			out = append(out, span{lo, lo + int(n)})
		}
	}
	return out
}

// check fails the test on any change of the arena the rules forbid, or an implausible
// completion.
func (r *fuzzRig) check(t testing.TB, dgs []datagram) {
	t.Helper()
	v := r.violation(dgs)
	for _, cq := range []*CQ{r.cq, r.rcq} {
		if v == "" {
			v = badCompletion(cq, r.wcs)
		}
	}
	if v != "" {
		t.Fatalf("%s; input:\n%s", v, describe(dgs))
	}
}

// violation describes the first forbidden change of the arena, or returns "".
func (r *arena) violation(dgs []datagram) string {
	ok := r.allowed(dgs)
	in := func(i int) bool {
		for _, s := range ok {
			if i >= s.lo && i < s.hi {
				return true
			}
		}
		return false
	}
	where := func(i int) (string, bool) {
		for _, s := range r.spans {
			if i >= s.off && i < s.off+s.n {
				return s.name, s.scratch
			}
		}
		return "guard", false
	}
	for i := range r.mem {
		if r.mem[i] == r.pattern[i] {
			continue
		}
		name, scratch := where(i)
		if scratch || in(i) {
			continue
		}
		return fmt.Sprintf("arena byte %d (%s) changed from %#x to %#x; permitted ranges %v", i, name, r.pattern[i], r.mem[i], ok)
	}
	return ""
}

// badCompletion polls cq dry and describes the first implausible completion, or returns "".
func badCompletion(cq *CQ, wcs []driver.WC) string {
	for {
		n, err := cq.Poll(wcs)
		if err != nil {
			return fmt.Sprintf("CQ: %v", err)
		}
		if n == 0 {
			return ""
		}
		for _, wc := range wcs[:n] {
			// (A WRITE with immediate reports the WRITE's length, placed in the region.)
			if wc.Status == driver.WCSuccess && wc.Opcode == driver.WCRecv && wc.ByteLen > fuzzRecvSize {
				return fmt.Sprintf("receive completion reports %d bytes into a %d-byte buffer: %+v", wc.ByteLen, fuzzRecvSize, wc)
			}
		}
	}
}

func describe(dgs []datagram) string {
	var s string
	for _, d := range dgs {
		op := "short"
		if len(d.b) > 0 {
			op = wire.Opcode(d.b[0]).String()
		}
		s += fmt.Sprintf("  from %v %s % x\n", d.from, op, d.b[:min(len(d.b), 48)])
	}
	return s
}

// run is one fuzz input, start to finish.
func (r *fuzzRig) run(t testing.TB, data []byte) {
	rigMu.Lock()
	defer rigMu.Unlock()
	// A wedged receive loop or QP lock would stall the fuzzer silently: fail loudly instead,
	// with every goroutine's stack and the input.
	watchdog := time.AfterFunc(10*time.Second, func() {
		buf := make([]byte, 1<<20)
		buf = buf[:runtime.Stack(buf, true)]
		panic(fmt.Sprintf("input not finished after 10 s (wedged?):\n%s\n%s", describe(r.decode(data)), buf))
	})
	defer watchdog.Stop()
	r.reset(t)
	dgs := r.decode(data)
	msgs := make([]netio.Message, len(dgs))
	for i, d := range dgs {
		msgs[i] = netio.Message{Buf: d.b, N: len(d.b), Addr: d.from}
	}
	r.conn.Deliver(msgs, 4)
	// Quiesce: RESET stops the sender goroutine from reading memory for this QP's READ
	// responses; the state lock orders its last accesses before the check.
	r.check(t, dgs)
}

// Seeds: valid packets of every opcode, each as one record, plus conversations.

type seedRec struct {
	ctl     byte
	h       wire.Headers
	payload []byte
	raw     []byte // instead of h and payload
}

func encodeSeed(recs ...seedRec) []byte {
	var out []byte
	for _, rc := range recs {
		b := rc.raw
		if b == nil {
			b = make([]byte, rc.h.Len()+len(rc.payload)+8)
			hl := rc.h.Encode(b)
			copy(b[hl:], rc.payload)
			n := wire.Finish(b, hl, len(rc.payload))
			b = b[:n+wire.ICRCLen] // ICRC filled in by ctlFixICRC
		}
		out = append(out, rc.ctl, byte(len(b)>>8), byte(len(b)))
		out = append(out, b...)
	}
	return out
}

// aim is the control byte of a record sent from the peer with a right ICRC to the QP its
// DestQP names (0 RC, 1 UC, 2 UD), relocated to region reg with its key when rel.
func aim(reg byte, rel bool) byte {
	c := byte(ctlFixICRC | ctlAim)
	if rel {
		c |= ctlRelocate | ctlKey | reg<<ctlRegShift
	}
	return c
}

func bth(op wire.Opcode, qp uint32, psn wire.PSN) wire.BTHFields {
	return wire.BTHFields{Opcode: op, PKey: 0xffff, DestQP: qp, PSN: psn, AckReq: true}
}

func fuzzSeeds() [][]byte {
	pl := func(n int) []byte {
		b := make([]byte, n)
		for i := range b {
			b[i] = byte(0xa0 + i)
		}
		return b
	}
	mtu := 1024
	reth := func(off uint64, n uint32) wire.RETHFields { return wire.RETHFields{VA: off, DMALen: n} }
	rc, uc, ud := uint32(0), uint32(1), uint32(2)
	var seeds [][]byte
	one := func(recs ...seedRec) { seeds = append(seeds, encodeSeed(recs...)) }

	// RC requests, each alone and valid.
	one(seedRec{ctl: aim(0, false), h: wire.Headers{BTH: bth(wire.RCSendOnly, rc, 0)}, payload: pl(100)})
	one(seedRec{ctl: aim(0, false), h: wire.Headers{BTH: bth(wire.RCSendOnlyImm, rc, 0), ImmDt: 7}, payload: pl(3)})
	one(seedRec{ctl: aim(0, true), h: wire.Headers{BTH: bth(wire.RCSendOnlyInv, rc, 0), IETH: 0}, payload: pl(8)})
	one(seedRec{ctl: aim(0, true), h: wire.Headers{BTH: bth(wire.RCWriteOnly, rc, 0), RETH: reth(64, 200)}, payload: pl(200)})
	one(seedRec{ctl: aim(0, true), h: wire.Headers{BTH: bth(wire.RCWriteOnlyImm, rc, 0), RETH: reth(0, 16), ImmDt: 9}, payload: pl(16)})
	one(seedRec{ctl: aim(0, true), h: wire.Headers{BTH: bth(wire.RCReadRequest, rc, 0), RETH: reth(0, 3000)}})
	one(seedRec{ctl: aim(1, true), h: wire.Headers{BTH: bth(wire.RCReadRequest, rc, 0), RETH: reth(8, 64)}})
	one(seedRec{ctl: aim(0, true), h: wire.Headers{BTH: bth(wire.RCFetchAdd, rc, 0), AtomicETH: wire.AtomicETHFields{VA: 8, SwapAdd: 5}}})
	one(seedRec{ctl: aim(2, true), h: wire.Headers{BTH: bth(wire.RCCompareSwap, rc, 0), AtomicETH: wire.AtomicETHFields{VA: 16, SwapAdd: 5, Compare: 0}}})
	// A WRITE to the read-only region and an atomic on another PD's region: access errors.
	one(seedRec{ctl: aim(1, true), h: wire.Headers{BTH: bth(wire.RCWriteOnly, rc, 0), RETH: reth(0, 8)}, payload: pl(8)})
	one(seedRec{ctl: aim(3, true), h: wire.Headers{BTH: bth(wire.RCFetchAdd, rc, 0), AtomicETH: wire.AtomicETHFields{VA: 0, SwapAdd: 1}}})
	// Through the windows (the rkey's top bit selects the window bank): a WRITE into the
	// type 1 window, an atomic on the type 2 window, then the peer revokes the type 2
	// window with SEND_WITH_INV and a WRITE through it must fail.
	win := func(h wire.Headers) wire.Headers {
		switch {
		case h.RETH.DMALen > 0 || h.BTH.Opcode == wire.RCWriteOnly:
			h.RETH.RKey = 0x80000000
		case h.BTH.Opcode == wire.RCFetchAdd:
			h.AtomicETH.RKey = 0x80000000
		default:
			h.IETH = 0x80000000
		}
		return h
	}
	one(seedRec{ctl: aim(0, true), h: win(wire.Headers{BTH: bth(wire.RCWriteOnly, rc, 0), RETH: reth(16, 64)}), payload: pl(64)})
	one(seedRec{ctl: aim(1, true), h: win(wire.Headers{BTH: bth(wire.RCFetchAdd, rc, 0), AtomicETH: wire.AtomicETHFields{VA: 8, SwapAdd: 9}})},
		seedRec{ctl: aim(1, true), h: win(wire.Headers{BTH: bth(wire.RCSendOnlyInv, rc, 1)}), payload: pl(4)},
		seedRec{ctl: aim(1, true), h: win(wire.Headers{BTH: bth(wire.RCWriteOnly, rc, 2), RETH: reth(0, 8)}), payload: pl(8)})
	one(seedRec{ctl: aim(2, true), h: win(wire.Headers{BTH: bth(wire.RCWriteOnly, rc, 0), RETH: reth(300, 8)}), payload: pl(8)}) // M itself: refused
	// A multi-packet SEND and WRITE, with their middles.
	one(seedRec{ctl: aim(0, false), h: wire.Headers{BTH: bth(wire.RCSendFirst, rc, 0)}, payload: pl(mtu)},
		seedRec{ctl: aim(0, false), h: wire.Headers{BTH: bth(wire.RCSendMiddle, rc, 1)}, payload: pl(mtu)},
		seedRec{ctl: aim(0, false), h: wire.Headers{BTH: bth(wire.RCSendLast, rc, 2)}, payload: pl(10)})
	one(seedRec{ctl: aim(0, false), h: wire.Headers{BTH: bth(wire.RCSendFirst, rc, 0)}, payload: pl(mtu)},
		seedRec{ctl: aim(0, false), h: wire.Headers{BTH: bth(wire.RCSendLastImm, rc, 1), ImmDt: 1}, payload: pl(4)},
		seedRec{ctl: aim(0, false), h: wire.Headers{BTH: bth(wire.RCSendFirst, rc, 2)}, payload: pl(mtu)},
		seedRec{ctl: aim(0, true), h: wire.Headers{BTH: bth(wire.RCSendLastInv, rc, 3)}, payload: pl(4)})
	one(seedRec{ctl: aim(0, true), h: wire.Headers{BTH: bth(wire.RCWriteFirst, rc, 0), RETH: reth(100, uint32(2*mtu+50))}, payload: pl(mtu)},
		seedRec{ctl: aim(0, false), h: wire.Headers{BTH: bth(wire.RCWriteMiddle, rc, 1)}, payload: pl(mtu)},
		seedRec{ctl: aim(0, false), h: wire.Headers{BTH: bth(wire.RCWriteLast, rc, 2)}, payload: pl(50)})
	one(seedRec{ctl: aim(0, true), h: wire.Headers{BTH: bth(wire.RCWriteFirst, rc, 0), RETH: reth(0, uint32(mtu+4))}, payload: pl(mtu)},
		seedRec{ctl: aim(0, false), h: wire.Headers{BTH: bth(wire.RCWriteLastImm, rc, 1), ImmDt: 3}, payload: pl(4)})
	// Duplicates: a WRITE, READ and atomic repeated (answered again, never re-executed).
	w := seedRec{ctl: aim(0, true), h: wire.Headers{BTH: bth(wire.RCWriteOnly, rc, 0), RETH: reth(0, 8)}, payload: pl(8)}
	rd := seedRec{ctl: aim(0, true), h: wire.Headers{BTH: bth(wire.RCReadRequest, rc, 1), RETH: reth(0, 2048)}}
	at := seedRec{ctl: aim(0, true), h: wire.Headers{BTH: bth(wire.RCFetchAdd, rc, 3), AtomicETH: wire.AtomicETHFields{VA: 0, SwapAdd: 1}}}
	one(w, rd, at, w, rd, at)
	// Out of sequence (a PSN sequence NAK), then the gap filled.
	one(seedRec{ctl: aim(0, false), h: wire.Headers{BTH: bth(wire.RCSendOnly, rc, 5)}, payload: pl(4)},
		seedRec{ctl: aim(0, false), h: wire.Headers{BTH: bth(wire.RCSendOnly, rc, 0)}, payload: pl(4)})

	// Responses to the RC QP's own requests (SEND 0x100, WRITE 0x101–2, READ 0x103–4,
	// FETCH_AND_ADD 0x105).
	ack := func(psn wire.PSN, syn wire.Syndrome) seedRec {
		return seedRec{ctl: aim(0, false), h: wire.Headers{BTH: wire.BTHFields{Opcode: wire.RCAck, PKey: 0xffff, PSN: psn},
			AETH: wire.AETHFields{Syndrome: syn, MSN: 1}}}
	}
	okSyn := wire.ACKSyndrome(wire.CreditsInvalid)
	readResp := func(op wire.Opcode, psn wire.PSN, n int) seedRec {
		return seedRec{ctl: aim(0, false), h: wire.Headers{BTH: wire.BTHFields{Opcode: op, PKey: 0xffff, PSN: psn},
			AETH: wire.AETHFields{Syndrome: okSyn, MSN: 3}}, payload: pl(n)}
	}
	atomicAck := seedRec{ctl: aim(0, false), h: wire.Headers{BTH: wire.BTHFields{Opcode: wire.RCAtomicAck, PKey: 0xffff, PSN: 0x105},
		AETH: wire.AETHFields{Syndrome: okSyn, MSN: 4}, AtomicAckETH: 41}}
	one(ack(0x102, okSyn), readResp(wire.RCReadResponseFirst, 0x103, mtu), readResp(wire.RCReadResponseLast, 0x104, mtu), atomicAck)
	one(ack(0x100, okSyn), readResp(wire.RCReadResponseMiddle, 0x103, mtu), readResp(wire.RCReadResponseOnly, 0x104, 4))
	one(ack(0x101, wire.NAKSyndrome(wire.NAKPSNSeqError)))
	one(ack(0x100, wire.RNRNAKSyndrome(1)))
	one(ack(0x100, wire.NAKSyndrome(wire.NAKRemoteAccessError)))
	one(ack(0x105, okSyn)) // an ACK past a READ: implied NAK
	one(ack(0x200, okSyn)) // a ghost

	// UC.
	one(seedRec{ctl: aim(0, false), h: wire.Headers{BTH: bth(wire.UCSendOnly, uc, 0)}, payload: pl(30)})
	one(seedRec{ctl: aim(0, false), h: wire.Headers{BTH: bth(wire.UCSendOnlyImm, uc, 0), ImmDt: 2}, payload: pl(30)})
	one(seedRec{ctl: aim(0, false), h: wire.Headers{BTH: bth(wire.UCSendFirst, uc, 0)}, payload: pl(mtu)},
		seedRec{ctl: aim(0, false), h: wire.Headers{BTH: bth(wire.UCSendMiddle, uc, 1)}, payload: pl(mtu)},
		seedRec{ctl: aim(0, false), h: wire.Headers{BTH: bth(wire.UCSendLast, uc, 2)}, payload: pl(4)},
		seedRec{ctl: aim(0, false), h: wire.Headers{BTH: bth(wire.UCSendFirst, uc, 3)}, payload: pl(mtu)},
		seedRec{ctl: aim(0, false), h: wire.Headers{BTH: bth(wire.UCSendLastImm, uc, 4), ImmDt: 5}, payload: pl(4)})
	one(seedRec{ctl: aim(0, true), h: wire.Headers{BTH: bth(wire.UCWriteOnly, uc, 0), RETH: reth(500, 20)}, payload: pl(20)})
	one(seedRec{ctl: aim(0, true), h: wire.Headers{BTH: bth(wire.UCWriteOnlyImm, uc, 0), RETH: reth(0, 4), ImmDt: 1}, payload: pl(4)})
	one(seedRec{ctl: aim(0, true), h: wire.Headers{BTH: bth(wire.UCWriteFirst, uc, 0), RETH: reth(0, uint32(2*mtu+8))}, payload: pl(mtu)},
		seedRec{ctl: aim(0, false), h: wire.Headers{BTH: bth(wire.UCWriteMiddle, uc, 1)}, payload: pl(mtu)},
		seedRec{ctl: aim(0, false), h: wire.Headers{BTH: bth(wire.UCWriteLast, uc, 2)}, payload: pl(8)},
		seedRec{ctl: aim(0, true), h: wire.Headers{BTH: bth(wire.UCWriteFirst, uc, 3), RETH: reth(0, uint32(mtu+8))}, payload: pl(mtu)},
		seedRec{ctl: aim(0, false), h: wire.Headers{BTH: bth(wire.UCWriteLastImm, uc, 4), ImmDt: 6}, payload: pl(8)})

	// UD, from anywhere.
	deth := wire.DETHFields{QKey: fuzzQKey, SrcQP: 0x1234}
	one(seedRec{ctl: aim(0, false), h: wire.Headers{BTH: bth(wire.UDSendOnly, ud, 0), DETH: deth}, payload: pl(256)})
	one(seedRec{ctl: aim(0, false) | 2<<ctlSrcShift, h: wire.Headers{BTH: bth(wire.UDSendOnlyImm, ud, 0), DETH: deth, ImmDt: 4}, payload: pl(mtu)})
	one(seedRec{ctl: aim(0, false) | 3<<ctlSrcShift, h: wire.Headers{BTH: bth(wire.UDSendOnly, ud, 0), DETH: deth}, payload: pl(12)})

	// CNP, and raw bytes for the outer checks.
	one(seedRec{ctl: ctlFixICRC, h: wire.Headers{BTH: wire.BTHFields{Opcode: wire.CNP, PKey: 0xffff, DestQP: 0x11}}})
	one(seedRec{raw: []byte{0x04, 0, 0xff, 0xff}})
	one(seedRec{raw: make([]byte, 64)})
	one(seedRec{ctl: ctlFixICRC | ctlAim, raw: []byte{0x0a, 0x40, 0xff, 0xff, 0, 0, 0, 0, 0x80, 0, 0, 0, 1, 2, 3, 4}})
	return seeds
}

func FuzzResponder(f *testing.F) {
	for _, s := range fuzzSeeds() {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		getRig(t).run(t, data)
	})
}

// TestFuzzSeedsReachTheResponder makes sure the seeds do what they are for: the valid
// requests execute (memory changes where they aim, completions appear), so that the fuzzer
// starts deep in the responder rather than at the ICRC check.
func TestFuzzSeedsReachTheResponder(t *testing.T) {
	r := getRig(t)
	before := snapshotCounters(r.dev)
	for _, s := range fuzzSeeds() {
		r.run(t, s)
	}
	after := snapshotCounters(r.dev)
	for _, name := range []string{"duplicate_request", "out_of_seq_nak_sent", "remote_access_err", "rcvd_rnr_nak",
		"implied_nak", "ghost_response_drop", "rcvd_cnp", "malformed_drop", "rcvd_icrc_err"} {
		if after[name] == before[name] {
			t.Errorf("no seed moved %s", name)
		}
	}
	for _, name := range []string{"bad_pkey_drop", "bad_address_drop"} {
		if after[name] != before[name] {
			t.Errorf("a seed was dropped: %s rose by %d", name, after[name]-before[name])
		}
	}
	// One WRITE seed, checked for effect.
	rigMu.Lock()
	defer rigMu.Unlock()
	r.reset(t)
	data := encodeSeed(seedRec{ctl: aim(0, true), h: wire.Headers{BTH: bth(wire.RCWriteOnly, 0, 0),
		RETH: wire.RETHFields{VA: 64, DMALen: 4}}, payload: []byte{1, 2, 3, 4}})
	dgs := r.decode(data)
	r.conn.Deliver([]netio.Message{{Buf: dgs[0].b, N: len(dgs[0].b), Addr: dgs[0].from}}, 1)
	w := r.spans[0]
	if !bytes.Equal(r.mem[w.off+64:w.off+68], []byte{1, 2, 3, 4}) {
		t.Fatalf("the WRITE seed did not land: % x", r.mem[w.off+60:w.off+72])
	}
	// The oracle sees the write as permitted with the packet, and as a violation without.
	if v := r.violation(dgs); v != "" {
		t.Fatal(v)
	}
	if v := r.violation(nil); v == "" {
		t.Fatal("the oracle missed a WRITE nobody asked for")
	}
}

// runSeedsMutated runs every seed through r, each followed by 8 mutations of it (1 to 4
// bytes changed), the oracle judging each (run).
func (r *fuzzRig) runSeedsMutated(t *testing.T, rng *rand.Rand) {
	for _, s := range fuzzSeeds() {
		r.run(t, s)
		for range 8 {
			m := bytes.Clone(s)
			for range 1 + rng.IntN(4) {
				m[rng.IntN(len(m))] ^= byte(1 + rng.IntN(255))
			}
			r.run(t, m)
		}
	}
}

// TestFuzzSeedsAsViews runs the seeds, and mutations of them, through a Conn that lends
// its datagrams in place (the same-host rings' way): the receive path reads their
// headers from a private copy and only their payload where it lies, and the oracle holds
// it to the same rule as the copying path: nothing changes outside what a delivered
// request with its key aimed at.
func TestFuzzSeedsAsViews(t *testing.T) {
	r := getViewRig(t)
	before := snapshotCounters(r.dev)
	r.runSeedsMutated(t, rand.New(rand.NewPCG(28, 28)))
	// Large datagrams (read in place past their headers) with a bad ICRC, a bad P_Key
	// and a malformed header: dropped and counted as from a socket.
	big := 0
	for _, s := range fuzzSeeds() {
		rigMu.Lock()
		r.reset(t)
		for _, dg := range r.decode(s) {
			if len(dg.b) <= viewWhole {
				continue
			}
			big++
			icrc, pkey, malformed := bytes.Clone(dg.b), bytes.Clone(dg.b), bytes.Clone(dg.b)
			icrc[len(icrc)-1] ^= 1
			pkey[2], pkey[3] = 0x12, 0x34
			ip := rxIP(dg.from, fuzzLocal)
			wire.PutICRC(&ip, pkey, len(pkey)-wire.ICRCLen) // a right ICRC: the P_Key check drops it
			malformed[0] = 0xff                             // no such opcode
			c := &r.dev.counters
			for _, v := range []struct {
				name    string
				b       []byte
				counter *atomic.Uint64
			}{{"a bad ICRC", icrc, &c.ICRCErrors}, {"a bad P_Key", pkey, &c.BadPKey}, {"a malformed header", malformed, &c.Malformed}} {
				was, rel := v.counter.Load(), r.conn.Releases()
				r.conn.Deliver([]netio.Message{{Buf: v.b, N: len(v.b), Addr: dg.from}}, 1)
				if got := v.counter.Load(); got != was+1 {
					t.Fatalf("a large datagram with %s: its counter moved by %d, want 1", v.name, got-was)
				}
				if r.conn.Releases() == rel {
					t.Fatalf("a large datagram with %s was not read as a lent view", v.name)
				}
			}
			r.check(t, nil)
		}
		rigMu.Unlock()
	}
	if big == 0 {
		t.Fatal("no seed is large enough to be read in place")
	}
	after := snapshotCounters(r.dev)
	if r.conn.Releases() == 0 {
		t.Fatal("the device never read a lent datagram")
	}
	for _, name := range []string{"remote_access_err", "rcvd_icrc_err", "malformed_drop", "bad_pkey_drop"} {
		if after[name] == before[name] {
			t.Errorf("no input moved %s through the view path", name)
		}
	}
}

// TestFuzzSeedsSameHost runs the seeds, and mutations of them, as datagrams that crossed
// a same-host ring (netio.Message.SameHost): their ICRC is not checked, so every mutation
// meets the checks after it, and the oracle holds them to the same rule: nothing changes
// outside what a delivered request with its key aimed at. A WRITE whose ICRC is wrong, a
// small one and one read in place, still lands; a bad P_Key and a malformed header are
// still dropped and counted.
func TestFuzzSeedsSameHost(t *testing.T) {
	r := getSameHostRig(t)
	r.runSeedsMutated(t, rand.New(rand.NewPCG(28, 30)))
	rigMu.Lock()
	defer rigMu.Unlock()
	c := &r.dev.counters
	for _, n := range []int{4, viewWhole + 100} {
		r.reset(t)
		payload := bytes.Repeat([]byte{byte(n)}, n)
		data := encodeSeed(seedRec{ctl: aim(0, true), h: wire.Headers{BTH: bth(wire.RCWriteOnly, 0, 0),
			RETH: wire.RETHFields{VA: 64, DMALen: uint32(n)}}, payload: payload})
		dgs := r.decode(data)
		b := dgs[0].b
		b[len(b)-1] ^= 0xff // a wrong ICRC: a socket's datagram would be dropped
		icrc := c.ICRCErrors.Load()
		r.conn.Deliver([]netio.Message{{Buf: b, N: len(b), Addr: dgs[0].from}}, 1)
		w := r.spans[0]
		if !bytes.Equal(r.mem[w.off+64:w.off+64+n], payload) {
			t.Fatalf("a %d-byte WRITE with a wrong ICRC through a ring did not land", n)
		}
		if c.ICRCErrors.Load() != icrc {
			t.Fatalf("a %d-byte WRITE through a ring had its ICRC checked", n)
		}
		if v := r.violation(dgs); v != "" {
			t.Fatal(v)
		}
		pkey, malformed := bytes.Clone(b), bytes.Clone(b)
		pkey[2], pkey[3] = 0x12, 0x34
		malformed[0] = 0xff // no such opcode
		for _, v := range []struct {
			name    string
			b       []byte
			counter *atomic.Uint64
		}{{"a bad P_Key", pkey, &c.BadPKey}, {"a malformed header", malformed, &c.Malformed}} {
			was := v.counter.Load()
			r.conn.Deliver([]netio.Message{{Buf: v.b, N: len(v.b), Addr: dgs[0].from}}, 1)
			if got := v.counter.Load(); got != was+1 {
				t.Fatalf("a %d-byte datagram with %s through a ring: its counter moved by %d, want 1", n, v.name, got-was)
			}
		}
		r.check(t, dgs)
	}
}

func snapshotCounters(d *Device) map[string]uint64 {
	m := map[string]uint64{}
	d.counters.Each(func(name string, v uint64) { m[name] = v })
	return m
}

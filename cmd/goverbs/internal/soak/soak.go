// Package soak drives a long mixed RC stream between two software devices over the
// simulated network (netio/simnet) with faults, and verifies every byte: every SEND and
// WRITE with immediate arrives exactly once, in order, with its bytes and immediate; every
// plain WRITE has landed when it completes; every READ brings back exactly the remote
// bytes; FETCH_AND_ADD and CMP_AND_SWP return exactly the value a single, in-order
// execution gives; nothing outside the target buffers changes (guard zones around every
// remote buffer); and no completion is missing, extra or out of order.
//
// It sits above package verbs, beside the command that runs it: its test
// (presets_test.go) runs it under testing/synctest, in fake time; `goverbs soak` runs it
// in real time for long runs.
package soak

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/netip"
	"time"

	"github.com/goverbs/goverbs/netio/simnet"
	"github.com/goverbs/goverbs/verbs"
	"github.com/goverbs/goverbs/wire"
)

// Config is one soak run.
type Config struct {
	Messages int            // work requests to complete (default 10000)
	MaxSize  int            // largest message in bytes (default 4 path MTUs + 7)
	MTU      verbs.MTU      // path MTU (default 1024)
	Depth    int            // work requests in flight (default 16)
	Seed     uint64         // the stream's and the network's randomness
	Faults   simnet.Faults  // what the network does to datagrams
	Timeout  uint8          // QP local ACK timeout exponent (default 12: 16.8 ms)
	Stall    time.Duration  // fail when nothing completes for this long (default 60 s)
	Progress func(done int) // called every ProgressEvery completions, if set
	// ProgressEvery defaults to Messages/10.
	ProgressEvery int
	Logger        *slog.Logger // the devices' debug log (nil: none)
	// Addresses of the two simulated devices (default 127.0.200.1 and .2).
	AddrA, AddrB netip.Addr
}

// Kind is a kind of work request in the stream.
type Kind int

const (
	Send Kind = iota
	SendImm
	Write
	WriteImm
	Read
	FetchAdd
	CmpSwap
	numKinds
)

var kindNames = [...]string{"SEND", "SEND_WITH_IMM", "RDMA_WRITE", "RDMA_WRITE_WITH_IMM", "RDMA_READ", "FETCH_AND_ADD", "CMP_AND_SWP"}

func (k Kind) String() string { return kindNames[k] }

// consumesRecv says whether the kind completes at the receiver.
func (k Kind) consumesRecv() bool { return k == Send || k == SendImm || k == WriteImm }

// Result is what a run did.
type Result struct {
	Messages int
	ByKind   [numKinds]int
	Bytes    uint64        // payload bytes moved (SEND, WRITE, READ)
	Elapsed  time.Duration // by the clock the run used (fake under synctest)
	Net      simnet.Stats
	// Device counters of the requester (A) and responder (B), and the QPs' own.
	A, B     verbs.Counters
	QPA, QPB verbs.QPCounters
}

// Format writes the result as a small report.
func (r *Result) Format() string {
	var b bytes.Buffer
	fmt.Fprintf(&b, "messages      %d in %v (%.0f/s)\n", r.Messages, r.Elapsed.Round(time.Millisecond), float64(r.Messages)/r.Elapsed.Seconds())
	fmt.Fprintf(&b, "kinds        ")
	for k := Kind(0); k < numKinds; k++ {
		fmt.Fprintf(&b, " %s %d", k, r.ByKind[k])
	}
	fmt.Fprintf(&b, "\npayload       %d bytes\n", r.Bytes)
	n := r.Net
	fmt.Fprintf(&b, "network       sent %d delivered %d lost %d duplicated %d reordered %d corrupted %d queue-full %d\n",
		n.Sent, n.Delivered, n.Dropped, n.Duplicated, n.Reordered, n.Corrupted, n.QueueFull)
	fmt.Fprintf(&b, "QP requester  tx %d rx %d retransmits %d timeouts %d seq-NAK rcvd %d RNR-NAK rcvd %d\n",
		r.QPA.TxPackets, r.QPA.RxPackets, r.QPA.Retransmits, r.QPA.RetryTimeouts, r.QPA.SeqNakReceived, r.QPA.RNRNakReceived)
	fmt.Fprintf(&b, "QP responder  tx %d rx %d seq-NAK sent %d RNR-NAK sent %d duplicates %d\n",
		r.QPB.TxPackets, r.QPB.RxPackets, r.QPB.SeqNakSent, r.QPB.RNRNakSent, r.QPB.DuplicateRequests)
	// Device counters in the layout of `rdma statistic show` (zeros left out).
	for _, side := range []struct {
		name string
		c    verbs.Counters
	}{{"soakA", r.A}, {"soakB", r.B}} {
		fmt.Fprintf(&b, "link %s/1", side.name)
		for _, c := range side.c {
			if c.Value != 0 {
				fmt.Fprintf(&b, " %s %d", c.Name, c.Value)
			}
		}
		fmt.Fprintln(&b)
	}
	return b.String()
}

// Counter returns a device counter summed over both devices.
func (r *Result) Counter(name string) uint64 { return r.A.Get(name) + r.B.Get(name) }

const (
	slots     = 256
	recvAhead = 64
	guard     = 64
)

// guarded is a buffer registered between two guard zones.
type guarded struct {
	all []byte
	mr  *verbs.MR
	pat []byte // the guards' contents
}

func register(pd *verbs.PD, n int, acc verbs.Access, seed byte) (*guarded, error) {
	all := make([]byte, guard+n+guard)
	for i := range all {
		all[i] = seed + byte(i*5)
	}
	mr, err := pd.RegMR(all[guard:guard+n], acc)
	if err != nil {
		return nil, err
	}
	return &guarded{all: all, mr: mr, pat: bytes.Clone(all)}, nil
}

func (g *guarded) guardsIntact() bool {
	n := len(g.all)
	return bytes.Equal(g.all[:guard], g.pat[:guard]) && bytes.Equal(g.all[n-guard:], g.pat[n-guard:])
}

func (g *guarded) buf() []byte { return g.mr.Buf() }

// Run performs one soak run. It returns an error describing the first thing that went
// wrong (a wrong byte, a missing or extra completion, an error status, a stall).
func Run(ctx context.Context, cfg Config) (*Result, error) { return run(ctx, cfg, nil) }

func run(ctx context.Context, cfg Config, tamper func(*stream)) (*Result, error) {
	if cfg.Messages <= 0 {
		cfg.Messages = 10000
	}
	if cfg.MTU == 0 {
		cfg.MTU = verbs.MTU1024
	}
	if cfg.MaxSize <= 0 {
		cfg.MaxSize = 4*cfg.MTU.Bytes() + 7
	}
	if cfg.Depth <= 0 {
		cfg.Depth = 16
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = 12
	}
	if cfg.Stall <= 0 {
		cfg.Stall = time.Minute
	}
	if cfg.ProgressEvery <= 0 {
		cfg.ProgressEvery = max(1, cfg.Messages/10)
	}
	if !cfg.AddrA.IsValid() {
		cfg.AddrA = netip.MustParseAddr("127.0.200.1")
	}
	if !cfg.AddrB.IsValid() {
		cfg.AddrB = netip.MustParseAddr("127.0.200.2")
	}
	s := &stream{cfg: cfg, rng: rand.New(rand.NewPCG(cfg.Seed, cfg.Seed^0x50a4)), tamper: tamper}
	s.net = simnet.New(cfg.Seed, cfg.Faults)
	defer s.net.Close()
	if err := s.setup(); err != nil {
		s.close()
		return nil, err
	}
	start := time.Now()
	err := s.run(ctx)
	res := &Result{Messages: s.done, ByKind: s.byKind, Bytes: s.bytes, Elapsed: time.Since(start), Net: s.net.Stats(),
		A: s.devA.Counters(), B: s.devB.Counters(), QPA: s.qa.Counters(), QPB: s.qb.Counters()}
	if err == nil {
		err = s.finalChecks()
	}
	if err != nil {
		err = fmt.Errorf("%w\nrequester: %s\nresponder: %s", err, s.debug(s.qa), s.debug(s.qb))
	}
	s.close()
	return res, err
}

type stream struct {
	cfg  Config
	rng  *rand.Rand
	net  *simnet.Network
	devA *verbs.Device
	devB *verbs.Device
	cqA  *verbs.CQ
	cqB  *verbs.CQ
	qa   *verbs.QP
	qb   *verbs.QP

	slotSize int
	src      *verbs.MR // A: what SEND and WRITE send
	readDst  *verbs.MR // A: where READs land
	atomRes  *verbs.MR // A: atomic results
	recvBuf  *guarded  // B: receive buffers
	sink     *guarded  // B: WRITE targets
	readSrc  *guarded  // B: READ sources
	words    *guarded  // B: the FETCH_AND_ADD word (0) and the CMP_AND_SWP word (8)

	msgs       []msg // by index, for the ones in flight
	posted     int
	done       int
	consumers  []int // indices of messages that complete at the receiver, in posting order
	recvDone   int   // receiver completions verified
	recvPosted int
	faModel    uint64 // what the FETCH_AND_ADD word holds after the atomics posted so far
	casModel   uint64
	byKind     [numKinds]int
	bytes      uint64

	tamper func(s *stream) // tests of the checks: called before each post
}

type msg struct {
	kind Kind
	size int
	want uint64 // atomics: the value the operation must return
}

func (s *stream) setup() error {
	open := func(addr netip.Addr, name string) (*verbs.Device, error) {
		c, err := s.net.Listen(netip.AddrPortFrom(addr, wire.UDPPort))
		if err != nil {
			return nil, err
		}
		return verbs.OpenSoft(verbs.SoftConfig{Name: name, Addr: addr, Conn: c, MTU: s.cfg.MTU, Logger: s.cfg.Logger})
	}
	var err error
	if s.devA, err = open(s.cfg.AddrA, "soakA"); err != nil {
		return err
	}
	if s.devB, err = open(s.cfg.AddrB, "soakB"); err != nil {
		return err
	}
	pdA, err := s.devA.AllocPD()
	if err != nil {
		return err
	}
	pdB, err := s.devB.AllocPD()
	if err != nil {
		return err
	}
	if s.cqA, err = s.devA.CreateCQ(4096, nil); err != nil {
		return err
	}
	if s.cqB, err = s.devB.CreateCQ(4096, nil); err != nil {
		return err
	}
	qcap := verbs.QPCap{MaxSendWR: 256, MaxRecvWR: 256, MaxSendSGE: 2, MaxRecvSGE: 1, MaxInline: 256}
	if s.qa, err = pdA.CreateQP(verbs.QPInitAttr{Type: verbs.QPTypeRC, SendCQ: s.cqA, RecvCQ: s.cqA, Cap: qcap}); err != nil {
		return err
	}
	if s.qb, err = pdB.CreateQP(verbs.QPInitAttr{Type: verbs.QPTypeRC, SendCQ: s.cqB, RecvCQ: s.cqB, Cap: qcap}); err != nil {
		return err
	}
	all := verbs.AccessLocalWrite | verbs.AccessRemoteWrite | verbs.AccessRemoteRead | verbs.AccessRemoteAtomic
	s.slotSize = (s.cfg.MaxSize + 63) &^ 63
	n := slots * s.slotSize
	if s.src, err = pdA.RegMR(make([]byte, n), verbs.AccessLocalWrite); err != nil {
		return err
	}
	if s.readDst, err = pdA.RegMR(make([]byte, n), verbs.AccessLocalWrite); err != nil {
		return err
	}
	if s.atomRes, err = pdA.RegMR(make([]byte, 8*slots), verbs.AccessLocalWrite); err != nil {
		return err
	}
	if s.recvBuf, err = register(pdB, n, verbs.AccessLocalWrite, 1); err != nil {
		return err
	}
	if s.sink, err = register(pdB, n, all, 2); err != nil {
		return err
	}
	if s.readSrc, err = register(pdB, n, verbs.AccessRemoteRead, 3); err != nil {
		return err
	}
	for i := range s.readSrc.buf() {
		s.readSrc.buf()[i] = readByte(i)
	}
	if s.words, err = register(pdB, 16, all, 4); err != nil {
		return err
	}
	clear(s.words.buf())
	gidA, _ := s.devA.QueryGID(1, 0)
	gidB, _ := s.devB.QueryGID(1, 0)
	if err := connect(s.qa, s.cfg, gidB, s.qb.QPN(), 0x100, 0xfff000); err != nil {
		return err
	}
	if err := connect(s.qb, s.cfg, gidA, s.qa.QPN(), 0xfff000, 0x100); err != nil {
		return err
	}
	s.msgs = make([]msg, s.cfg.Messages)
	for s.recvPosted < recvAhead {
		if err := s.postRecv(); err != nil {
			return err
		}
	}
	return nil
}

// connect brings qp from RESET to RTS (PSNs near the 24-bit wrap, to cross it).
func connect(qp *verbs.QP, cfg Config, gid verbs.GID, remote, rq, sq uint32) error {
	all := verbs.AccessLocalWrite | verbs.AccessRemoteWrite | verbs.AccessRemoteRead | verbs.AccessRemoteAtomic
	if err := qp.Modify(&verbs.QPAttr{State: verbs.QPStateInit, Port: 1, AccessFlags: all},
		verbs.QPAttrState|verbs.QPAttrPKeyIndex|verbs.QPAttrPort|verbs.QPAttrAccessFlags); err != nil {
		return err
	}
	if err := qp.Modify(&verbs.QPAttr{State: verbs.QPStateRTR, PathMTU: cfg.MTU, DestQPN: remote, RQPSN: rq,
		MaxDestRdAtomic: 16, MinRNRTimer: 1, AH: verbs.AHAttr{DGID: gid, Port: 1, HopLimit: 64}},
		verbs.QPAttrState|verbs.QPAttrAV|verbs.QPAttrPathMTU|verbs.QPAttrDestQPN|verbs.QPAttrRQPSN|
			verbs.QPAttrMaxDestRdAtomic|verbs.QPAttrMinRNRTimer); err != nil {
		return err
	}
	return qp.Modify(&verbs.QPAttr{State: verbs.QPStateRTS, SQPSN: sq, Timeout: cfg.Timeout, RetryCnt: 7, RNRRetry: 7, MaxRdAtomic: 16},
		verbs.QPAttrState|verbs.QPAttrSQPSN|verbs.QPAttrTimeout|verbs.QPAttrRetryCnt|verbs.QPAttrRNRRetry|verbs.QPAttrMaxQPRdAtomic)
}

func (s *stream) close() {
	for _, d := range []*verbs.Device{s.devA, s.devB} {
		if d != nil {
			d.Close()
		}
	}
}

func (s *stream) debug(qp *verbs.QP) string {
	if qp == nil {
		return "-"
	}
	return fmt.Sprintf("QP %#x %v %+v", qp.QPN(), qp.State(), qp.Counters())
}

func (s *stream) postRecv() error {
	k := s.recvPosted
	slot := (k % slots) * s.slotSize
	s.recvPosted++
	return s.qb.PostRecv(verbs.RecvWR{ID: uint64(k), SGL: []verbs.SGE{s.recvBuf.mr.SGE(slot, s.slotSize)}})
}

// readByte is byte i of the READ source, which never changes.
func readByte(i int) byte { return byte(i*131 + i>>9) }

// pattern is message i's bytes.
func pattern(buf []byte, i int) {
	x := uint32(i)*0x9e3779b1 + 1
	for k := range buf {
		x ^= x << 13
		x ^= x >> 17
		x ^= x << 5
		buf[k] = byte(x)
	}
}

func (s *stream) pick() (Kind, int) {
	var k Kind
	switch r := s.rng.IntN(100); {
	case r < 20:
		k = Send
	case r < 30:
		k = SendImm
	case r < 50:
		k = Write
	case r < 60:
		k = WriteImm
	case r < 85:
		k = Read
	case r < 93:
		k = FetchAdd
	default:
		k = CmpSwap
	}
	var size int
	switch r := s.rng.IntN(10); {
	case r < 3:
		size = s.rng.IntN(65) // 0 to 64 bytes, inline when a SEND or WRITE
	case r < 7:
		size = s.rng.IntN(s.cfg.MTU.Bytes() + 1)
	default:
		size = s.rng.IntN(s.cfg.MaxSize + 1)
	}
	return k, size
}

func (s *stream) post() error {
	if s.tamper != nil {
		s.tamper(s)
	}
	i := s.posted
	k, size := s.pick()
	m := &s.msgs[i]
	m.kind, m.size = k, size
	slot := (i % slots) * s.slotSize
	wr := verbs.SendWR{ID: uint64(i), Flags: verbs.SendSignaled}
	sgl := func(mr *verbs.MR) []verbs.SGE {
		if size > 1 && i%3 == 0 { // two SGEs for some
			h := size / 2
			return []verbs.SGE{mr.SGE(slot, h), mr.SGE(slot+h, size-h)}
		}
		return []verbs.SGE{mr.SGE(slot, size)}
	}
	switch k {
	case Send, SendImm, Write, WriteImm:
		pattern(s.src.Buf()[slot:slot+size], i)
		wr.SGL = sgl(s.src)
		if size <= 64 && i%2 == 0 {
			wr.Flags |= verbs.SendInline
		}
		wr.Opcode = map[Kind]verbs.WROpcode{Send: verbs.WRSend, SendImm: verbs.WRSendWithImm, Write: verbs.WRRDMAWrite, WriteImm: verbs.WRRDMAWriteWithImm}[k]
		wr.Imm = uint32(i) ^ 0xa5a5a5a5
		if k == Write || k == WriteImm {
			wr.RemoteAddr, wr.RKey = s.sink.mr.AddrOf(slot), s.sink.mr.RKey()
		}
		s.bytes += uint64(size)
	case Read:
		clear(s.readDst.Buf()[slot : slot+size])
		wr.Opcode, wr.SGL = verbs.WRRDMARead, sgl(s.readDst)
		wr.RemoteAddr, wr.RKey = s.readSrc.mr.AddrOf(slot), s.readSrc.mr.RKey()
		s.bytes += uint64(size)
	case FetchAdd:
		add := uint64(i)*0x10001 + 1
		wr.Opcode, wr.SGL = verbs.WRAtomicFetchAdd, []verbs.SGE{s.atomRes.SGE(8*(i%slots), 8)}
		wr.RemoteAddr, wr.RKey, wr.CompareAdd = s.words.mr.AddrOf(0), s.words.mr.RKey(), add
		m.want = s.faModel
		s.faModel += add
	case CmpSwap:
		// Every fifth compare is meant to fail: the word must then stay as it was.
		cmp, swap := s.casModel, uint64(i)<<20|0xc5
		if i%5 == 0 {
			cmp ^= 1
		}
		wr.Opcode, wr.SGL = verbs.WRAtomicCmpAndSwp, []verbs.SGE{s.atomRes.SGE(8*(i%slots), 8)}
		wr.RemoteAddr, wr.RKey, wr.CompareAdd, wr.Swap = s.words.mr.AddrOf(8), s.words.mr.RKey(), cmp, swap
		m.want = s.casModel
		if cmp == s.casModel {
			s.casModel = swap
		}
	}
	if k.consumesRecv() {
		s.consumers = append(s.consumers, i)
	}
	if err := s.qa.PostSend(wr); err != nil {
		return fmt.Errorf("post message %d (%v, %d bytes): %w", i, k, size, err)
	}
	s.posted++
	return nil
}

var errStall = errors.New("soak: stalled")

func (s *stream) run(ctx context.Context) error {
	n := s.cfg.Messages
	wcs := make([]verbs.WC, 64)
	lastProgress, lastDone := time.Now(), 0
	for s.done < n {
		if err := ctx.Err(); err != nil {
			return err
		}
		for s.posted < n && s.posted-s.done < s.cfg.Depth {
			if err := s.post(); err != nil {
				return err
			}
		}
		got := 0
		// Receiver side.
		k, err := s.cqB.Poll(wcs)
		if err != nil {
			return err
		}
		got += k
		for _, wc := range wcs[:k] {
			if err := s.receiverCompletion(wc); err != nil {
				return err
			}
		}
		// Requester side.
		k, err = s.cqA.Poll(wcs)
		if err != nil {
			return err
		}
		got += k
		for _, wc := range wcs[:k] {
			if err := s.requesterCompletion(wc); err != nil {
				return err
			}
			if s.cfg.Progress != nil && s.done%s.cfg.ProgressEvery == 0 {
				s.cfg.Progress(s.done)
			}
		}
		if s.done != lastDone {
			lastProgress, lastDone = time.Now(), s.done
		} else if time.Since(lastProgress) > s.cfg.Stall {
			return fmt.Errorf("%w: %d of %d messages done, nothing for %v", errStall, s.done, n, s.cfg.Stall)
		}
		if got == 0 {
			time.Sleep(50 * time.Microsecond) // under synctest: lets the network deliver
		}
	}
	return nil
}

func (s *stream) requesterCompletion(wc verbs.WC) error {
	i := int(wc.ID)
	if wc.Status != verbs.WCSuccess {
		return fmt.Errorf("message %d (%v): completion %v (vendor %#x)", i, s.msgs[i].kind, wc.Status, wc.VendorErr)
	}
	if i != s.done {
		return fmt.Errorf("requester completion for message %d, want %d (out of order, lost or duplicated)", i, s.done)
	}
	m := &s.msgs[i]
	slot := (i % slots) * s.slotSize
	switch m.kind {
	case Write:
		// Completion of an RC WRITE means the bytes are in place at the responder.
		want := s.src.Buf()[slot : slot+m.size]
		if !bytes.Equal(s.sink.buf()[slot:slot+m.size], want) {
			return fmt.Errorf("message %d: RDMA WRITE of %d bytes: target differs", i, m.size)
		}
	case Read:
		if wc.ByteLen != uint32(m.size) {
			return fmt.Errorf("message %d: READ completion byte_len %d, want %d", i, wc.ByteLen, m.size)
		}
		for k, b := range s.readDst.Buf()[slot : slot+m.size] {
			if b != readByte(slot+k) {
				return fmt.Errorf("message %d: READ of %d bytes: byte %d is %#x, want %#x", i, m.size, k, b, readByte(slot+k))
			}
		}
	case FetchAdd, CmpSwap:
		got := binary.NativeEndian.Uint64(s.atomRes.Buf()[8*(i%slots):])
		if got != m.want {
			return fmt.Errorf("message %d: %v returned %#x, want %#x (executed twice, lost or out of order)", i, m.kind, got, m.want)
		}
	}
	wantOp := map[Kind]verbs.WCOpcode{Send: verbs.WCSend, SendImm: verbs.WCSend, Write: verbs.WCRDMAWrite, WriteImm: verbs.WCRDMAWrite,
		Read: verbs.WCRDMARead, FetchAdd: verbs.WCFetchAdd, CmpSwap: verbs.WCCompSwap}[m.kind]
	if wc.Opcode != wantOp {
		return fmt.Errorf("message %d: completion opcode %v, want %v", i, wc.Opcode, wantOp)
	}
	s.byKind[m.kind]++
	s.done++
	return nil
}

func (s *stream) receiverCompletion(wc verbs.WC) error {
	if wc.Status != verbs.WCSuccess {
		return fmt.Errorf("receive completion %d: %v", wc.ID, wc.Status)
	}
	if s.recvDone >= len(s.consumers) {
		return fmt.Errorf("receive completion %+v for no message (duplicated delivery?)", wc)
	}
	if wc.ID != uint64(s.recvDone) {
		return fmt.Errorf("receive completion for WQE %d, want %d", wc.ID, s.recvDone)
	}
	i := s.consumers[s.recvDone]
	m := &s.msgs[i]
	slot := (i % slots) * s.slotSize
	want := s.src.Buf()[slot : slot+m.size]
	var got []byte
	switch m.kind {
	case Send, SendImm:
		if wc.Opcode != verbs.WCRecv {
			return fmt.Errorf("message %d (%v): receive opcode %v", i, m.kind, wc.Opcode)
		}
		rs := (int(wc.ID) % slots) * s.slotSize
		got = s.recvBuf.buf()[rs : rs+int(wc.ByteLen)]
	case WriteImm:
		if wc.Opcode != verbs.WCRecvRDMAWithImm {
			return fmt.Errorf("message %d (%v): receive opcode %v", i, m.kind, wc.Opcode)
		}
		got = s.sink.buf()[slot : slot+int(wc.ByteLen)]
	}
	hasImm := wc.Flags&verbs.WCWithImm != 0
	if hasImm != (m.kind != Send) || hasImm && wc.Imm != uint32(i)^0xa5a5a5a5 {
		return fmt.Errorf("message %d (%v): immediate %v %#x", i, m.kind, hasImm, wc.Imm)
	}
	if int(wc.ByteLen) != m.size || !bytes.Equal(got, want) {
		return fmt.Errorf("message %d (%v): received %d bytes, want %d, equal %v", i, m.kind, wc.ByteLen, m.size, bytes.Equal(got, want))
	}
	s.recvDone++
	if s.recvPosted < len(s.consumers)+recvAhead {
		return s.postRecv()
	}
	return nil
}

func (s *stream) finalChecks() error {
	// Every receive the stream earned has arrived, and no more come.
	wcs := make([]verbs.WC, 16)
	deadline := time.Now().Add(time.Second)
	for s.recvDone < len(s.consumers) {
		k, err := s.cqB.Poll(wcs)
		if err != nil {
			return err
		}
		for _, wc := range wcs[:k] {
			if err := s.receiverCompletion(wc); err != nil {
				return err
			}
		}
		if k == 0 {
			if time.Now().After(deadline) {
				return fmt.Errorf("%d of %d receive completions arrived", s.recvDone, len(s.consumers))
			}
			time.Sleep(50 * time.Microsecond)
		}
	}
	time.Sleep(10 * time.Millisecond) // anything duplicated would arrive now
	for _, cq := range []*verbs.CQ{s.cqA, s.cqB} {
		if k, _ := cq.Poll(wcs); k != 0 {
			return fmt.Errorf("extra completion after the stream: %+v", wcs[0])
		}
	}
	if got := binary.NativeEndian.Uint64(s.words.buf()[0:]); got != s.faModel {
		return fmt.Errorf("FETCH_AND_ADD word %#x, want %#x", got, s.faModel)
	}
	if got := binary.NativeEndian.Uint64(s.words.buf()[8:]); got != s.casModel {
		return fmt.Errorf("CMP_AND_SWP word %#x, want %#x", got, s.casModel)
	}
	for _, g := range []*guarded{s.recvBuf, s.sink, s.readSrc, s.words} {
		if !g.guardsIntact() {
			return errors.New("a guard zone around a remote buffer changed")
		}
	}
	if s.qa.State() != verbs.QPStateRTS || s.qb.State() != verbs.QPStateRTS {
		return fmt.Errorf("QPs in %v and %v after the stream", s.qa.State(), s.qb.State())
	}
	return nil
}

// Preset is a named fault setting: each fault alone, then all of them together.
type Preset struct {
	Name   string
	Faults simnet.Faults
	// Counter is a device counter that must rise when the fault is really exercised and
	// recovered from ("" for none).
	Counter string
}

// Presets are the soak's standard fault settings.
var Presets = []Preset{
	{"clean", simnet.Faults{Delay: 20 * time.Microsecond}, ""},
	{"loss", simnet.Faults{Loss: 0.03, Delay: 20 * time.Microsecond}, "retransmits"},
	{"reorder", simnet.Faults{Reorder: 0.03, ReorderDelay: 300 * time.Microsecond, Delay: 20 * time.Microsecond}, "out_of_sequence"},
	{"duplicate", simnet.Faults{Duplicate: 0.03, Delay: 20 * time.Microsecond}, "duplicate_request"},
	{"corrupt", simnet.Faults{Corrupt: 0.03, Delay: 20 * time.Microsecond}, "rcvd_icrc_err"},
	{"delay", simnet.Faults{Delay: 2 * time.Millisecond}, ""},
	{"jitter", simnet.Faults{Delay: 100 * time.Microsecond, Jitter: 100 * time.Microsecond}, "out_of_sequence"},
	{"all", simnet.Faults{Loss: 0.02, Reorder: 0.02, Duplicate: 0.02, Corrupt: 0.02, ReorderDelay: 300 * time.Microsecond,
		Delay: 50 * time.Microsecond, Jitter: 30 * time.Microsecond}, "retransmits"},
}

// PresetNamed returns the preset called name.
func PresetNamed(name string) (Preset, bool) {
	for _, p := range Presets {
		if p.Name == name {
			return p, true
		}
	}
	return Preset{}, false
}

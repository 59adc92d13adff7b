package soak

import (
	"fmt"
	"math/rand/v2"
	"net/netip"

	"github.com/goverbs/goverbs/netio/simnet"
	"github.com/goverbs/goverbs/verbs"
	"github.com/goverbs/goverbs/wire"
)

// stream is one soak run: device A's requester QP posts a random mix of operations to
// device B's responder QP, and the model of what each must do (msgs, faModel,
// casModel) is what verify.go checks the completions against.
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

// msg is one posted work request, as the checks need it.
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

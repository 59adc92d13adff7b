package verbs

import (
	"fmt"
	"unsafe"

	"github.com/goverbs/goverbs/internal/engine"
	"github.com/goverbs/goverbs/verbs/driver"
	"github.com/goverbs/goverbs/wire"
)

// The software provider's objects: each adapts one engine object to its driver
// interface.

type softDevice struct {
	d    *engine.Device
	guid uint64
}

func (s *softDevice) Close() error { return softErr(s.d.Close()) }

func (s *softDevice) Progress() bool {
	if !s.d.BusyPoll() {
		return false
	}
	s.d.PollRx()
	return true
}

func (s *softDevice) Query() DeviceAttr {
	return DeviceAttr{
		FWVer: "0.1.0", NodeGUID: s.guid, SysImageGUID: s.guid, MaxMRSize: 1<<64 - 1,
		PageSizeCap: 0xfffff000, VendorID: 0xffffff, VendorPartID: 0, HWVer: 0,
		MaxQP: engine.MaxQP, MaxQPWR: engine.MaxQPWR, MaxSGE: engine.MaxSGE, MaxSGERd: engine.MaxSGE,
		MaxCQ: 1 << 14, MaxCQE: engine.MaxCQE, MaxMR: 1<<16 - 2, MaxPD: 1 << 16,
		MaxQPRdAtom: engine.MaxRdAtomic, MaxQPInitRdAtom: engine.MaxRdAtomic,
		MaxSRQ: 1 << 14, MaxSRQWR: engine.MaxQPWR, MaxSRQSGE: engine.MaxSGE, MaxAH: 1 << 15, MaxMW: 1 << 16,
		MaxInlineData: engine.MaxInline,
		AtomicCap:     AtomicHCA, PhysPortCnt: 1, MaxPKeys: 64,
	}
}

func (s *softDevice) QueryPort(uint8) PortAttr {
	return PortAttr{
		State: PortActive, MaxMTU: MTU4096, ActiveMTU: s.d.ActiveMTU(), GIDTblLen: 1,
		MaxMsgSz: engine.MaxMsgSize, PKeyTblLen: 1, PhysState: 5, LinkLayer: "Ethernet",
		ActiveSpeed: "software", ActiveWidth: "1X",
	}
}

func (s *softDevice) GIDTable(uint8) []GIDEntry {
	return []GIDEntry{{Index: 0, GID: GID(s.d.GID()), Type: "RoCE v2"}}
}

func (s *softDevice) Counters() Counters {
	var out Counters
	s.d.Counters().Each(func(name string, v uint64) { out = append(out, Counter{Name: name, Value: v}) })
	return out
}

func (s *softDevice) AllocPD() (driver.PD, error) {
	pd, err := s.d.AllocPD()
	if err != nil {
		return nil, softErr(err)
	}
	return &softPD{dev: s, pd: pd}, nil
}

func (s *softDevice) CreateCQ(depth int, notify func()) (driver.CQ, error) {
	cq, err := s.d.CreateCQ(depth)
	if err != nil {
		return nil, softErr(err)
	}
	c := &softCQ{cq: cq}
	cq.Owner = c
	if notify != nil {
		cq.SetHandler(notify)
	}
	return c, nil
}

func (s *softDevice) Events() <-chan driver.AsyncEvent {
	out := make(chan driver.AsyncEvent, 16)
	go func() {
		defer close(out)
		for {
			select {
			case ev := <-s.d.Events():
				a := driver.AsyncEvent{Type: EventType(ev.Type), Port: ev.Port}
				if ev.QP != nil {
					a.QP = softQPOf(ev.QP)
				}
				if ev.CQ != nil {
					a.CQ = softCQOf(ev.CQ)
				}
				if ev.SRQ != nil {
					a.SRQ = softSRQOf(ev.SRQ)
				}
				select {
				case out <- a:
				case <-s.d.Done():
					return
				}
			case <-s.d.Done():
				return
			}
		}
	}()
	return out
}

type softPD struct {
	dev *softDevice
	pd  *engine.PD
}

func (p *softPD) Close() error { return softErr(p.pd.Close()) }

func (p *softPD) RegMR(buf []byte, access Access) (driver.MR, error) {
	mr, err := p.pd.RegMR(buf, engine.Access(access))
	if err != nil {
		return nil, softErr(err)
	}
	return softMR{mr}, nil
}

type softMR struct{ mr *engine.MR }

func (m softMR) Close() error { return softErr(m.mr.Close()) }
func (m softMR) LKey() uint32 { return m.mr.LKey() }
func (m softMR) RKey() uint32 { return m.mr.RKey() }
func (m softMR) Addr() uint64 { return m.mr.Addr() }

func (p *softPD) CreateQP(init *driver.QPInit) (driver.QP, error) {
	send, ok1 := init.SendCQ.(*softCQ)
	recv, ok2 := init.RecvCQ.(*softCQ)
	if !ok1 || !ok2 {
		return nil, ErrWrongDevice
	}
	e := engine.QPInit{
		Type: engine.QPType(init.Type), SendCQ: send.cq, RecvCQ: recv.cq,
		Cap: engine.QPCap(init.Cap), SigAll: init.SigAll,
	}
	if init.SRQ != nil {
		srq, ok := init.SRQ.(*softSRQ)
		if !ok {
			return nil, ErrWrongDevice
		}
		e.SRQ = srq.srq
	}
	qp, err := p.dev.d.CreateQP(p.pd, e)
	if err != nil {
		return nil, softErr(err)
	}
	s := &softQP{qp: qp}
	qp.Owner = s
	return s, nil
}

func (p *softPD) CreateSRQ(attr SRQAttr) (driver.SRQ, error) {
	srq, err := p.dev.d.CreateSRQ(p.pd, int(attr.MaxWR), int(attr.MaxSGE))
	if err != nil {
		return nil, softErr(err)
	}
	s := &softSRQ{srq: srq}
	srq.Owner = s
	if attr.SRQLimit > 0 {
		if err := srq.Arm(attr.SRQLimit); err != nil {
			srq.Close()
			return nil, softErr(err)
		}
	}
	return s, nil
}

// softAH is an address handle: the engine's address vector, which UD sends read.
type softAH struct{ ah engine.AH }

func (*softAH) Close() error { return nil }

func (p *softPD) CreateAH(attr *AHAttr) (driver.AH, error) {
	return &softAH{engine.AH{
		DGID: attr.DGID, Addr: attr.DGID.Addr(), HopLimit: attr.HopLimit, TrafficClass: attr.TrafficClass,
		FlowLabel: attr.FlowLabel, SL: attr.SL, SGIDIndex: attr.SGIDIndex, Port: attr.Port,
	}}, nil
}

type softCQ struct{ cq *engine.CQ }

func softCQOf(cq *engine.CQ) driver.CQ {
	if o, ok := cq.Owner.(*softCQ); ok {
		return o
	}
	return nil
}

func (c *softCQ) Close() error { return softErr(c.cq.Close()) }
func (c *softCQ) Depth() int   { return c.cq.Depth() }
func (c *softCQ) Resize(n int) error {
	if err := c.cq.Resize(n); err != nil {
		return softErr(fmt.Errorf("resize CQ to %d: %w", n, err))
	}
	return nil
}
func (c *softCQ) RequestNotify(s bool) error { return softErr(c.cq.RequestNotify(s)) }

// Poll hands the user's slice to the engine as is: WC and engine.WC have the same layout
// (checked by TestLayoutsMatch), so polling copies each completion once.
func (c *softCQ) Poll(wcs []WC) (int, error) {
	n, err := c.cq.Poll(unsafe.Slice((*engine.WC)(unsafe.Pointer(unsafe.SliceData(wcs))), len(wcs)))
	if err != nil { // nil first: this runs in spin loops
		err = softErr(err)
	}
	return n, err
}

type softQP struct {
	qp *engine.QP
}

func softQPOf(qp *engine.QP) driver.QP {
	if o, ok := qp.Owner.(*softQP); ok {
		return o
	}
	return nil
}

func (q *softQP) Close() error         { return softErr(q.qp.Close()) }
func (q *softQP) QPN() uint32          { return q.qp.QPN() }
func (q *softQP) State() QPState       { return QPState(q.qp.State()) }
func (q *softQP) Counters() QPCounters { return QPCounters(q.qp.Counters()) }

func (q *softQP) Modify(a *QPAttr, mask QPAttrMask) error {
	e := engine.QPAttr{
		State: engine.QPState(a.State), CurState: engine.QPState(a.CurState), PathMTU: a.PathMTU,
		QKey: a.QKey, RQPSN: wire.PSN(a.RQPSN), SQPSN: wire.PSN(a.SQPSN), DestQPN: a.DestQPN,
		AccessFlags: engine.Access(a.AccessFlags), Cap: engine.QPCap(a.Cap),
		AH: engine.AH{DGID: a.AH.DGID, Addr: a.AH.DGID.Addr(), HopLimit: a.AH.HopLimit, TrafficClass: a.AH.TrafficClass,
			FlowLabel: a.AH.FlowLabel, SL: a.AH.SL, SGIDIndex: a.AH.SGIDIndex, Port: a.AH.Port},
		PKeyIndex: a.PKeyIndex, Port: a.Port, MinRNRTimer: a.MinRNRTimer, Timeout: a.Timeout,
		RetryCnt: a.RetryCnt, RNRRetry: a.RNRRetry, MaxRdAtomic: a.MaxRdAtomic, MaxDestRdAtomic: a.MaxDestRdAtomic,
	}
	return softErr(q.qp.Modify(&e, engine.QPAttrMask(mask)))
}

func (q *softQP) Query() QPAttr {
	e := q.qp.Query()
	return QPAttr{
		State: QPState(e.State), CurState: QPState(e.CurState), PathMTU: e.PathMTU, QKey: e.QKey,
		RQPSN: uint32(e.RQPSN), SQPSN: uint32(e.SQPSN), DestQPN: e.DestQPN, AccessFlags: Access(e.AccessFlags),
		Cap: QPCap(e.Cap),
		AH: AHAttr{DGID: GID(e.AH.DGID), SGIDIndex: e.AH.SGIDIndex, HopLimit: e.AH.HopLimit, TrafficClass: e.AH.TrafficClass,
			FlowLabel: e.AH.FlowLabel, SL: e.AH.SL, Port: e.AH.Port},
		PKeyIndex: e.PKeyIndex, Port: e.Port, MinRNRTimer: e.MinRNRTimer, Timeout: e.Timeout,
		RetryCnt: e.RetryCnt, RNRRetry: e.RNRRetry, MaxRdAtomic: e.MaxRdAtomic, MaxDestRdAtomic: e.MaxDestRdAtomic,
	}
}

// PostSend converts the batch, 64 requests at a time, into engine work requests on the
// stack; the SGLs are passed through (SGE and engine.SGE have one layout). A post of more
// reaches the engine in parts, which changes only where it asks for ACKs.
func (q *softQP) PostSend(wrs []SendWR) error {
	var batch [64]engine.SendWR
	for base := 0; base < len(wrs); base += len(batch) {
		chunk := wrs[base:min(base+len(batch), len(wrs))]
		for i := range chunk {
			w := &chunk[i]
			batch[i] = engine.SendWR{
				ID: w.ID, Opcode: engine.WROpcode(w.Opcode), Flags: engine.SendFlags(w.Flags),
				SGL: unsafe.Slice((*engine.SGE)(unsafe.Pointer(unsafe.SliceData(w.SGL))), len(w.SGL)),
				Imm: w.Imm, RemoteQPN: w.RemoteQPN, RemoteQKey: w.RemoteQKey,
				RemoteAddr: w.RemoteAddr, RKey: w.RKey, CompareAdd: w.CompareAdd, Swap: w.Swap,
			}
			if w.AH != nil {
				if ah, ok := w.AH.DriverAH().(*softAH); ok {
					batch[i].AH = &ah.ah
				}
			}
			if w.Bind != nil {
				b := &engine.BindMW{RKey: w.Bind.RKey} // the engine copies it: heap, as before
				softBind(b, w.Bind.MW, w.Bind.MWBind)
				batch[i].Bind = b
			}
		}
		if err := q.qp.PostSend(batch[:len(chunk)]); err != nil {
			return postErr(err, base)
		}
	}
	return nil
}

func (q *softQP) PostRecv(wrs []RecvWR) error {
	return postErr(q.qp.PostRecv(unsafe.Slice((*engine.RecvWR)(unsafe.Pointer(unsafe.SliceData(wrs))), len(wrs))), 0)
}

// postErr classifies a post's error; base is the index in the caller's batch of the
// engine batch's first request.
func postErr(err error, base int) error {
	err = softErr(err)
	if pe, ok := err.(*PostError); ok {
		pe.Index += base
	}
	return err
}

type softSRQ struct{ srq *engine.SRQ }

func softSRQOf(s *engine.SRQ) driver.SRQ {
	if o, ok := s.Owner.(*softSRQ); ok {
		return o
	}
	return nil
}

func (s *softSRQ) Close() error { return softErr(s.srq.Close()) }
func (s *softSRQ) PostRecv(wrs []RecvWR) error {
	return postErr(s.srq.PostRecv(unsafe.Slice((*engine.RecvWR)(unsafe.Pointer(unsafe.SliceData(wrs))), len(wrs))), 0)
}
func (s *softSRQ) Arm(limit uint32) error { return softErr(s.srq.Arm(limit)) }
func (s *softSRQ) Query() SRQAttr {
	w, sge, lim := s.srq.Query()
	return SRQAttr{MaxWR: uint32(w), MaxSGE: uint32(sge), SRQLimit: lim}
}

// debugString describes a software QP's transport state (tests and logs).
func (qp *QP) debugString() string {
	if s, ok := qp.impl.(*softQP); ok {
		return s.qp.DebugString()
	}
	return ""
}

// softBind fills an engine binding from a driver one. A window or region of another
// provider stays nil there, and the engine refuses the bind.
func softBind(dst *engine.BindMW, mw driver.MWRef, b MWBind) {
	if mw != nil {
		if s, ok := mw.DriverMW().(*softMW); ok {
			dst.MW = s.mw
		}
	}
	if b.MR != nil {
		if s, ok := b.MR.DriverMR().(softMR); ok {
			dst.MR = s.mr
		}
	}
	dst.Addr, dst.Length, dst.Access = b.Addr, b.Length, engine.Access(b.Access)
}

type softMW struct{ mw *engine.MW }

func (m *softMW) Close() error { return softErr(m.mw.Close()) }
func (m *softMW) RKey() uint32 { return m.mw.RKey() }

func (p *softPD) AllocMW(t MWType) (driver.MW, error) {
	mw, err := p.pd.AllocMW(uint8(t))
	if err != nil {
		return nil, softErr(err)
	}
	return &softMW{mw}, nil
}

func (q *softQP) BindMW(mw driver.MW, id uint64, flags SendFlags, b MWBind) (uint32, error) {
	var eb engine.BindMW
	softBind(&eb, nil, b)
	m, ok := mw.(*softMW)
	if !ok {
		return 0, ErrWrongDevice
	}
	eb.MW = m.mw
	rkey, err := q.qp.BindType1(id, engine.SendFlags(flags), eb)
	return rkey, postErr(err, 0)
}

package verbs

import (
	"github.com/goverbs/goverbs/internal/engine"
	"github.com/goverbs/goverbs/verbs/driver"
)

// The software provider's objects. The engine speaks verbs/driver's types and errors, so
// its CQs, MRs, MWs and AHs are the driver objects themselves; the device, PD, QP and SRQ
// are adapted here where their methods differ.

type softDevice struct {
	d    *engine.Device
	guid uint64
}

func (s *softDevice) Close() error { return s.d.Close() }

func (s *softDevice) Progress() bool {
	ran := s.d.PollRx()
	return s.d.BusyPoll() || ran
}

// NewWaiter lets a completion channel's waiter serve the device (driver.Leader).
func (s *softDevice) NewWaiter() driver.Waiter {
	if w := s.d.NewWaiter(); w != nil {
		return w
	}
	return nil
}

func (s *softDevice) Query() DeviceAttr {
	return DeviceAttr{
		FWVer: "0.1.0", NodeGUID: s.guid, SysImageGUID: s.guid, MaxMRSize: 1<<64 - 1,
		PageSizeCap: 0xfffff000, VendorID: 0xffffff, VendorPartID: 0, HWVer: 0,
		MaxQP: engine.MaxQP, MaxQPWR: engine.MaxQPWR, MaxSGE: engine.MaxSGE, MaxSGERd: engine.MaxSGE,
		MaxCQ: 1 << 14, MaxCQE: engine.MaxCQE, MaxMR: 1<<16 - 2, MaxPD: 1 << 16,
		MaxQPRdAtom: engine.MaxRdAtomic, MaxQPInitRdAtom: engine.MaxRdAtomic,
		MaxSRQ: 1 << 14, MaxSRQWR: engine.MaxQPWR, MaxSRQSGE: engine.MaxSGE, MaxAH: 1 << 15, MaxMW: 1 << 16,
		MaxMcastGrp: engine.MaxMcastGroups, MaxMcastQPAttach: engine.MaxMcastQPAttach,
		MaxTotalMcastQPAttach: engine.MaxTotalMcastQPAttach,
		MaxInlineData:         engine.MaxInline,
		AtomicCap:             AtomicHCA, PhysPortCnt: 1, MaxPKeys: 64,
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
		return nil, err
	}
	return &softPD{dev: s, pd: pd}, nil
}

func (s *softDevice) CreateCQ(depth int, notify func()) (driver.CQ, error) {
	cq, err := s.d.CreateCQ(depth)
	if err != nil {
		return nil, err
	}
	if notify != nil {
		cq.SetHandler(notify)
	}
	return cq, nil
}

func (s *softDevice) Events() <-chan driver.AsyncEvent {
	out := make(chan driver.AsyncEvent, 16)
	go func() {
		defer close(out)
		for {
			select {
			case ev := <-s.d.Events():
				a := driver.AsyncEvent{Type: ev.Type, Port: ev.Port}
				if ev.QP != nil {
					a.QP = softQPOf(ev.QP)
				}
				if ev.CQ != nil {
					a.CQ = ev.CQ
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

func (p *softPD) Close() error { return p.pd.Close() }

func (p *softPD) RegMR(buf []byte, access Access) (driver.MR, error) {
	mr, err := p.pd.RegMR(buf, access)
	if err != nil {
		return nil, err
	}
	return mr, nil
}

func (p *softPD) AllocMW(t MWType) (driver.MW, error) {
	mw, err := p.pd.AllocMW(uint8(t))
	if err != nil {
		return nil, err
	}
	return mw, nil
}

func (p *softPD) CreateAH(attr *AHAttr) (driver.AH, error) {
	return &engine.AH{
		DGID: attr.DGID, Addr: attr.DGID.Addr(), HopLimit: attr.HopLimit, TrafficClass: attr.TrafficClass,
		FlowLabel: attr.FlowLabel, SL: attr.SL, SGIDIndex: attr.SGIDIndex, Port: attr.Port,
	}, nil
}

func (p *softPD) CreateQP(init *driver.QPInit) (driver.QP, error) {
	send, ok1 := init.SendCQ.(*engine.CQ)
	recv, ok2 := init.RecvCQ.(*engine.CQ)
	if !ok1 || !ok2 {
		return nil, ErrWrongDevice
	}
	e := engine.QPInit{Type: init.Type, SendCQ: send, RecvCQ: recv, Cap: init.Cap, SigAll: init.SigAll,
		BlockSelfMcastLoopback: init.BlockSelfMcastLoopback}
	if init.SRQ != nil {
		srq, ok := init.SRQ.(*softSRQ)
		if !ok {
			return nil, ErrWrongDevice
		}
		e.SRQ = srq.srq
	}
	qp, err := p.dev.d.CreateQP(p.pd, e)
	if err != nil {
		return nil, err
	}
	s := &softQP{qp: qp}
	qp.Owner = s
	return s, nil
}

func (p *softPD) CreateSRQ(attr SRQAttr) (driver.SRQ, error) {
	srq, err := p.dev.d.CreateSRQ(p.pd, int(attr.MaxWR), int(attr.MaxSGE))
	if err != nil {
		return nil, err
	}
	s := &softSRQ{srq: srq}
	srq.Owner = s
	if attr.SRQLimit > 0 {
		if err := srq.Arm(attr.SRQLimit); err != nil {
			srq.Close()
			return nil, err
		}
	}
	return s, nil
}

// softQP adapts the engine's QP: its type-1 bind takes the engine's objects, and async
// events name it.
type softQP struct {
	qp *engine.QP
}

func softQPOf(qp *engine.QP) driver.QP {
	if o, ok := qp.Owner.(*softQP); ok {
		return o
	}
	return nil
}

func (q *softQP) Close() error                { return q.qp.Close() }
func (q *softQP) QPN() uint32                 { return q.qp.QPN() }
func (q *softQP) State() QPState              { return q.qp.State() }
func (q *softQP) Counters() QPCounters        { return q.qp.Counters() }
func (q *softQP) PostSend(wrs []SendWR) error { return q.qp.PostSend(wrs) }
func (q *softQP) PostRecv(wrs []RecvWR) error { return q.qp.PostRecv(wrs) }

func (q *softQP) Modify(a *QPAttr, mask QPAttrMask) error { return q.qp.Modify(a, mask) }
func (q *softQP) Query() QPAttr                           { return q.qp.Query() }

func (q *softQP) AttachMcast(gid GID, lid uint16) error { return q.qp.AttachMcast(gid, lid) }
func (q *softQP) DetachMcast(gid GID, lid uint16) error { return q.qp.DetachMcast(gid, lid) }

func (q *softQP) BindMW(mw driver.MW, id uint64, flags SendFlags, b MWBind) (uint32, error) {
	m, ok := mw.(*engine.MW)
	if !ok {
		return 0, engine.ErrBadBind
	}
	eb := engine.BindMW{MW: m, Addr: b.Addr, Length: b.Length, Access: b.Access}
	if b.MR != nil { // a nil reference unbinds; one to a nil or foreign region is refused
		if eb.MR, ok = b.MR.DriverMR().(*engine.MR); !ok || eb.MR == nil {
			return 0, engine.ErrBadBind
		}
	}
	return q.qp.BindType1(id, flags, eb)
}

// debugString describes a software QP's transport state (tests and logs).
func (qp *QP) debugString() string {
	if s, ok := qp.impl.(*softQP); ok {
		return s.qp.DebugString()
	}
	return ""
}

// softSRQ adapts the engine's SRQ, whose Query returns the attributes one by one.
type softSRQ struct{ srq *engine.SRQ }

func softSRQOf(s *engine.SRQ) driver.SRQ {
	if o, ok := s.Owner.(*softSRQ); ok {
		return o
	}
	return nil
}

func (s *softSRQ) Close() error                { return s.srq.Close() }
func (s *softSRQ) PostRecv(wrs []RecvWR) error { return s.srq.PostRecv(wrs) }
func (s *softSRQ) Arm(limit uint32) error      { return s.srq.Arm(limit) }
func (s *softSRQ) Query() SRQAttr {
	w, sge, lim := s.srq.Query()
	return SRQAttr{MaxWR: uint32(w), MaxSGE: uint32(sge), SRQLimit: lim}
}

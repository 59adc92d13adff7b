//go:build linux

package server

import (
	"errors"
	"os"
	"sync/atomic"

	"github.com/goverbs/goverbs/internal/attach"
	"github.com/goverbs/goverbs/internal/engine"
	"github.com/goverbs/goverbs/internal/shm"
	"github.com/goverbs/goverbs/verbs"
	"github.com/goverbs/goverbs/verbs/driver"
)

// The objects of a session, each its engine object and what the client shares.

type pdObj struct {
	pd  *engine.PD
	use int // objects made from it, which it may not outlive
}

type mrObj struct {
	pd  *pdObj
	mr  *engine.MR
	reg *shm.Region // the client's memfd, mapped here
}

func (m *mrObj) DriverMR() driver.MR { return m.mr }

type ahObj struct {
	pd *pdObj
	ah driver.AH
}

func (a *ahObj) DriverAH() driver.AH { return a.ah }

type mwObj struct {
	pd *pdObj
	mw driver.MW
}

func (m *mwObj) DriverMW() driver.MW { return m.mw }

// maxRegion bounds what a client may ask us to map for one region.
const maxRegion = 1 << 40

var errUnsupportedSGE = driver.NewError(driver.ErrLimit, "more SGEs than the attach protocol's queues carry")

// command runs one request and writes its reply's payload; the files it returns go
// with the reply.
func (s *session) command(op attach.Op, r *attach.Reader, w *attach.Writer, fds []int) ([]*os.File, error) {
	if op != attach.OpRegMR && op != attach.OpOpenXRCD && op != attach.OpEngineStat {
		shm.CloseFDs(fds)
		fds = nil
	}
	if op == attach.OpHello {
		return s.hello(r, w)
	}
	if op.CM() {
		return s.cmCommand(op, r, w)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	// A command sees, and a modify or destroy flushes, the receives an RC QP left in
	// its ring (lazyRecv), as on an RNIC once ibv_post_recv returned.
	s.takeLazyRecvs()
	if s.closing {
		shm.CloseFDs(fds)
		return nil, driver.NewError(driver.ErrClosed, "device is closing")
	}
	// And it comes after the client's posts before it, as a device has them once they
	// are posted: a datagram posted, then its AH or QP destroyed, leaves first
	// (engine.QP.Close sends what the engine deferred). mckey's sender posts its
	// messages unsignaled and at once destroys its AH and QP: its receiver, waiting for
	// them, waited for ever in about one run of five beside a busy loop.
	s.step()
	dev := s.d.dev
	switch op {
	case attach.OpEngine:
		return s.engine(r, w)
	case attach.OpEngineStat:
		return nil, s.engineStat(fds)
	case attach.OpQueryDevice:
		a := dev.Query()
		w.PutDeviceAttr(&a)
	case attach.OpQueryPort:
		p := r.U8()
		if p != 1 {
			return nil, driver.ErrInvalidPort
		}
		a := dev.QueryPort(p)
		w.PutPortAttr(&a)
	case attach.OpQueryGID:
		p := r.U8()
		if p != 1 {
			return nil, driver.ErrInvalidPort
		}
		t := dev.GIDTable(p)
		w.U32(uint32(len(t)))
		for _, e := range t {
			w.U32(uint32(e.Index))
			w.Bytes(e.GID[:])
			w.Str(e.Type)
		}
	case attach.OpAllocPD:
		pd, err := dev.AllocPD()
		if err != nil {
			return nil, err
		}
		w.U32(s.add(&pdObj{pd: pd.(*engine.PD)}))
	case attach.OpDeallocPD:
		h := r.U32()
		p, err := get[*pdObj](s, h)
		if err != nil {
			return nil, err
		}
		if p.use > 0 {
			return nil, engine.ErrPDBusy
		}
		if err := p.pd.Close(); err != nil {
			return nil, err
		}
		delete(s.objs, h)
	case attach.OpRegMR:
		return nil, s.regMR(r, w, fds)
	case attach.OpDeregMR:
		h := r.U32()
		m, err := get[*mrObj](s, h)
		if err != nil {
			return nil, err
		}
		if err := s.deregMR(m); err != nil {
			return nil, err
		}
		delete(s.objs, h)
	case attach.OpCreateCQ:
		return s.createCQ(r, w)
	case attach.OpResizeCQ:
		c, err := get[*cqObj](s, r.U32())
		if err != nil {
			return nil, err
		}
		depth := int(r.U32())
		// A device's CQ holds every completion not yet polled: here the client's ring
		// holds some, and the daemon others. The engine sends the posts it deferred
		// before it counts (the client's were taken above).
		if err := c.eng.ResizeHolding(depth, c.prod.Pending()+len(c.carry)+len(c.extra)); err != nil {
			return nil, err
		}
		w.U32(uint32(c.cq.Depth()))
	case attach.OpDestroyCQ:
		h := r.U32()
		c, err := get[*cqObj](s, h)
		if err != nil {
			return nil, err
		}
		if c.users > 0 {
			return nil, engine.ErrCQBusy
		}
		if err := s.destroyCQ(c); err != nil {
			return nil, err
		}
		delete(s.objs, h)
	case attach.OpCreateQP:
		return s.createQP(r, w)
	case attach.OpModifyQP:
		q, err := get[*qpObj](s, r.U32())
		if err != nil {
			return nil, err
		}
		mask := driver.QPAttrMask(r.U32())
		a := r.QPAttr()
		if r.Err != nil {
			return nil, r.Err
		}
		// The checks verbs.QP.Modify makes in-process (the transition against IBTA table
		// 91, attribute ranges): a client in C has no package verbs to make them.
		if err := verbs.CheckModify(q.typ, q.qp.State(), s.d.dev.Query().PhysPortCnt, &a, mask); err != nil {
			return nil, err
		}
		return nil, q.qp.Modify(&a, mask)
	case attach.OpQueryQP:
		q, err := get[*qpObj](s, r.U32())
		if err != nil {
			return nil, err
		}
		a := q.qp.Query()
		w.PutQPAttr(&a)
		w.U8(uint8(q.qp.State()))
	case attach.OpDestroyQP:
		h := r.U32()
		q, err := get[*qpObj](s, h)
		if err != nil {
			return nil, err
		}
		if err := s.destroyQP(q); err != nil {
			return nil, err
		}
		delete(s.objs, h)
	case attach.OpCreateSRQ:
		return s.createSRQ(r, w)
	case attach.OpArmSRQ:
		q, err := get[*srqObj](s, r.U32())
		if err != nil {
			return nil, err
		}
		return nil, q.srq.Arm(r.U32())
	case attach.OpQuerySRQ:
		q, err := get[*srqObj](s, r.U32())
		if err != nil {
			return nil, err
		}
		a := q.srq.Query()
		w.U32(a.MaxWR)
		w.U32(a.MaxSGE)
		w.U32(a.SRQLimit)
	case attach.OpDestroySRQ:
		h := r.U32()
		q, err := get[*srqObj](s, h)
		if err != nil {
			return nil, err
		}
		if q.users > 0 {
			return nil, driver.NewError(driver.ErrBusy, "SRQ still used by a QP")
		}
		if err := s.destroySRQ(q); err != nil {
			return nil, err
		}
		delete(s.objs, h)
	case attach.OpCreateAH:
		p, err := get[*pdObj](s, r.U32())
		if err != nil {
			return nil, err
		}
		a := r.AH()
		ah, err := p.pd.CreateAH(&a)
		if err != nil {
			return nil, err
		}
		p.use++
		w.U32(s.add(&ahObj{pd: p, ah: ah}))
	case attach.OpDestroyAH:
		h := r.U32()
		a, err := get[*ahObj](s, h)
		if err != nil {
			return nil, err
		}
		if err := a.ah.Close(); err != nil {
			return nil, err
		}
		a.pd.use--
		delete(s.objs, h)
	case attach.OpAllocMW:
		p, err := get[*pdObj](s, r.U32())
		if err != nil {
			return nil, err
		}
		mw, err := p.pd.AllocMW(driver.MWType(r.U8()))
		if err != nil {
			return nil, err
		}
		p.use++
		w.U32(s.add(&mwObj{pd: p, mw: mw}))
		w.U32(mw.RKey())
	case attach.OpDeallocMW:
		h := r.U32()
		m, err := get[*mwObj](s, h)
		if err != nil {
			return nil, err
		}
		if err := m.mw.Close(); err != nil {
			return nil, err
		}
		m.pd.use--
		delete(s.objs, h)
	case attach.OpBindMW:
		q, err := get[*qpObj](s, r.U32())
		if err != nil {
			return nil, err
		}
		m, err := get[*mwObj](s, r.U32())
		if err != nil {
			return nil, err
		}
		id, flags := r.U64(), driver.SendFlags(r.U32())
		mh := r.U32()
		b := driver.MWBind{Addr: r.U64(), Length: r.U64(), Access: driver.Access(r.U32())}
		if mh != 0 {
			mr, err := get[*mrObj](s, mh)
			if err != nil {
				return nil, err
			}
			b.MR = mr
		}
		rkey, err := q.qp.BindMW(m.mw, id, flags, b)
		if err != nil {
			return nil, err
		}
		w.U32(rkey)
	case attach.OpAttachMcast, attach.OpDetachMcast:
		q, err := get[*qpObj](s, r.U32())
		if err != nil {
			return nil, err
		}
		var gid driver.GID
		r.Fixed(gid[:])
		lid := r.U16()
		if op == attach.OpAttachMcast {
			return nil, q.qp.AttachMcast(gid, lid)
		}
		return nil, q.qp.DetachMcast(gid, lid)
	case attach.OpQPCounters:
		q, err := get[*qpObj](s, r.U32())
		if err != nil {
			return nil, err
		}
		w.PutQPCounters(q.qp.Counters())
	case attach.OpDeviceCounters:
		w.PutCounters(dev.Counters())
	case attach.OpOpenXRCD:
		return nil, s.openXRCD(r, w, fds)
	case attach.OpCloseXRCD:
		h := r.U32()
		x, err := get[*xrcdObj](s, h)
		if err != nil {
			return nil, err
		}
		if err := s.closeXRCD(x); err != nil {
			return nil, err
		}
		delete(s.objs, h)
	case attach.OpCreateXRCSRQ:
		return s.createXRCSRQ(r, w)
	case attach.OpCreateXRCRecvQP:
		return nil, s.createXRCRecvQP(r, w)
	default:
		return nil, driver.NewError(errors.ErrUnsupported, "unknown command")
	}
	return nil, nil
}

// regMR maps the client's memfd (fds[0]) and registers length bytes at offset in it
// under the client's address iova: the engine's key table then checks every access
// against exactly that range of the client's memory.
func (s *session) regMR(r *attach.Reader, w *attach.Writer, fds []int) error {
	if len(fds) != 1 {
		shm.CloseFDs(fds)
		return driver.NewError(driver.ErrInvalidAttr, "REG_MR carries one memfd")
	}
	ph, access, iova, length, off := r.U32(), driver.Access(r.U32()), r.U64(), r.U64(), r.U64()
	p, err := get[*pdObj](s, ph)
	if err != nil || r.Err != nil || length == 0 || length > maxRegion || off > maxRegion {
		shm.CloseFDs(fds)
		if err == nil {
			err = driver.NewError(driver.ErrInvalidAttr, "bad region")
		}
		return err
	}
	reg, err := shm.Map(os.NewFile(uintptr(fds[0]), "attach-mr"), int(off+length), maxRegion)
	if err != nil {
		return driver.NewError(driver.ErrInvalidAttr, err.Error())
	}
	buf := reg.Bytes()[off : off+length : off+length]
	mr, err := p.pd.RegMRAt(buf, iova, access)
	if err != nil {
		reg.Close()
		return err
	}
	p.use++
	w.U32(s.add(&mrObj{pd: p, mr: mr, reg: reg}))
	w.U32(mr.LKey())
	w.U32(mr.RKey())
	return nil
}

// deregMR closes the region, which waits out the engine's accesses in progress, and
// only then unmaps the memory.
func (s *session) deregMR(m *mrObj) error {
	if err := m.mr.Close(); err != nil {
		return err
	}
	m.pd.use--
	m.reg.Close()
	return nil
}

// cqObj is a CQ: the engine's, and the ring the pump copies its completions into.
type cqObj struct {
	h        uint32
	cq       driver.CQ
	eng      *engine.CQ // cq, for Take
	reg      *shm.Region
	ev       *shm.Eventfd // written when an armed CQ fires: the client's completion channel
	prod     *shm.SlotProducer
	arm      *atomic.Uint32
	overflow *atomic.Uint32
	users    int         // QPs using it
	due      atomic.Bool // the engine's event came while the pump held the session
	broken   bool
	wcs      [32]driver.WC
	carry    []driver.WC // polled from the engine, not yet in the ring
	extra    []driver.WC // completions of WQEs the engine refused
}

func (s *session) createCQ(r *attach.Reader, w *attach.Writer) ([]*os.File, error) {
	depth := r.U32()
	if depth == 0 || depth > engine.MaxCQE {
		return nil, engine.ErrCQSize
	}
	l := attach.CQRegion(depth)
	reg, err := shm.Create("goverbs-cq", l.Size)
	if err != nil {
		return nil, err
	}
	ev, err := shm.NewUnwatchedEventfd() // the daemon only signals it
	if err != nil {
		reg.Close()
		return nil, err
	}
	mem := reg.Bytes()
	shm.InitSlotRing(mem, l.Slots, attach.CQELen)
	prod, err := shm.NewSlotProducer(mem, l.Slots, attach.CQELen)
	if err != nil {
		reg.Close()
		ev.Close()
		return nil, err
	}
	c := &cqObj{reg: reg, ev: ev, prod: prod, arm: attach.Word(mem, l.CtlOff), overflow: attach.Word(mem, l.CtlOff+4)}
	cq, err := s.d.dev.CreateCQ(int(depth), func() { s.completed(c) })
	if err != nil {
		reg.Close()
		ev.Close()
		return nil, err
	}
	c.cq, c.eng = cq, cq.(*engine.CQ)
	cq.RequestNotify(false) // completions are moved on the engine's events (completed)
	c.h = s.add(c)
	s.cqs = append(s.cqs, c)
	s.d.own(cq, owner{s: s, h: c.h, kind: attach.EventCQ})
	w.U32(c.h)
	w.U32(uint32(cq.Depth()))
	w.U32(uint32(l.Slots))
	w.U32(uint32(l.CtlOff))
	w.U32(uint32(l.Size))
	f1, err := dupFile(reg.File())
	if err != nil {
		return nil, err
	}
	f2, err := dupFile(ev.File())
	if err != nil {
		f1.Close()
		return nil, err
	}
	return []*os.File{f1, f2}, nil
}

func (s *session) destroyCQ(c *cqObj) error {
	if err := c.cq.Close(); err != nil {
		return err
	}
	s.d.disown(c.cq)
	s.cqs = remove(s.cqs, c)
	c.reg.Close()
	c.ev.Close()
	return nil
}

func remove[T comparable](list []T, x T) []T {
	for i, y := range list {
		if y == x {
			return append(list[:i], list[i+1:]...)
		}
	}
	return list
}

// XRC (IBTA Vol. 1 Annex A14): domains, XRC SRQs by number, the XRC_RECV QP's choice of
// SRQ for each request, and the checks the annex asks of it.

package engine

import (
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/goverbs/goverbs/verbs/driver"
	"github.com/goverbs/goverbs/wire"
)

var (
	ErrXRCDClosed = driver.NewError(driver.ErrClosed, "XRC domain is closed")
	ErrXRCDBusy   = driver.NewError(driver.ErrBusy, "XRC domain is still used by an SRQ or QP")
	ErrXRCDWrong  = driver.NewError(driver.ErrWrongDevice, "XRC domain of another device")
	ErrNoSRQN     = driver.NewError(driver.ErrLimit, "no free SRQ number")
)

// xrcdKey names the file a shared domain belongs to (ibv_open_xrcd's inode).
type xrcdKey struct{ dev, ino uint64 }

// xrcDomain is one XRC domain: what its XRC SRQs and XRC_RECV QPs compare to decide
// whether a request may use an SRQ. Several opens (XRCD) may share it.
type xrcDomain struct {
	dev    *Device
	key    xrcdKey
	shared bool // in dev.xrcds under key
	opens  int  // XRCDs open on it; dev.xrcdMu
	gone   atomic.Bool
}

// XRCD is one open of an XRC domain (driver.XRCD): the objects made through it keep it
// open, as ibv_close_xrcd refuses with EBUSY while they exist.
type XRCD struct {
	dom    *xrcDomain
	mu     sync.Mutex
	users  int
	closed bool
}

// OpenXRCD opens an XRC domain (driver.XRCDevice): fd -1 a new one of its own, else the
// one of fd's file, shared by every open of the same inode on this device, created when
// oflags has O_CREAT; O_EXCL refuses a file that has one (xrcdFileKey, the flags and the
// errors are platform code).
func (d *Device) OpenXRCD(fd int, oflags int) (driver.XRCD, error) {
	if d.closed.Load() {
		return nil, ErrDeviceClosed
	}
	if fd < 0 {
		return &XRCD{dom: &xrcDomain{dev: d, opens: 1}}, nil
	}
	key, err := xrcdFileKey(fd)
	if err != nil {
		return nil, err
	}
	d.xrcdMu.Lock()
	defer d.xrcdMu.Unlock()
	dom := d.xrcds[key]
	switch {
	case dom != nil && oflags&oExcl != 0:
		return nil, fmt.Errorf("verbs: XRC domain of fd %d: %w", fd, errExist)
	case dom == nil && oflags&oCreat == 0:
		return nil, fmt.Errorf("verbs: XRC domain of fd %d: %w", fd, errNotExist)
	case dom == nil:
		dom = &xrcDomain{dev: d, key: key, shared: true}
		if d.xrcds == nil {
			d.xrcds = make(map[xrcdKey]*xrcDomain)
		}
		d.xrcds[key] = dom
	}
	dom.opens++
	return &XRCD{dom: dom}, nil
}

// Close closes the open; the domain goes with its last open.
func (x *XRCD) Close() error {
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.closed {
		return nil
	}
	if x.users > 0 {
		return ErrXRCDBusy
	}
	x.closed = true
	dom := x.dom
	d := dom.dev
	d.xrcdMu.Lock()
	dom.opens--
	if dom.opens == 0 {
		dom.gone.Store(true)
		if dom.shared {
			delete(d.xrcds, dom.key)
		}
	}
	d.xrcdMu.Unlock()
	return nil
}

// use takes a reference for an SRQ or QP made through the open.
func (x *XRCD) use() error {
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.closed {
		return ErrXRCDClosed
	}
	x.users++
	return nil
}

func (x *XRCD) release() {
	x.mu.Lock()
	x.users--
	x.mu.Unlock()
}

// CreateQP creates an XRC_RECV QP in the domain (driver.XRCD).
func (x *XRCD) CreateQP(init *driver.QPInit) (driver.QP, error) {
	if init.Type != driver.QPTypeXRCRecv {
		return nil, fmt.Errorf("%w (QP type %v from an XRC domain)", ErrBadOpcode, init.Type)
	}
	if err := x.use(); err != nil {
		return nil, err
	}
	qp, err := x.dom.dev.CreateQP(nil, QPInit{Type: driver.QPTypeXRCRecv, XRCD: x})
	if err != nil {
		x.release()
		return nil, err
	}
	return qp, nil
}

// CreateXRCSRQ creates an XRC SRQ (driver.XRCPD): its WQEs name memory of pd, its
// completions go to cq, and it serves the XRC_RECV QPs of xrcd's domain.
func (pd *PD) CreateXRCSRQ(xrcd driver.XRCD, cq driver.CQ, attr driver.SRQAttr) (driver.SRQ, error) {
	x, ok1 := xrcd.(*XRCD)
	c, ok2 := cq.(*CQ)
	if !ok1 || !ok2 || x.dom.dev != pd.dev || c.dev != pd.dev {
		return nil, driver.ErrWrongDevice
	}
	if err := x.use(); err != nil {
		return nil, err
	}
	s, err := pd.dev.CreateSRQ(pd, int(attr.MaxWR), int(attr.MaxSGE))
	if err != nil {
		x.release()
		return nil, err
	}
	s.xrcd, s.cq = x, c
	c.ref(1)
	if attr.SRQLimit > 0 {
		if err := s.Arm(attr.SRQLimit); err != nil {
			s.Close()
			return nil, err
		}
	}
	return s, nil
}

// Num returns the SRQ's number (driver.NumberedSRQ), which an XRCETH names.
func (s *SRQ) Num() uint32 { return s.num }

// numberSRQ gives s a free 24-bit number and makes it findable by it.
func (d *Device) numberSRQ(s *SRQ) error {
	d.srqMu.Lock()
	defer d.srqMu.Unlock()
	if d.srqs == nil {
		d.srqs = make(map[uint32]*SRQ)
	}
	for range wire.PSNMask {
		d.nextSRQN = (d.nextSRQN + 1) & wire.PSNMask
		if _, used := d.srqs[d.nextSRQN]; !used {
			s.num = d.nextSRQN
			d.srqs[s.num] = s
			return nil
		}
	}
	return ErrNoSRQN
}

func (d *Device) forgetSRQ(s *SRQ) {
	d.srqMu.Lock()
	delete(d.srqs, s.num)
	d.srqMu.Unlock()
}

func (d *Device) lookupSRQ(n uint32) *SRQ {
	d.srqMu.RLock()
	s := d.srqs[n]
	d.srqMu.RUnlock()
	return s
}

// xrcTarget chooses the XRC SRQ of a request at an XRC_RECV QP: the one its XRCETH names
// (Annex A14). The SRQ must exist, be an XRC SRQ, be of the QP's domain (a target serves
// only the SRQs of its own domain: that is what lets processes share a node's targets
// without reaching one another's memory), and stay the same within a message. A request
// failing these is an invalid request, NAKed as the other request checks of 9.7.4.1 are
// (invalid: false); a duplicate is only dropped. qp.mu is held.
func (qp *QP) xrcTarget(p *wire.Packet, psn wire.PSN, dup bool) bool {
	d := qp.dev
	r := &qp.resp
	s := d.lookupSRQ(p.XRCETH.SRQN())
	ok := true
	switch {
	case s == nil || s.xrcd == nil || s.isClosed():
		d.counters.XRCBadSRQN.Add(1)
		ok = false
	case s.xrcd.dom != qp.xrcd.dom || s.xrcd.dom.gone.Load():
		d.counters.XRCDomainViolation.Add(1)
		ok = false
	case r.inMsg != msgNone && s != r.xsrq:
		ok = false // the SRQ changed within a message
	}
	if ok {
		r.xsrq = s
		return true
	}
	if !dup {
		qp.respError(wire.NAKInvalidRequest, driver.WCRemInvReqErr, psn, driver.EventQPReqErr)
	}
	return false
}

// memPD is the PD a request's memory checks use: an XRC target's is the PD of the XRC
// SRQ the request names (Annex A14), every other QP's its own.
func (qp *QP) memPD() *PD {
	if s := qp.resp.xsrq; s != nil {
		return s.pd
	}
	return qp.pd
}

// rcq is the CQ a receive completes in: an XRC target's is the named SRQ's.
func (qp *QP) rcq() *CQ {
	if s := qp.resp.xsrq; s != nil {
		return s.cq
	}
	return qp.recvCQ
}

package attach

import (
	"github.com/goverbs/goverbs/internal/attach"
	"github.com/goverbs/goverbs/verbs/driver"
)

// XRC (IBTA Vol. 1 Annex A14) on an attached device: the daemon's domains, XRC SRQs and
// XRC_RECV QPs (docs/attach-protocol.md, "XRC"). A domain opened with a file is shared
// with every process that opens the same file on the device, as on a kernel device.

// XRCD is one open of an XRC domain in the daemon.
type XRCD struct {
	d *Device
	h uint32
}

// OpenXRCD opens the domain of fd's file, which goes to the daemon with the command
// (it names the inode by the descriptor, never by a number we send), or a domain of our
// own for fd -1.
func (d *Device) OpenXRCD(fd int, oflags int) (driver.XRCD, error) {
	var fds []int
	if fd >= 0 {
		fds = []int{fd}
	}
	r, files, err := d.ctl.call(attach.OpOpenXRCD, func(w *attach.Writer) { w.U32(uint32(oflags)) }, fds...)
	if err == nil {
		err = want(&r, files, 0)
	}
	if err != nil {
		return nil, err
	}
	return &XRCD{d: d, h: r.U32()}, nil
}

func (x *XRCD) Close() error {
	_, err := x.d.call(attach.OpCloseXRCD, func(w *attach.Writer) { w.U32(x.h) })
	return err
}

// CreateQP creates an XRC_RECV QP: a handle and a number, no rings.
func (x *XRCD) CreateQP(init *driver.QPInit) (driver.QP, error) {
	if init.Type != driver.QPTypeXRCRecv {
		return nil, driver.NewError(driver.ErrInvalidAttr, "an XRC domain creates XRC_RECV QPs only")
	}
	r, err := x.d.call(attach.OpCreateXRCRecvQP, func(w *attach.Writer) { w.U32(x.h) })
	if err != nil {
		return nil, err
	}
	q := &QP{d: x.d, h: r.U32(), qpn: r.U32()}
	x.d.track(q.h, q)
	return q, nil
}

// CreateXRCSRQ creates an XRC SRQ of the PD's memory in xrcd, completing in cq.
func (p *PD) CreateXRCSRQ(xrcd driver.XRCD, cq driver.CQ, a driver.SRQAttr) (driver.SRQ, error) {
	x, ok1 := xrcd.(*XRCD)
	c, ok2 := cq.(*CQ)
	if !ok1 || !ok2 || x.d != p.d || c.d != p.d {
		return nil, driver.ErrWrongDevice
	}
	return p.createSRQ(attach.OpCreateXRCSRQ, func(w *attach.Writer) {
		w.U32(p.h)
		w.U32(x.h)
		w.U32(c.h)
		w.U32(a.MaxWR)
		w.U32(a.MaxSGE)
		w.U32(a.SRQLimit)
	})
}

// Num is the SRQ's number (driver.NumberedSRQ); 0 for a basic SRQ.
func (s *SRQ) Num() uint32 { return s.num }

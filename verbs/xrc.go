package verbs

import (
	"errors"
	"fmt"

	"github.com/goverbs/goverbs/verbs/driver"
)

// XRC, the eXtended Reliable Connection service (IBTA Vol. 1 Annex A14): a sender
// reaches every receiving process through one XRC_SEND QP per remote node instead of one
// RC QP per remote process, each message naming the XRC SRQ at the target that receives
// it. The receive side is an XRC domain (XRCD) holding XRC SRQs and XRC_RECV QPs; a
// request arriving at an XRC_RECV QP lands in the SRQ its XRCETH names, which must be in
// the same domain.

// XRCD is an XRC domain (struct ibv_xrcd).
type XRCD struct {
	dev  *Device
	impl driver.XRCD
	life life
}

// SRQType is the kind of a shared receive queue (ibv_srq_type).
type SRQType = driver.SRQType

// SRQ types.
const (
	SRQTypeBasic = driver.SRQTypeBasic
	SRQTypeXRC   = driver.SRQTypeXRC
)

// DeviceXRC is the capability bit of a device with XRC (IBV_DEVICE_XRC) in
// DeviceAttr.DeviceCapFlags.
const DeviceXRC = driver.DeviceXRC

var errXRCDClosed = driver.NewError(ErrClosed, "XRC domain is closed")

// OpenXRCD opens an XRC domain (ibv_open_xrcd). With fd -1 the domain is new and the
// caller's alone. Otherwise the domain is the one of the file fd refers to, shared by
// every open of that file (the same inode) on this device in this process: oflags with
// os.O_CREATE makes it if the file has none (without, the error is syscall.EAGAIN, as the
// kernel answers); with os.O_EXCL a file that has one is syscall.EINVAL. Each open is
// closed on its own; the domain lives until the last. XRC needs a device whose DeviceCapFlags have DeviceXRC.
func (d *Device) OpenXRCD(fd int, oflags int) (*XRCD, error) {
	if d.closed.Load() {
		return nil, errDeviceClosed
	}
	x, ok := d.impl.(driver.XRCDevice)
	if !ok || d.impl.Query().DeviceCapFlags&DeviceXRC == 0 {
		return nil, fmt.Errorf("verbs: device %s has no XRC: %w", d.Name(), errors.ErrUnsupported)
	}
	impl, err := x.OpenXRCD(fd, oflags)
	if err != nil {
		return nil, &opError{"open XRC domain", err}
	}
	return &XRCD{dev: d, impl: impl}, nil
}

// Device returns the device the domain was opened on.
func (x *XRCD) Device() *Device { return x.dev }

// Close closes this open of the domain (ibv_close_xrcd). It fails with ErrBusy while
// SRQs or QPs made through it exist.
func (x *XRCD) Close() error {
	if x.dev.closed.Load() {
		return errDeviceClosed
	}
	return x.life.close(errXRCDClosed, x.impl.Close)
}

// CreateQP creates an XRC_RECV QP in the domain (ibv_create_qp_ex with IBV_QPT_XRC_RECV
// and an xrcd). attr.Type must be QPTypeXRCRecv; the QP has no queues, CQs or PD of its
// own, so the rest of attr is ignored: what it receives completes in the CQ of the XRC
// SRQ each request names.
func (x *XRCD) CreateQP(attr QPInitAttr) (*QP, error) {
	if attr.Type != QPTypeXRCRecv {
		return nil, fmt.Errorf("%w: an XRC domain creates XRC_RECV QPs, not %v", ErrInvalidAttr, attr.Type)
	}
	if err := x.dev.usable(&x.life, errXRCDClosed); err != nil {
		return nil, err
	}
	impl, err := x.impl.CreateQP(&driver.QPInit{Type: QPTypeXRCRecv})
	if err != nil {
		return nil, &opError{"create QP", err}
	}
	qp := &QP{dev: x.dev, xrcd: x, impl: impl, typ: QPTypeXRCRecv}
	if err := x.dev.track(qp, nil, nil, true); err != nil {
		impl.Close()
		return nil, err
	}
	return qp, nil
}

// SRQInitEx describes a shared receive queue to create (struct ibv_srq_init_attr_ex).
// A basic SRQ needs only Attr; an XRC SRQ (Type SRQTypeXRC) needs its domain and the CQ
// its receives complete in.
type SRQInitEx struct {
	Type SRQType
	Attr SRQAttr
	XRCD *XRCD
	CQ   *CQ
}

// CreateSRQEx creates a shared receive queue (ibv_create_srq_ex): a basic one as
// CreateSRQ does, or an XRC SRQ, whose receive WQEs name memory of pd and which serves
// the XRC_RECV QPs of init.XRCD; peers name it by its Num.
func (pd *PD) CreateSRQEx(init SRQInitEx) (*SRQ, error) {
	switch init.Type {
	case SRQTypeBasic:
		if init.XRCD != nil || init.CQ != nil {
			return nil, fmt.Errorf("%w: a basic SRQ takes no XRC domain or CQ", ErrInvalidAttr)
		}
		return pd.CreateSRQ(init.Attr)
	case SRQTypeXRC:
	default:
		return nil, fmt.Errorf("%w: SRQ type %v", ErrInvalidAttr, init.Type)
	}
	if init.XRCD == nil || init.CQ == nil {
		return nil, fmt.Errorf("%w: an XRC SRQ needs an XRC domain and a CQ", ErrInvalidAttr)
	}
	if init.XRCD.dev != pd.dev || init.CQ.dev != pd.dev {
		return nil, ErrWrongDevice
	}
	if err := pd.usable(); err != nil {
		return nil, err
	}
	if err := pd.dev.usable(&init.XRCD.life, errXRCDClosed); err != nil {
		return nil, err
	}
	if init.CQ.life.closed.Load() {
		return nil, errCQClosed
	}
	xp, ok := pd.impl.(driver.XRCPD)
	if !ok {
		return nil, fmt.Errorf("verbs: device %s has no XRC SRQs: %w", pd.dev.Name(), errors.ErrUnsupported)
	}
	impl, err := xp.CreateXRCSRQ(init.XRCD.impl, init.CQ.impl, init.Attr)
	if err != nil {
		return nil, &opError{"create SRQ", err}
	}
	s := &SRQ{pd: pd, xrcd: init.XRCD, cq: init.CQ, impl: impl}
	if err := pd.dev.track(nil, nil, s, true); err != nil {
		impl.Close()
		return nil, err
	}
	return s, nil
}

// Type returns the SRQ's kind.
func (s *SRQ) Type() SRQType {
	if s.xrcd != nil {
		return SRQTypeXRC
	}
	return SRQTypeBasic
}

// XRCD returns an XRC SRQ's domain; nil for a basic SRQ.
func (s *SRQ) XRCD() *XRCD { return s.xrcd }

// Num returns the SRQ's number (ibv_get_srq_num): what a sender puts in
// SendWR.RemoteSRQN to reach an XRC SRQ.
func (s *SRQ) Num() (uint32, error) {
	if s.life.closed.Load() {
		return 0, errSRQClosed
	}
	n, ok := s.impl.(driver.NumberedSRQ)
	if !ok {
		return 0, fmt.Errorf("verbs: the provider numbers no SRQs: %w", errors.ErrUnsupported)
	}
	return n.Num(), nil
}

package verbs

import (
	"fmt"

	"github.com/goverbs/goverbs/verbs/driver"
)

// QP is a queue pair (struct ibv_qp). Post and poll from any goroutine; the QP serialises.
type QP struct {
	dev    *Device
	pd     *PD // nil for an XRC_RECV QP, which belongs to an XRC domain instead
	xrcd   *XRCD
	impl   driver.QP
	typ    QPType
	sendCQ *CQ
	recvCQ *CQ
	srq    *SRQ
	life   life
}

// CreateQP creates a queue pair in the RESET state (ibv_create_qp). An XRC_SEND QP
// (QPTypeXRCSend) has no receive queue: it takes no RecvCQ or SRQ. XRC_RECV QPs are made
// by XRCD.CreateQP.
func (pd *PD) CreateQP(attr QPInitAttr) (*QP, error) {
	xrcSend := attr.Type == QPTypeXRCSend
	if attr.SendCQ == nil || attr.RecvCQ == nil && !xrcSend {
		return nil, fmt.Errorf("%w: a QP needs a send and a receive CQ", ErrInvalidAttr)
	}
	if xrcSend && attr.SRQ != nil {
		return nil, fmt.Errorf("%w: an XRC_SEND QP has no receive queue, so no SRQ", ErrInvalidAttr)
	}
	if attr.SendCQ.dev != pd.dev || attr.RecvCQ != nil && attr.RecvCQ.dev != pd.dev || attr.SRQ != nil && attr.SRQ.pd != pd {
		return nil, ErrWrongDevice
	}
	if attr.SRQ != nil && attr.SRQ.xrcd != nil {
		return nil, fmt.Errorf("%w: an XRC SRQ serves XRC_RECV QPs through its number, not as a QP's SRQ", ErrInvalidAttr)
	}
	switch attr.Type {
	case QPTypeRC, QPTypeUC, QPTypeUD, QPTypeXRCSend:
	case QPTypeXRCRecv:
		return nil, fmt.Errorf("%w: an XRC_RECV QP is created from its XRC domain (XRCD.CreateQP)", ErrInvalidAttr)
	default:
		return nil, fmt.Errorf("%w: QP type %v", ErrInvalidAttr, attr.Type)
	}
	if err := pd.usable(); err != nil {
		return nil, err
	}
	if attr.SendCQ.life.closed.Load() || attr.RecvCQ != nil && attr.RecvCQ.life.closed.Load() {
		return nil, errCQClosed
	}
	if attr.SRQ != nil && attr.SRQ.life.closed.Load() {
		return nil, errSRQClosed
	}
	init := driver.QPInit{Type: attr.Type, SendCQ: attr.SendCQ.impl, Cap: attr.Cap, SigAll: attr.SigAll,
		BlockSelfMcastLoopback: attr.BlockSelfMcastLoopback}
	if xrcSend {
		attr.RecvCQ = nil // ignored, as ibv_create_qp ignores an XRC_SEND QP's recv_cq
		init.Cap.MaxRecvWR, init.Cap.MaxRecvSGE = 0, 0
	} else {
		init.RecvCQ = attr.RecvCQ.impl
	}
	if attr.SRQ != nil {
		init.SRQ = attr.SRQ.impl
	}
	impl, err := pd.impl.CreateQP(&init)
	if err != nil {
		return nil, &opError{"create QP", err}
	}
	qp := &QP{dev: pd.dev, pd: pd, impl: impl, typ: attr.Type, sendCQ: attr.SendCQ, recvCQ: attr.RecvCQ, srq: attr.SRQ}
	if err := pd.dev.track(qp, nil, nil, true); err != nil {
		impl.Close()
		return nil, err
	}
	return qp, nil
}

// QPN returns the QP number a peer sends to.
func (qp *QP) QPN() uint32 { return qp.impl.QPN() }

// Type returns the QP's transport service.
func (qp *QP) Type() QPType { return qp.typ }

// State returns the QP's current state: ERR once the QP or its device is closed.
func (qp *QP) State() QPState {
	if qp.life.closed.Load() {
		return QPStateErr
	}
	return qp.impl.State()
}

// usable reports why the QP cannot be used, nil if it can. Device.Close marks its QPs
// closed, so one load tells.
func (qp *QP) usable() error {
	if qp.life.closed.Load() {
		return errQPClosed
	}
	return nil
}

// PD returns the QP's protection domain; nil for an XRC_RECV QP.
func (qp *QP) PD() *PD { return qp.pd }

// XRCD returns the XRC domain of an XRC_RECV QP; nil for the other types.
func (qp *QP) XRCD() *XRCD { return qp.xrcd }

// Device returns the device the QP belongs to.
func (qp *QP) Device() *Device { return qp.dev }

// Modify changes the QP's attributes and state (ibv_modify_qp). mask says which fields
// of attr apply; the transition and its attributes are checked against IBTA table 91.
func (qp *QP) Modify(attr *QPAttr, mask QPAttrMask) error {
	if err := qp.usable(); err != nil {
		return err
	}
	if err := CheckModify(qp.typ, qp.impl.State(), qp.dev.ports, attr, mask); err != nil {
		return err
	}
	return qp.impl.Modify(attr, mask)
}

// CheckModify makes Modify's checks of a transition from state cur of a QP of type t on
// a device with ports ports: the transition and its attributes against IBTA table 91,
// and each attribute's range. The attach daemon makes them for its clients, whose QPs it
// modifies at the driver's level.
func CheckModify(t QPType, cur QPState, ports uint8, attr *QPAttr, mask QPAttrMask) error {
	if mask&QPAttrCurState != 0 && attr.CurState != cur {
		return fmt.Errorf("%w: CUR_STATE %v but the QP is %v", ErrInvalidState, attr.CurState, cur)
	}
	next := cur
	if mask&QPAttrState != 0 {
		next = attr.State
	}
	if next > QPStateErr {
		return fmt.Errorf("%w: state %v", ErrInvalidState, next)
	}
	if err := checkTransition(t, cur, next, mask); err != nil {
		return err
	}
	if mask&QPAttrPort != 0 && (attr.Port < 1 || attr.Port > ports) {
		return fmt.Errorf("%w: %d (the device has %d)", ErrInvalidPort, attr.Port, ports)
	}
	if mask&QPAttrPathMTU != 0 && !attr.PathMTU.Valid() {
		return fmt.Errorf("%w: path MTU %d", ErrInvalidAttr, attr.PathMTU)
	}
	if mask&QPAttrAV != 0 && attr.AH.DGID.IsZero() {
		return fmt.Errorf("%w: address vector without a destination GID", ErrInvalidAttr)
	}
	if mask&QPAttrPKeyIndex != 0 && attr.PKeyIndex != 0 {
		return fmt.Errorf("%w: P_Key index %d (the table has one entry)", ErrInvalidAttr, attr.PKeyIndex)
	}
	if mask&(QPAttrMaxQPRdAtomic) != 0 && int(attr.MaxRdAtomic) > maxRdAtomic ||
		mask&QPAttrMaxDestRdAtomic != 0 && int(attr.MaxDestRdAtomic) > maxRdAtomic {
		return fmt.Errorf("%w: max_rd_atomic above %d", ErrInvalidAttr, maxRdAtomic)
	}
	if mask&(QPAttrRetryCnt|QPAttrRNRRetry) != 0 && (attr.RetryCnt > 7 || attr.RNRRetry > 7) ||
		mask&QPAttrTimeout != 0 && attr.Timeout > 31 || mask&QPAttrMinRNRTimer != 0 && attr.MinRNRTimer > 31 {
		return fmt.Errorf("%w: retry_cnt, rnr_retry, timeout or min_rnr_timer out of range", ErrInvalidAttr)
	}
	return nil
}

// Query returns the QP's attributes (ibv_query_qp).
func (qp *QP) Query() QPAttr { return qp.impl.Query() }

// PostSend posts send work requests (ibv_post_send). On error, *PostError says which
// request was refused; the ones before it were posted. It does not allocate.
func (qp *QP) PostSend(wrs ...SendWR) error {
	// The provider reads wrs in place and keeps none of it, so a variadic call and a
	// literal SGL can stay on the caller's stack (see noescape).
	if qp.life.closed.Load() {
		return &PostError{Err: errQPClosed}
	}
	return qp.impl.PostSend(noescape(wrs))
}

// PostRecv posts receive work requests (ibv_post_recv).
func (qp *QP) PostRecv(wrs ...RecvWR) error {
	if qp.life.closed.Load() {
		return &PostError{Err: errQPClosed}
	}
	return qp.impl.PostRecv(noescape(wrs))
}

// Counters returns the QP's statistics.
func (qp *QP) Counters() QPCounters { return qp.impl.Counters() }

// AttachMcast attaches a UD QP to the multicast group gid (ibv_attach_mcast): the QP
// receives a copy of every UD SEND to the group (remote QPN 0xFFFFFF, McastQPN) whose
// Q_Key is its own. On RoCEv2 a group GID is an IP multicast address, IPv4-mapped
// (::ffff:239.1.2.3, GIDFromAddr) or IPv6 (ff0e::...); lid is InfiniBand's and unused.
// Attaching twice is no error. To send to the group, post to an AH whose DGID is gid.
func (qp *QP) AttachMcast(gid GID, lid uint16) error {
	if err := qp.checkMcast(gid); err != nil {
		return err
	}
	if err := qp.impl.AttachMcast(gid, lid); err != nil {
		return &opError{"attach multicast", err}
	}
	return nil
}

// DetachMcast detaches the QP from the group (ibv_detach_mcast); once it returns, the
// group's packets no longer reach the QP. A QP not attached is an ErrInvalidAttr.
// Closing a QP detaches it from every group.
func (qp *QP) DetachMcast(gid GID, lid uint16) error {
	if err := qp.checkMcast(gid); err != nil {
		return err
	}
	if err := qp.impl.DetachMcast(gid, lid); err != nil {
		return &opError{"detach multicast", err}
	}
	return nil
}

// checkMcast is what every provider's attach needs: a live UD QP and a multicast GID.
func (qp *QP) checkMcast(gid GID) error {
	if err := qp.usable(); err != nil {
		return err
	}
	if qp.typ != QPTypeUD {
		return fmt.Errorf("%w: only a UD QP joins a multicast group, not %v", ErrInvalidAttr, qp.typ)
	}
	if !gid.Addr().IsMulticast() {
		return fmt.Errorf("%w: %v is not a multicast GID", ErrInvalidAttr, gid.Addr())
	}
	return nil
}

// Close destroys the QP (ibv_destroy_qp). Outstanding work is discarded: no completion
// of it appears afterwards.
func (qp *QP) Close() error {
	return qp.life.close(errQPClosed, func() error {
		if err := qp.impl.Close(); err != nil {
			return err
		}
		qp.dev.track(qp, nil, nil, false)
		return nil
	})
}

// SRQ is a shared receive queue (struct ibv_srq).
type SRQ struct {
	pd   *PD
	xrcd *XRCD // an XRC SRQ's domain; nil for a basic SRQ
	cq   *CQ   // an XRC SRQ's completion queue
	impl driver.SRQ
	life life
}

// CreateSRQ creates a shared receive queue (ibv_create_srq).
func (pd *PD) CreateSRQ(attr SRQAttr) (*SRQ, error) {
	if err := pd.usable(); err != nil {
		return nil, err
	}
	impl, err := pd.impl.CreateSRQ(attr)
	if err != nil {
		return nil, &opError{"create SRQ", err}
	}
	s := &SRQ{pd: pd, impl: impl}
	if err := pd.dev.track(nil, nil, s, true); err != nil {
		impl.Close()
		return nil, err
	}
	return s, nil
}

// PostRecv posts receive work requests to the shared pool (ibv_post_srq_recv).
func (s *SRQ) PostRecv(wrs ...RecvWR) error {
	if s.life.closed.Load() { // Device.Close sets it too
		return &PostError{Err: errSRQClosed}
	}
	return s.impl.PostRecv(noescape(wrs))
}

// Arm sets the SRQ limit: when fewer than limit WQEs remain, one EventSRQLimitReached is
// raised and the limit disarms (ibv_modify_srq with IBV_SRQ_LIMIT).
func (s *SRQ) Arm(limit uint32) error {
	if s.life.closed.Load() {
		return errSRQClosed
	}
	return s.impl.Arm(limit)
}

// Query returns the SRQ's attributes (ibv_query_srq).
func (s *SRQ) Query() SRQAttr { return s.impl.Query() }

// Close destroys the SRQ (ibv_destroy_srq); it fails with ErrBusy while QPs use it.
func (s *SRQ) Close() error {
	return s.life.close(errSRQClosed, func() error {
		if err := s.impl.Close(); err != nil {
			return err
		}
		s.pd.dev.track(nil, nil, s, false)
		return nil
	})
}

// maxRdAtomic is the largest max_rd_atomic / max_dest_rd_atomic a QP accepts (rxe: 128).
const maxRdAtomic = 128

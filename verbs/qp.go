package verbs

import (
	"fmt"
)

// QP is a queue pair (struct ibv_qp). Post and poll from any goroutine; the QP serialises.
type QP struct {
	pd     *PD
	impl   qpImpl
	typ    QPType
	sendCQ *CQ
	recvCQ *CQ
	srq    *SRQ
}

// CreateQP creates a queue pair in the RESET state (ibv_create_qp).
func (pd *PD) CreateQP(attr QPInitAttr) (*QP, error) {
	if attr.SendCQ == nil || attr.RecvCQ == nil {
		return nil, fmt.Errorf("%w: a QP needs a send and a receive CQ", ErrInvalidAttr)
	}
	if attr.SendCQ.dev != pd.dev || attr.RecvCQ.dev != pd.dev || attr.SRQ != nil && attr.SRQ.pd != pd {
		return nil, ErrWrongDevice
	}
	switch attr.Type {
	case QPTypeRC, QPTypeUC, QPTypeUD:
	default:
		return nil, fmt.Errorf("%w: QP type %v", ErrInvalidAttr, attr.Type)
	}
	impl, err := pd.impl.createQP(&attr)
	if err != nil {
		return nil, fmt.Errorf("verbs: create QP: %w", err)
	}
	qp := &QP{pd: pd, impl: impl, typ: attr.Type, sendCQ: attr.SendCQ, recvCQ: attr.RecvCQ, srq: attr.SRQ}
	pd.dev.track(qp, nil, nil, true)
	return qp, nil
}

// QPN returns the QP number a peer sends to.
func (qp *QP) QPN() uint32 { return qp.impl.qpn() }

// Type returns the QP's transport service.
func (qp *QP) Type() QPType { return qp.typ }

// State returns the QP's current state.
func (qp *QP) State() QPState { return qp.impl.state() }

// PD returns the QP's protection domain.
func (qp *QP) PD() *PD { return qp.pd }

// Modify changes the QP's attributes and state (ibv_modify_qp). mask says which fields
// of attr apply; the transition and its attributes are checked against IBTA table 91.
func (qp *QP) Modify(attr *QPAttr, mask QPAttrMask) error {
	cur := qp.impl.state()
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
	if err := checkTransition(qp.typ, cur, next, mask); err != nil {
		return err
	}
	if mask&QPAttrPort != 0 && attr.Port != 1 {
		return ErrInvalidPort
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
	return qp.impl.modify(attr, mask)
}

// Query returns the QP's attributes (ibv_query_qp).
func (qp *QP) Query() QPAttr { return qp.impl.query() }

// PostSend posts send work requests (ibv_post_send). On error, *PostError says which
// request was refused; the ones before it were posted. It does not allocate.
func (qp *QP) PostSend(wrs ...SendWR) error {
	// A direct call where the provider is known lets the compiler see that wrs does not
	// escape, so a variadic call allocates nothing; the interface call would.
	if s, ok := qp.impl.(*softQP); ok {
		return s.postSend(wrs)
	}
	return qp.impl.postSend(cloneSendWRs(wrs))
}

// PostRecv posts receive work requests (ibv_post_recv).
func (qp *QP) PostRecv(wrs ...RecvWR) error {
	if s, ok := qp.impl.(*softQP); ok {
		return s.postRecv(wrs)
	}
	return qp.impl.postRecv(cloneRecvWRs(wrs))
}

// cloneSendWRs copies wrs for a provider behind the interface, SGLs and bindings
// included, without ever storing the caller's SGL slices: stored, even in a copy, they
// would escape, and every SGL a caller writes as a literal would cost an allocation per
// post with the software provider too. TestPostWithSGLLiteralAllocatesNothing checks.
func cloneSendWRs(wrs []SendWR) []SendWR {
	out := make([]SendWR, len(wrs))
	for i := range wrs {
		w := &wrs[i]
		out[i] = SendWR{
			ID: w.ID, Opcode: w.Opcode, Flags: w.Flags, SGL: append([]SGE(nil), w.SGL...), Imm: w.Imm,
			RemoteAddr: w.RemoteAddr, RKey: w.RKey, CompareAdd: w.CompareAdd, Swap: w.Swap,
			RemoteQPN: w.RemoteQPN, RemoteQKey: w.RemoteQKey,
		}
		if w.AH != nil { // copied too: storing the caller's pointer would leak the SGLs
			a := *w.AH
			out[i].AH = &a
		}
		if w.Bind != nil {
			b := *w.Bind
			out[i].Bind = &b
		}
	}
	return out
}

// cloneRecvWRs is cloneSendWRs for receive work requests.
func cloneRecvWRs(wrs []RecvWR) []RecvWR {
	out := make([]RecvWR, len(wrs))
	for i := range wrs {
		out[i] = RecvWR{ID: wrs[i].ID, SGL: append([]SGE(nil), wrs[i].SGL...)}
	}
	return out
}

// Counters returns the QP's statistics.
func (qp *QP) Counters() QPCounters { return qp.impl.counters() }

// Close destroys the QP (ibv_destroy_qp). Outstanding work is discarded.
func (qp *QP) Close() error {
	err := qp.impl.close()
	qp.pd.dev.track(qp, nil, nil, false)
	return err
}

// PostError says which work request of a PostSend/PostRecv batch was refused.
type PostError struct {
	Index int
	Err   error
}

func (e *PostError) Error() string { return fmt.Sprintf("verbs: work request %d: %v", e.Index, e.Err) }
func (e *PostError) Unwrap() error { return e.Err }

// SRQAttr describes a shared receive queue (struct ibv_srq_attr).
type SRQAttr struct {
	MaxWR    uint32
	MaxSGE   uint32
	SRQLimit uint32
}

// SRQ is a shared receive queue (struct ibv_srq).
type SRQ struct {
	pd   *PD
	impl srqImpl
}

// CreateSRQ creates a shared receive queue (ibv_create_srq).
func (pd *PD) CreateSRQ(attr SRQAttr) (*SRQ, error) {
	impl, err := pd.impl.createSRQ(attr)
	if err != nil {
		return nil, fmt.Errorf("verbs: create SRQ: %w", err)
	}
	s := &SRQ{pd: pd, impl: impl}
	pd.dev.track(nil, nil, s, true)
	return s, nil
}

// PostRecv posts receive work requests to the shared pool (ibv_post_srq_recv).
func (s *SRQ) PostRecv(wrs ...RecvWR) error {
	if p, ok := s.impl.(*softSRQ); ok { // a direct call: wrs does not escape (see QP.PostRecv)
		return p.postRecv(wrs)
	}
	return s.impl.postRecv(cloneRecvWRs(wrs))
}

// Arm sets the SRQ limit: when fewer than limit WQEs remain, one EventSRQLimitReached is
// raised and the limit disarms (ibv_modify_srq with IBV_SRQ_LIMIT).
func (s *SRQ) Arm(limit uint32) error { return s.impl.arm(limit) }

// Query returns the SRQ's attributes (ibv_query_srq).
func (s *SRQ) Query() SRQAttr { return s.impl.query() }

// Close destroys the SRQ; it fails while QPs use it.
func (s *SRQ) Close() error {
	if err := s.impl.close(); err != nil {
		return err
	}
	s.pd.dev.track(nil, nil, s, false)
	return nil
}

// maxRdAtomic is the largest max_rd_atomic / max_dest_rd_atomic a QP accepts (rxe: 128).
const maxRdAtomic = 128

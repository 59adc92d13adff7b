package verbs

import "fmt"

// The QP state-transition table of IBTA Vol. 1 11.2.4.2 (table 91, "QP/EE state
// transition properties"), for the RC, UC and UD services: for each transition the
// attributes that must be given and those that may be. Every other attribute is refused,
// and a transition not in the table is refused: the same checks the Linux kernel applies
// for every provider, so programs that pass here pass on hardware. The XRC types
// (Annex A14) follow RC but for the halves of the transport they lack: see init.
type transitionRule struct {
	required, optional [11]QPAttrMask // indexed by QPType (RC=2, UC=3, UD=4, XRC_SEND=9, XRC_RECV=10)
}

func rule(rc, uc, ud QPAttrMask) [11]QPAttrMask {
	return [11]QPAttrMask{2: rc, 3: uc, 4: ud, QPTypeXRCSend: rc, QPTypeXRCRecv: rc}
}

// The XRC rows that differ from RC's. An XRC_SEND QP has no responder, so RTR asks
// nothing of one (no max_dest_rd_atomic or min_rnr_timer); an XRC_RECV QP has no
// requester, so RTS asks only the timeout and the PSN its responses start from (the ACK
// timeout is unused but required, as ib_modify_qp_is_ok does).
func init() {
	set := func(from, to QPState, t QPType, req, opt QPAttrMask) {
		r := transitions[[2]QPState{from, to}]
		r.required[t], r.optional[t] = req, opt
		transitions[[2]QPState{from, to}] = r
	}
	set(QPStateInit, QPStateRTR, QPTypeXRCSend, QPAttrAV|QPAttrPathMTU|QPAttrDestQPN|QPAttrRQPSN, pathOpt)
	set(QPStateRTR, QPStateRTS, QPTypeXRCRecv, QPAttrTimeout|QPAttrSQPSN, rtsOpt|QPAttrMinRNRTimer)
	set(QPStateRTR, QPStateRTS, QPTypeXRCSend,
		QPAttrSQPSN|QPAttrTimeout|QPAttrRetryCnt|QPAttrRNRRetry|QPAttrMaxQPRdAtomic, rtsOpt)
	set(QPStateRTS, QPStateRTS, QPTypeXRCSend, 0, rtsOpt)
	set(QPStateSQD, QPStateRTS, QPTypeXRCSend, 0, rtsOpt)
}

const (
	pathOpt = QPAttrAltPath | QPAttrAccessFlags | QPAttrPKeyIndex
	rtsOpt  = QPAttrCurState | QPAttrAccessFlags | QPAttrAltPath | QPAttrPathMigState
)

var transitions = map[[2]QPState]transitionRule{
	{QPStateReset, QPStateInit}: {
		required: rule(QPAttrPKeyIndex|QPAttrPort|QPAttrAccessFlags, QPAttrPKeyIndex|QPAttrPort|QPAttrAccessFlags, QPAttrPKeyIndex|QPAttrPort|QPAttrQKey),
	},
	{QPStateInit, QPStateInit}: {
		optional: rule(QPAttrPKeyIndex|QPAttrPort|QPAttrAccessFlags, QPAttrPKeyIndex|QPAttrPort|QPAttrAccessFlags, QPAttrPKeyIndex|QPAttrPort|QPAttrQKey),
	},
	{QPStateInit, QPStateRTR}: {
		required: rule(QPAttrAV|QPAttrPathMTU|QPAttrDestQPN|QPAttrRQPSN|QPAttrMaxDestRdAtomic|QPAttrMinRNRTimer,
			QPAttrAV|QPAttrPathMTU|QPAttrDestQPN|QPAttrRQPSN, 0),
		optional: rule(pathOpt, pathOpt, QPAttrPKeyIndex|QPAttrQKey),
	},
	{QPStateRTR, QPStateRTS}: {
		required: rule(QPAttrSQPSN|QPAttrTimeout|QPAttrRetryCnt|QPAttrRNRRetry|QPAttrMaxQPRdAtomic, QPAttrSQPSN, QPAttrSQPSN),
		optional: rule(rtsOpt|QPAttrMinRNRTimer, rtsOpt, QPAttrCurState|QPAttrQKey),
	},
	{QPStateRTS, QPStateRTS}: {
		optional: rule(rtsOpt|QPAttrMinRNRTimer, rtsOpt, QPAttrCurState|QPAttrQKey),
	},
	{QPStateRTS, QPStateSQD}: {
		optional: rule(QPAttrEnSQDAsyncNotify, QPAttrEnSQDAsyncNotify, QPAttrEnSQDAsyncNotify),
	},
	{QPStateSQD, QPStateRTS}: {
		optional: rule(rtsOpt|QPAttrMinRNRTimer, rtsOpt, QPAttrCurState|QPAttrQKey),
	},
	{QPStateSQD, QPStateSQD}: {
		optional: rule(QPAttrPKeyIndex|QPAttrQKey|QPAttrAV|QPAttrAltPath|QPAttrAccessFlags|QPAttrMaxQPRdAtomic|
			QPAttrMaxDestRdAtomic|QPAttrMinRNRTimer|QPAttrTimeout|QPAttrRetryCnt|QPAttrRNRRetry|QPAttrPathMigState,
			QPAttrAV|QPAttrAltPath|QPAttrAccessFlags|QPAttrPKeyIndex|QPAttrPathMigState,
			QPAttrPKeyIndex|QPAttrQKey),
	},
	{QPStateSQE, QPStateRTS}: {
		optional: rule(0, QPAttrCurState|QPAttrAccessFlags, QPAttrCurState|QPAttrQKey),
	},
}

// checkTransition validates a Modify call the way ib_modify_qp_is_ok does: the
// transition exists for the QP type, every required attribute is given and nothing else
// but the optional ones. Moving to RESET or ERR is allowed from every state.
func checkTransition(t QPType, cur, next QPState, mask QPAttrMask) error {
	if mask&QPAttrCurState != 0 && cur != QPStateRTS && cur != QPStateSQD && cur != QPStateSQE {
		// CUR_STATE may only be given where the table lists it.
		return fmt.Errorf("%w: CUR_STATE in state %v", ErrExtraAttr, cur)
	}
	extra := mask &^ (QPAttrState | QPAttrCurState)
	if next == QPStateReset || next == QPStateErr {
		if extra != 0 {
			return fmt.Errorf("%w: %v -> %v takes no attributes, got %v", ErrExtraAttr, cur, next, extra)
		}
		return nil
	}
	r, ok := transitions[[2]QPState{cur, next}]
	if !ok || int(t) >= len(r.required) || (t == QPTypeRC || t.XRC()) && cur == QPStateSQE { // RC and XRC have no SQE state: their errors go to ERR
		return fmt.Errorf("%w: %v -> %v for %v", ErrInvalidState, cur, next, t)
	}
	if miss := r.required[t] &^ mask; miss != 0 {
		return fmt.Errorf("%w: %v -> %v for %v needs %v", ErrMissingAttr, cur, next, t, miss)
	}
	if bad := extra &^ (r.required[t] | r.optional[t] | QPAttrCurState); bad != 0 {
		return fmt.Errorf("%w: %v -> %v for %v does not take %v", ErrExtraAttr, cur, next, t, bad)
	}
	return nil
}

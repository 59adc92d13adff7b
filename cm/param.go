package cm

import (
	"fmt"

	"github.com/goverbs/goverbs/cm/mad"
	"github.com/goverbs/goverbs/verbs"
)

// Param is one side's part of a connection, as librdmacm's struct
// rdma_conn_param plus the QP.
type Param struct {
	// QP is the program's RC or UC QP, on the agent's device, in the RESET
	// or INIT state (InitQP brings it to INIT as rdma_create_qp does, so the
	// program can post receives first); the CM brings it to RTS. When QP is
	// nil the CM creates one in PD with QPInit (its Type defaults to RC) and
	// closes it with the Conn.
	QP     *verbs.QP
	PD     *verbs.PD
	QPInit verbs.QPInitAttr

	// PrivateData goes to the peer: at most 56 bytes in Dial (rdma_cm's
	// header takes 36 of the REQ's 92), 196 in Accept.
	PrivateData []byte

	// ResponderResources is how many RDMA READs and atomics the peer may
	// have outstanding at this side; InitiatorDepth how many this side
	// will have outstanding at the peer. Each is cut to what the other
	// side offers, as rdma_cm does.
	ResponderResources uint8
	InitiatorDepth     uint8

	// RetryCount and RNRRetryCount are the transport's retry counts
	// (ibv_qp_attr's retry_cnt and rnr_retry); 0 means 7, the value every
	// librdmacm example sets, and a count above 7 is 7, as rdma_cm cuts it. MinRNRTimer is the RNR NAK delay this side
	// asks for (0 means 12, 0.64 ms).
	RetryCount    uint8
	RNRRetryCount uint8
	MinRNRTimer   uint8

	// TOS is the connection's type of service (rdma_set_option's RDMA_OPTION_ID_TOS):
	// the path's traffic class, which the QP's address vector takes and RoCEv2 packets
	// carry in their IP header's DS field (its upper six bits, the DSCP; the ECN bits
	// are congestion control's). Dial puts it in the REQ's path and the passive side
	// takes the REQ's, as rdma_cm does on RoCE, so one side chooses for both: Accept
	// ignores its own. ResolveUD gives it to the address handle it returns. 0 is the
	// default class.
	TOS uint8
	// ACKTimeout is the QP's local ACK timeout (RDMA_OPTION_ID_ACK_TIMEOUT; 4.096 µs ×
	// 2^ACKTimeout, at most 31), which otherwise comes from the path: 19 (about 2 s)
	// on RoCE, or on the passive side the REQ's. Dial also puts it in the REQ's path,
	// as the kernel's rdma_cm derives the path's packet lifetime from it, so the peer
	// gets it too unless it sets its own. 0 keeps the path's (an infinite timeout,
	// the IBTA's 0, cannot be asked for).
	ACKTimeout uint8
}

// MaxACKTimeout is the largest ACK timeout exponent (the QP attribute has 5 bits).
const MaxACKTimeout = 31

// check refuses parameters no connection can take.
func (p *Param) check() error {
	if p.ACKTimeout > MaxACKTimeout {
		return fmt.Errorf("%w: ACK timeout %d (at most %d)", ErrBadOption, p.ACKTimeout, MaxACKTimeout)
	}
	return nil
}

func orDefault(v, d uint8) uint8 {
	if v == 0 {
		return d
	}
	return v
}

// retryCount is a retry count (Param's RetryCount, RNRRetryCount) as a connection uses
// it: 0 means 7, and a count above 7 is cut to 7, as the kernel's rdma_cm cuts it
// (cma_connect_ib, cma_accept_ib): the CM messages' fields and the QP attributes have 3
// bits, and libfabric's verbs provider asks for 15.
func retryCount(v uint8) uint8 { return min(orDefault(v, 7), 7) }

// qp returns the QP to bring up, creating it when Param asks the CM to.
func (p *Param) qp(a *Agent) (qp *verbs.QP, own bool, err error) {
	if p.QP != nil {
		if t := p.QP.Type(); t != verbs.QPTypeRC && t != verbs.QPTypeUC {
			return nil, false, ErrQP
		}
		if s := p.QP.State(); s != verbs.QPStateReset && s != verbs.QPStateInit {
			return nil, false, ErrQP
		}
		return p.QP, false, nil
	}
	if p.PD == nil {
		return nil, false, ErrQP
	}
	init := p.QPInit
	if init.Type == 0 {
		init.Type = verbs.QPTypeRC
	}
	qp, err = p.PD.CreateQP(init)
	return qp, err == nil, err
}

// The path values rdma_cm uses on RoCE, where there is no subnet manager
// to ask: a packet lifetime of 18 (about 1 s), so the QPs' local ACK
// timeout is 19 (2.1 s); hop limit 64.
const (
	localACKTimeout = 19
	hopLimit        = 64
)

// InitQP moves a new RC or UC QP from RESET to INIT, the state librdmacm's
// rdma_create_qp leaves the QP of a connected id in. A QP in INIT takes
// receives but no traffic (IBTA Vol. 1 10.3.1, the QP state diagram), so a
// program can post its first receives before Dial or Request.Accept and the
// peer's first SEND finds one; the CM takes the QP on to RTR and RTS.
//
// The attributes are the ones Dial and Accept set: port 1, P_Key index 0
// (RoCE's one default P_Key) and the access rights the CM grants every
// connection, local write and remote WRITE, READ and atomics. rdma_create_qp
// leaves the rights 0 until the connection sets them; a QP in INIT executes no
// request, so the two cannot be told apart.
//
// A UD QP is ReadyUD's. A QP of another type or in a state other than RESET
// is left as it is, with an error that wraps ErrQP.
func InitQP(qp *verbs.QP) error {
	if t := qp.Type(); t != verbs.QPTypeRC && t != verbs.QPTypeUC {
		return fmt.Errorf("%w: InitQP takes an RC or UC QP, not %v", ErrQP, t)
	}
	if s := qp.State(); s != verbs.QPStateReset {
		return fmt.Errorf("%w: InitQP takes a QP in RESET, this one is in %v", ErrQP, s)
	}
	return toInit(qp)
}

// toInit moves a QP to INIT (or, in INIT, sets it again) with the access
// rights rdma_cm gives: remote READ, WRITE and atomics.
func toInit(qp *verbs.QP) error {
	return qp.Modify(&verbs.QPAttr{State: verbs.QPStateInit, Port: 1, PKeyIndex: 0,
		AccessFlags: verbs.AccessLocalWrite | verbs.AccessRemoteWrite | verbs.AccessRemoteRead | verbs.AccessRemoteAtomic},
		verbs.QPAttrState|verbs.QPAttrPKeyIndex|verbs.QPAttrPort|verbs.QPAttrAccessFlags)
}

// rtr is what a QP needs to receive from its peer.
type rtr struct {
	peer            verbs.GID
	tc              uint8 // the path's traffic class (TOS)
	mtu             verbs.MTU
	destQPN, rqPSN  uint32
	maxDestRdAtomic uint8
	minRNRTimer     uint8
}

func toRTR(qp *verbs.QP, r rtr) error {
	attr := verbs.QPAttr{State: verbs.QPStateRTR, PathMTU: r.mtu, DestQPN: r.destQPN, RQPSN: r.rqPSN,
		AH: verbs.AHAttr{DGID: r.peer, Port: 1, HopLimit: hopLimit, TrafficClass: r.tc}}
	mask := verbs.QPAttrState | verbs.QPAttrAV | verbs.QPAttrPathMTU | verbs.QPAttrDestQPN | verbs.QPAttrRQPSN
	if qp.Type() == verbs.QPTypeRC {
		attr.MaxDestRdAtomic, attr.MinRNRTimer = r.maxDestRdAtomic, r.minRNRTimer
		mask |= verbs.QPAttrMaxDestRdAtomic | verbs.QPAttrMinRNRTimer
	}
	return qp.Modify(&attr, mask)
}

// rts is what a QP needs to send to its peer.
type rts struct {
	sqPSN                    uint32
	timeout, retry, rnrRetry uint8
	maxRdAtomic              uint8
}

func toRTS(qp *verbs.QP, r rts) error {
	attr := verbs.QPAttr{State: verbs.QPStateRTS, SQPSN: r.sqPSN}
	mask := verbs.QPAttrState | verbs.QPAttrSQPSN
	if qp.Type() == verbs.QPTypeRC {
		attr.Timeout, attr.RetryCnt, attr.RNRRetry, attr.MaxRdAtomic = r.timeout, r.retry, r.rnrRetry, r.maxRdAtomic
		mask |= verbs.QPAttrTimeout | verbs.QPAttrRetryCnt | verbs.QPAttrRNRRetry | verbs.QPAttrMaxQPRdAtomic
	}
	return qp.Modify(&attr, mask)
}

func transportOf(qp *verbs.QP) mad.TransportType {
	if qp.Type() == verbs.QPTypeUC {
		return mad.TransportUC
	}
	return mad.TransportRC
}

// mtuFromIB converts the REQ's path MTU field, which uses the same
// enumeration as verbs (1 = 256 ... 5 = 4096).
func mtuFromIB(v uint8) verbs.MTU {
	m := verbs.MTU(v)
	if m < verbs.MTU256 || m > verbs.MTU4096 {
		return verbs.MTU1024
	}
	return m
}

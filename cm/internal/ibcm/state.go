package ibcm

// State is a connection's state in the CM state machine (IBTA Vol. 1
// 12.9.6, figures 171 and 172; the names are Linux's ib_cm_state's).
type State uint8

// Connection states. Idle is both the start and the end: a connection that
// returns to it is forgotten.
const (
	StateIdle       State = iota
	StateREQSent          // active: REQ out, waiting for REP (retransmitting REQ)
	StateMRAREQRcvd       // active: the passive side sent MRA; waiting longer, no retransmission
	StateREPRcvd          // active: REP in, waiting for the consumer to send RTU or REJ
	StateREQRcvd          // passive: REQ in, waiting for the consumer to accept or reject
	StateMRAREQSent       // passive: as REQRcvd, after an MRA answered a duplicate REQ
	StateREPSent          // passive: REP out, waiting for RTU (retransmitting REP)
	StateMRAREPRcvd       // passive: the active side sent MRA for our REP
	StateEstablished
	StateDREQSent // DREQ out, waiting for DREP (retransmitting DREQ)
	StateTimeWait // disconnected; IDs held until stray packets have drained

	StateSIDRReqSent // active SIDR: SIDR_REQ out, waiting for SIDR_REP (retransmitting)
	StateSIDRReqRcvd // passive SIDR: waiting for the consumer's answer
)

var stateNames = [...]string{
	StateIdle: "IDLE", StateREQSent: "REQ_SENT", StateMRAREQRcvd: "MRA_REQ_RCVD",
	StateREPRcvd: "REP_RCVD", StateREQRcvd: "REQ_RCVD", StateMRAREQSent: "MRA_REQ_SENT",
	StateREPSent: "REP_SENT", StateMRAREPRcvd: "MRA_REP_RCVD", StateEstablished: "ESTABLISHED",
	StateDREQSent: "DREQ_SENT", StateTimeWait: "TIMEWAIT",
	StateSIDRReqSent: "SIDR_REQ_SENT", StateSIDRReqRcvd: "SIDR_REQ_RCVD",
}

func (s State) String() string {
	if int(s) < len(stateNames) {
		return stateNames[s]
	}
	return "state?"
}

// EventKind says what an Event reports.
type EventKind uint8

// Events the agent reports to its consumer.
const (
	// EventRequest: a REQ for a listened service created a passive
	// connection in REQRcvd. The consumer answers with Accept or Reject.
	EventRequest EventKind = iota + 1
	// EventReply: the REP to our REQ arrived (REPRcvd). The consumer
	// readies its QP and answers with RTU, or with Reject.
	EventReply
	// EventEstablished: the passive side's connection is established (RTU
	// in, or the consumer called Establish on first data).
	EventEstablished
	// EventRejected: the peer rejected the connection (Reason and the
	// REJ's private data say why); the connection is gone.
	EventRejected
	// EventTimeout: the peer never answered a REQ or REP after every
	// retry; a REJ with reason timeout went out and the connection is gone.
	EventTimeout
	// EventDisconnected: the connection was established and is no longer:
	// a DREQ arrived, our DREQ was answered, or it was never answered.
	// The connection sits in TimeWait.
	EventDisconnected
	// EventTimeWaitExit: the connection left TimeWait and is forgotten.
	EventTimeWaitExit
	// EventSIDRRequest: a SIDR_REQ for a listened service (12.11); the
	// consumer answers with SIDRReply.
	EventSIDRRequest
	// EventSIDRReply: the SIDR_REP to our SIDR_REQ; Conn.SIDRRep holds it.
	EventSIDRReply
)

var eventNames = [...]string{
	EventRequest: "request", EventReply: "reply", EventEstablished: "established",
	EventRejected: "rejected", EventTimeout: "timeout", EventDisconnected: "disconnected",
	EventTimeWaitExit: "timewait exit", EventSIDRRequest: "SIDR request", EventSIDRReply: "SIDR reply",
}

func (k EventKind) String() string {
	if int(k) < len(eventNames) && eventNames[k] != "" {
		return eventNames[k]
	}
	return "event?"
}

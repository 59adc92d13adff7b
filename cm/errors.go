package cm

import (
	"errors"
	"fmt"

	"github.com/goverbs/goverbs/cm/mad"
)

// Errors of the connection calls.
var (
	// ErrPrivateDataTooLong: the private data is over its budget (56 bytes
	// in Dial, 196 in Accept, 148 in Reject, 220 in Disconnect); nothing
	// was sent.
	ErrPrivateDataTooLong = errors.New("cm: private data too long")
	// ErrTimeout: the peer's CM never answered, after every retry.
	ErrTimeout = errors.New("cm: connection timed out")
	// ErrRejected is what every *RejectError matches.
	ErrRejected = errors.New("cm: connection rejected")
	// ErrClosed: the Agent, Listener or Conn is closed.
	ErrClosed = errors.New("cm: closed")
	// ErrDisconnected: the connection ended (Conn.Err after Done).
	ErrDisconnected = errors.New("cm: disconnected")
	// ErrNoGSI: the device cannot send or receive MADs on QP1.
	ErrNoGSI = errors.New("cm: device has no GSI (QP1)")
	// ErrAnswered: the Request was already accepted or rejected.
	ErrAnswered = errors.New("cm: request already answered")
	// ErrQP: the QP given is not one the CM can bring up (wrong type or state).
	// Whether it belongs to the agent's device is not checked.
	ErrQP = errors.New("cm: unusable QP")
	// ErrBadOption: an id option (Param's TOS or ACKTimeout, a ListenConfig's, a
	// Service's SetOption) out of range, or unknown.
	ErrBadOption = errors.New("cm: bad option")
)

// RejectError is the peer's refusal: its REJ's reason and private data.
// errors.Is(err, ErrRejected) holds.
type RejectError struct {
	Reason      mad.Reason
	PrivateData []byte // the whole 148-byte field: the peer's data, zero-padded
}

func (e *RejectError) Error() string {
	return fmt.Sprintf("cm: connection rejected: %v (%d)", e.Reason, uint16(e.Reason))
}

// Is makes errors.Is(err, ErrRejected) true.
func (e *RejectError) Is(target error) bool { return target == ErrRejected }

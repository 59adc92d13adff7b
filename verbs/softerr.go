package verbs

import (
	"errors"
	"fmt"
	"net/netip"

	"github.com/goverbs/goverbs/internal/engine"
	"github.com/goverbs/goverbs/verbs/driver"
)

// softKinds classifies the engine's errors under the verbs sentinels, so that a
// program matches them with errors.Is as it would a hardware provider's.
var softKinds = [...]struct{ err, kind error }{
	{engine.ErrDeviceClosed, ErrClosed},
	{engine.ErrPDClosed, ErrClosed},
	{engine.ErrQPClosed, ErrClosed},
	{engine.ErrCQClosed, ErrClosed},
	{engine.ErrQPState, ErrQPState},
	{engine.ErrCQBusy, ErrBusy},
	{engine.ErrPDBusy, ErrBusy},
	{engine.ErrMRBusy, ErrBusy},
	{engine.ErrSendQueueFull, ErrQueueFull},
	{engine.ErrRecvQueueFull, ErrQueueFull},
	{engine.ErrTooManyQPs, ErrLimit},
	{engine.ErrTooManyMRs, ErrLimit},
	{engine.ErrQPCap, ErrLimit},
	{engine.ErrCQOverflow, ErrCQOverflow},
}

// softErr returns err, from the engine, classified: ErrInvalidAttr unless the table
// says otherwise (the engine's other errors are all a bad argument: too many SGEs, an
// opcode the QP type lacks, a size out of range, flags that contradict each other).
func softErr(err error) error {
	if err == nil {
		return nil
	}
	var pe *engine.PostError
	if errors.As(err, &pe) {
		return &PostError{Index: pe.Index, Err: softErr(pe.Err)}
	}
	for _, k := range softKinds {
		if errors.Is(err, k.err) {
			return &driver.Error{Kind: k.kind, Err: err}
		}
	}
	return &driver.Error{Kind: ErrInvalidAttr, Err: err}
}

// openError is a software device that could not be opened. Its text names the device and
// the socket error at the root of the chain; errors.Is still sees the whole chain.
type openError struct {
	name string
	addr netip.AddrPort
	err  error
}

func (e *openError) Error() string {
	root := e.err
	for {
		next := errors.Unwrap(root)
		if next == nil {
			break
		}
		root = next
	}
	return fmt.Sprintf("verbs: open %s on %v: %v", e.name, e.addr, root)
}

func (e *openError) Unwrap() []error { return []error{ErrUnavailable, e.err} }

package verbs

import "github.com/goverbs/goverbs/verbs/driver"

// Errors of the verbs API. Every error a verbs call returns wraps one of them, so that
// errors.Is(err, verbs.ErrClosed) and the like work whichever provider a device has.
// Data-path failures are not errors but completion statuses (WC.Status).
var (
	// ErrNoDevice: no device has the name given to Open, or the device list
	// (GOVERBS_DEVICES) is malformed.
	ErrNoDevice = driver.ErrNoDevice
	// ErrUnavailable: the device exists but cannot be opened (its address is taken or
	// not this host's).
	ErrUnavailable = driver.ErrUnavailable
	// ErrClosed: the object, or the device or PD it belongs to, is closed.
	ErrClosed = driver.ErrClosed
	// ErrBusy: the object cannot be closed while others use it (a PD with MRs or QPs,
	// a CQ or SRQ with QPs, an MR with bound windows, a CompChannel with CQs).
	ErrBusy = driver.ErrBusy
	// ErrInvalidPort: a port number the device does not have.
	ErrInvalidPort = driver.ErrInvalidPort
	// ErrInvalidGID: a GID index outside the port's GID table.
	ErrInvalidGID = driver.ErrInvalidGID
	// ErrInvalidState: a QP state transition IBTA table 91 does not allow.
	ErrInvalidState = driver.ErrInvalidState
	// ErrQPState: the QP's state does not allow the call (a post before INIT or RTS).
	ErrQPState = driver.ErrQPState
	// ErrMissingAttr: a QP transition lacks an attribute it requires.
	ErrMissingAttr = driver.ErrMissingAttr
	// ErrExtraAttr: a QP transition was given an attribute it does not take.
	ErrExtraAttr = driver.ErrExtraAttr
	// ErrInvalidAttr: an attribute or argument value out of range.
	ErrInvalidAttr = driver.ErrInvalidAttr
	// ErrWrongDevice: objects of different devices or PDs used together.
	ErrWrongDevice = driver.ErrWrongDevice
	// ErrQueueFull: a post found its work queue full.
	ErrQueueFull = driver.ErrQueueFull
	// ErrLimit: the device has no room for another object of the kind (QPs, MRs).
	ErrLimit = driver.ErrLimit
	// ErrCQOverflow: a CQ overran and completions were lost (IBTA 11.4.2.1).
	ErrCQOverflow = driver.ErrCQOverflow
)

// opError says what verbs was doing when a provider failed, keeping the provider's
// classification (errors.Is sees through it) and one "verbs: " prefix.
type opError struct {
	op  string
	err error
}

func (e *opError) Error() string { return "verbs: " + e.op + ": " + driver.Detail(e.err) }
func (e *opError) Unwrap() error { return e.err }

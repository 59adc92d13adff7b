package verbs

import "github.com/goverbs/goverbs/verbs/driver"

// Errors of the verbs API. Every error a verbs call returns wraps one of them, so that
// errors.Is(err, verbs.ErrClosed) and the like work whichever provider a device has.
// Data-path failures are not errors but completion statuses (WC.Status).
var (
	// ErrNoDevice: no device has the name given to Open, or the device list is bad.
	ErrNoDevice = driver.ErrNoDevice
	// ErrClosed: the object, or the device or PD it belongs to, is closed.
	ErrClosed = driver.ErrClosed
	// ErrInvalidPort: a port number the device does not have.
	ErrInvalidPort = driver.ErrInvalidPort
	// ErrInvalidGID: a GID index outside the port's GID table.
	ErrInvalidGID = driver.ErrInvalidGID
	// ErrInvalidState: a QP state transition IBTA table 91 does not allow.
	ErrInvalidState = driver.ErrInvalidState
	// ErrMissingAttr: a QP transition lacks an attribute it requires.
	ErrMissingAttr = driver.ErrMissingAttr
	// ErrExtraAttr: a QP transition was given an attribute it does not take.
	ErrExtraAttr = driver.ErrExtraAttr
	// ErrInvalidAttr: an attribute or argument value out of range.
	ErrInvalidAttr = driver.ErrInvalidAttr
	// ErrWrongDevice: objects of different devices or PDs used together.
	ErrWrongDevice = driver.ErrWrongDevice
	// ErrCQOverflow: a CQ overran and completions were lost (IBTA 11.4.2.1).
	ErrCQOverflow = driver.ErrCQOverflow
)

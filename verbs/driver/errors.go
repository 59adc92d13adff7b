package driver

import "errors"

// The errors of the verbs API; package verbs re-exports each under the same name. A
// provider wraps the one that fits (fmt.Errorf("...: %w", ErrClosed)) so that a program's
// errors.Is works whichever provider it runs on. Data-path failures are not errors but
// completion statuses.
var (
	ErrNoDevice     = errors.New("verbs: no such device")
	ErrClosed       = errors.New("verbs: object is closed")
	ErrInvalidPort  = errors.New("verbs: invalid port number")
	ErrInvalidGID   = errors.New("verbs: invalid GID index")
	ErrInvalidState = errors.New("verbs: invalid QP state transition")
	ErrMissingAttr  = errors.New("verbs: required QP attribute missing")
	ErrExtraAttr    = errors.New("verbs: QP attribute not allowed in this transition")
	ErrInvalidAttr  = errors.New("verbs: invalid attribute value")
	ErrWrongDevice  = errors.New("verbs: objects belong to different devices or PDs")
	ErrCQOverflow   = errors.New("verbs: completion queue overrun")
)

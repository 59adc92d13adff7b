package driver

import (
	"errors"
	"strings"
)

// The errors of the verbs API; package verbs re-exports each under the same name. A
// provider returns errors that wrap the one that fits (an *Error does), so that a
// program's errors.Is works whichever provider it runs on. Data-path failures are not
// errors but completion statuses.
var (
	ErrNoDevice     = errors.New("verbs: no such device")
	ErrUnavailable  = errors.New("verbs: device cannot be opened")
	ErrClosed       = errors.New("verbs: object is closed")
	ErrBusy         = errors.New("verbs: object is still in use")
	ErrInvalidPort  = errors.New("verbs: invalid port number")
	ErrInvalidGID   = errors.New("verbs: invalid GID index")
	ErrInvalidState = errors.New("verbs: invalid QP state transition")
	ErrQPState      = errors.New("verbs: QP state does not allow this")
	ErrMissingAttr  = errors.New("verbs: required QP attribute missing")
	ErrExtraAttr    = errors.New("verbs: QP attribute not allowed in this transition")
	ErrInvalidAttr  = errors.New("verbs: invalid attribute value")
	ErrWrongDevice  = errors.New("verbs: objects belong to different devices or PDs")
	ErrQueueFull    = errors.New("verbs: work queue is full")
	ErrLimit        = errors.New("verbs: device resource limit reached")
	ErrCQOverflow   = errors.New("verbs: completion queue overrun")
)

// Error is a provider's error classified under one of the sentinels above: it reads
// "verbs: " and Err's text, and errors.Is matches both Kind and Err.
type Error struct {
	Kind error // one of this package's sentinels
	Err  error // the provider's own error
}

func (e *Error) Error() string   { return "verbs: " + Detail(e.Err) }
func (e *Error) Unwrap() []error { return []error{e.Kind, e.Err} }

// Detail returns err's text without a leading "verbs: ", for a message that wraps err
// and carries the prefix itself: an error says "verbs:" once.
func Detail(err error) string { return strings.TrimPrefix(err.Error(), "verbs: ") }

// NewError returns a provider's own sentinel, classified under kind (one of the
// sentinels above): errors.Is matches it by identity, as usual, and kind through it.
func NewError(kind error, text string) *Error { return &Error{Kind: kind, Err: errors.New(text)} }

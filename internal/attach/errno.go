package attach

import (
	"errors"
	"syscall"

	"github.com/goverbs/goverbs/verbs/driver"
)

// A failed reply carries an errno in its header, as the kernel's uverbs commands
// return one, and a payload of u32 kind (which of verbs/driver's sentinels, so that a
// Go client's errors.Is works as on the in-process device) and the message text.
var kinds = []struct {
	err   error
	errno syscall.Errno
}{
	{nil, syscall.EIO}, // kind 0: unclassified
	{driver.ErrNoDevice, syscall.ENODEV},
	{driver.ErrUnavailable, syscall.EIO},
	{driver.ErrClosed, syscall.EBADF},
	{driver.ErrBusy, syscall.EBUSY},
	{driver.ErrInvalidPort, syscall.EINVAL},
	{driver.ErrInvalidGID, syscall.EINVAL},
	{driver.ErrInvalidState, syscall.EINVAL},
	{driver.ErrQPState, syscall.EINVAL},
	{driver.ErrMissingAttr, syscall.EINVAL},
	{driver.ErrExtraAttr, syscall.EINVAL},
	{driver.ErrInvalidAttr, syscall.EINVAL},
	{driver.ErrWrongDevice, syscall.EINVAL},
	{driver.ErrQueueFull, syscall.ENOMEM},
	{driver.ErrLimit, syscall.ENOMEM},
	{driver.ErrCQOverflow, syscall.EOVERFLOW},
	{errors.ErrUnsupported, syscall.EOPNOTSUPP},
}

// Classify returns the errno and kind of err.
func Classify(err error) (syscall.Errno, uint32) {
	for i := len(kinds) - 1; i > 0; i-- {
		if errors.Is(err, kinds[i].err) {
			return kinds[i].errno, uint32(i)
		}
	}
	// rdma_cm's errors (EADDRINUSE, ...) carry their errno.
	var en syscall.Errno
	if errors.As(err, &en) && en != 0 {
		return en, 0
	}
	return syscall.EIO, 0
}

// RemoteError is a command the daemon refused.
type RemoteError struct {
	Errno syscall.Errno
	Kind  uint32
	Msg   string
}

func (e *RemoteError) Error() string { return "verbs: " + e.Msg }

// Unwrap gives the sentinel and the errno, for errors.Is with either.
func (e *RemoteError) Unwrap() []error {
	out := []error{e.Errno}
	if e.Kind > 0 && int(e.Kind) < len(kinds) {
		out = append(out, kinds[e.Kind].err)
	}
	return out
}

//go:build ibverbs

package ibverbs

import (
	"errors"
	"fmt"
	"syscall"

	"github.com/goverbs/goverbs/verbs/driver"
)

// errnoKinds classifies the errno values libibverbs and the kernel return under the verbs
// sentinels, so that errors.Is works the same on every provider.
var errnoKinds = map[syscall.Errno]error{
	syscall.ENOMEM:     driver.ErrLimit,
	syscall.EAGAIN:     driver.ErrLimit,
	syscall.ENOSPC:     driver.ErrLimit,
	syscall.EMFILE:     driver.ErrLimit,
	syscall.EBUSY:      driver.ErrBusy,
	syscall.ENODEV:     driver.ErrUnavailable,
	syscall.ENXIO:      driver.ErrUnavailable,
	syscall.EIO:        driver.ErrUnavailable,
	syscall.EPERM:      driver.ErrUnavailable,
	syscall.EACCES:     driver.ErrUnavailable,
	syscall.EINVAL:     driver.ErrInvalidAttr,
	syscall.EFAULT:     driver.ErrInvalidAttr,
	syscall.ENOSYS:     driver.ErrInvalidAttr,
	syscall.EOPNOTSUPP: driver.ErrInvalidAttr,
	syscall.ENOENT:     driver.ErrInvalidAttr,
	syscall.ERANGE:     driver.ErrInvalidAttr,
}

// ibvErr wraps the failure of the libibverbs call op, whose errno (from a return value or
// errno itself) is err, under the sentinel that fits.
func ibvErr(op string, err error) error {
	var errno syscall.Errno
	if !errors.As(err, &errno) || errno == 0 {
		// Some providers fail without setting errno.
		return &driver.Error{Kind: driver.ErrInvalidAttr, Err: fmt.Errorf("%s failed", op)}
	}
	kind, ok := errnoKinds[errno]
	if !ok {
		kind = driver.ErrInvalidAttr
	}
	return &driver.Error{Kind: kind, Err: fmt.Errorf("%s: %w", op, errno)}
}

// rcErr is ibvErr for a call that returns its errno (0 on success), as most of
// libibverbs does.
func rcErr(op string, rc int) error {
	if rc == 0 {
		return nil
	}
	if rc < 0 { // a few providers return -errno
		rc = -rc
	}
	return ibvErr(op, syscall.Errno(rc))
}

// errClosed is the error of an operation on an object (or device) already closed.
func errClosed(what string) error {
	return &driver.Error{Kind: driver.ErrClosed, Err: fmt.Errorf("%s is closed", what)}
}

// errWrongDevice is the error of a work request naming another provider's object.
func errWrongDevice(what string) error {
	return &driver.Error{Kind: driver.ErrWrongDevice, Err: fmt.Errorf("%s belongs to another provider", what)}
}

var errCQOverrun = errors.New("the device reported a CQ overrun (IBV_EVENT_CQ_ERR)")

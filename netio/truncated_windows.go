//go:build windows

package netio

import (
	"errors"

	"golang.org/x/sys/windows"
)

// truncatedErr reports whether a read failed only because the datagram was longer than
// the buffer. Windows reports that as an error (WSAEMSGSIZE), with the bytes that fitted
// but without the sender's address.
func truncatedErr(err error) bool { return errors.Is(err, windows.WSAEMSGSIZE) }

//go:build !linux

package netio

import (
	"errors"
	"os"
)

// FileUDP is Linux's (a socket passed by goverbs serve); see udpfile_linux.go.
func FileUDP(f *os.File, opts UDPOptions) (Conn, error) {
	return nil, errors.ErrUnsupported
}

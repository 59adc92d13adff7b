//go:build !unix

package main

import (
	"errors"
	"net/netip"
	"syscall"
	"time"
)

var errNoSpin = errors.New("--busy-poll needs non-blocking read(2)/write(2) on a socket: Unix only")

// spinner is the busy-polling I/O of spin_unix.go, which this platform lacks.
type spinner struct{}

func newSpinner(syscall.Conn, time.Time) (*spinner, error) { return nil, errNoSpin }
func (*spinner) read([]byte) (int, error)                  { return 0, errNoSpin }
func (*spinner) readFull([]byte) error                     { return errNoSpin }
func (*spinner) write([]byte) error                        { return errNoSpin }
func (*spinner) connect(netip.AddrPort) error              { return errNoSpin }

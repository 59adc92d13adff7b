//go:build !linux

package main

import (
	"errors"
	"net"
	"net/netip"
)

// rcAckLen is the size of an RC ACK's UDP payload: BTH, AETH and ICRC.
const rcAckLen = 20

var errNoRCWire = errors.New("--rc-wire needs sendmmsg: Linux only")

func udpLatRC(options) error                                 { return errNoRCWire }
func rcEcho(*net.UDPConn, []byte, int, netip.AddrPort) error { return errNoRCWire }

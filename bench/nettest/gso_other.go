//go:build !linux

package main

import "errors"

func udpGSOBW(options) error { return errors.New("udp_gso_bw needs UDP GSO and GRO: Linux only") }

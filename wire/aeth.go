package wire

import (
	"strconv"
	"time"
)

// Syndrome is the AETH syndrome byte (IBTA Vol. 1 9.7.5.1, table 44).
//
//	  7   6   5   4   3   2   1   0
//	+---+-------+-------------------+
//	| 0 | type  |       value       |
//	+---+-------+-------------------+
//
// type 00: ACK, value = credit count (encoded, table 46; 31 = invalid)
// type 01: RNR NAK, value = RNR timer (table 45)
// type 10: reserved
// type 11: NAK, value = NAK code
type Syndrome uint8

// AckType is bits 6..5 of the syndrome.
type AckType uint8

// The four syndrome types (table 44).
const (
	AckTypeACK      AckType = 0
	AckTypeRNRNAK   AckType = 1
	AckTypeReserved AckType = 2
	AckTypeNAK      AckType = 3
)

// String names the type.
func (t AckType) String() string {
	switch t {
	case AckTypeACK:
		return "ACK"
	case AckTypeRNRNAK:
		return "RNR NAK"
	case AckTypeNAK:
		return "NAK"
	}
	return "reserved"
}

// NAKCode is the value field of a NAK syndrome (table 44).
type NAKCode uint8

// NAK codes. Values 5..31 are reserved.
const (
	NAKPSNSeqError            NAKCode = 0
	NAKInvalidRequest         NAKCode = 1
	NAKRemoteAccessError      NAKCode = 2
	NAKRemoteOperationalError NAKCode = 3
	NAKInvalidRDRequest       NAKCode = 4
)

var nakNames = [...]string{
	"PSN sequence error",
	"invalid request",
	"remote access error",
	"remote operational error",
	"invalid RD request",
}

// String describes the code as the spec names it.
func (c NAKCode) String() string {
	if int(c) < len(nakNames) {
		return nakNames[c]
	}
	return "reserved NAK code " + strconv.Itoa(int(c))
}

// CreditsInvalid is the credit-count encoding 0b11111 a responder sends when
// it does not report end-to-end credits (table 46: "invalid/unlimited").
const CreditsInvalid = 31

// ACKSyndrome is an ACK carrying the encoded credit count (0..31).
func ACKSyndrome(credits uint8) Syndrome { return Syndrome(credits & 0x1f) }

// RNRNAKSyndrome is a receiver-not-ready NAK asking the requester to wait
// RNRTimerDuration(timer) before retrying.
func RNRNAKSyndrome(timer uint8) Syndrome { return Syndrome(1<<5 | timer&0x1f) }

// NAKSyndrome is a NAK with the given code.
func NAKSyndrome(code NAKCode) Syndrome { return Syndrome(3<<5 | uint8(code)&0x1f) }

// Type is the syndrome's type.
func (s Syndrome) Type() AckType { return AckType(s>>5) & 3 }

func (s Syndrome) value() uint8 { return uint8(s) & 0x1f }

// Credits is the encoded credit count of an ACK.
func (s Syndrome) Credits() uint8 { return s.value() }

// RNRTimer is the timer index of an RNR NAK.
func (s Syndrome) RNRTimer() uint8 { return s.value() }

// NAKCode is the code of a NAK.
func (s Syndrome) NAKCode() NAKCode { return NAKCode(s.value()) }

// String describes the syndrome, e.g. "ACK credits=31", "RNR NAK timer=12",
// "NAK PSN sequence error".
func (s Syndrome) String() string {
	switch s.Type() {
	case AckTypeACK:
		return "ACK credits=" + strconv.Itoa(int(s.Credits()))
	case AckTypeRNRNAK:
		return "RNR NAK timer=" + strconv.Itoa(int(s.RNRTimer()))
	case AckTypeNAK:
		return "NAK " + s.NAKCode().String()
	}
	return "reserved syndrome 0x" + strconv.FormatUint(uint64(s), 16)
}

// rnrMicros is IBTA table 45 in microseconds; index 0 is the longest.
var rnrMicros = [32]uint32{
	655360, 10, 20, 30, 40, 60, 80, 120,
	160, 240, 320, 480, 640, 960, 1280, 1920,
	2560, 3840, 5120, 7680, 10240, 15360, 20480, 30720,
	40960, 61440, 81920, 122880, 163840, 245760, 327680, 491520,
}

// RNRTimerDuration is the minimum RNR NAK delay of table 45 for timer index t
// (only the low five bits are used): 0 = 655.36 ms, 1 = 0.01 ms, ...,
// 31 = 491.52 ms.
func RNRTimerDuration(t uint8) time.Duration {
	return time.Duration(rnrMicros[t&0x1f]) * time.Microsecond
}

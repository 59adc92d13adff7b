package wire

import (
	"errors"
	"strconv"
)

// Sentinel errors; a *ParseError matches exactly one of them with errors.Is.
var (
	ErrTruncated     = errors.New("wire: packet truncated")
	ErrTVer          = errors.New("wire: unsupported BTH transport version")
	ErrUnknownOpcode = errors.New("wire: unknown opcode")
	ErrLength        = errors.New("wire: length inconsistent with opcode")
	ErrPadCnt        = errors.New("wire: bad PadCnt")
	ErrTooLong       = errors.New("wire: payload longer than MTU")
)

// ParseErrorReason says which check of Packet.Parse failed.
type ParseErrorReason uint8

// Reasons, one per sentinel error.
const (
	ReasonTruncated ParseErrorReason = iota + 1
	ReasonTVer
	ReasonUnknownOpcode
	ReasonLength
	ReasonPadCnt
	ReasonTooLong
)

var reasonErr = [...]error{
	ReasonTruncated:     ErrTruncated,
	ReasonTVer:          ErrTVer,
	ReasonUnknownOpcode: ErrUnknownOpcode,
	ReasonLength:        ErrLength,
	ReasonPadCnt:        ErrPadCnt,
	ReasonTooLong:       ErrTooLong,
}

// Sentinel returns the sentinel error for r (nil for an unknown reason).
func (r ParseErrorReason) Sentinel() error {
	if int(r) < len(reasonErr) {
		return reasonErr[r]
	}
	return nil
}

// String is the sentinel's text without the package prefix.
func (r ParseErrorReason) String() string {
	if e := r.Sentinel(); e != nil {
		return e.Error()[len("wire: "):]
	}
	return "reason " + strconv.Itoa(int(r))
}

// ParseError is what Packet.Parse returns. Len is the length of the UDP
// payload, Want the length (or limit) the check needed, Value the offending
// value (TVer, PadCnt or payload length) where there is one.
type ParseError struct {
	Reason ParseErrorReason
	Opcode Opcode
	Len    int
	Want   int
	Value  int
}

func (e *ParseError) Error() string {
	s := "wire: " + e.Reason.String() + ": " + e.Opcode.String() + " len=" + strconv.Itoa(e.Len)
	switch e.Reason {
	case ReasonTruncated:
		s += " need>=" + strconv.Itoa(e.Want)
	case ReasonTVer:
		s += " tver=" + strconv.Itoa(e.Value)
	case ReasonLength:
		s += " payload+pad=" + strconv.Itoa(e.Value)
		if e.Want >= 0 {
			s += " want=" + strconv.Itoa(e.Want)
		}
	case ReasonPadCnt:
		s += " padcnt=" + strconv.Itoa(e.Value) + " payload+pad=" + strconv.Itoa(e.Want)
	case ReasonTooLong:
		s += " payload=" + strconv.Itoa(e.Value) + " max=" + strconv.Itoa(e.Want)
	}
	return s
}

// Unwrap returns the sentinel for the reason, so errors.Is works.
func (e *ParseError) Unwrap() error { return e.Reason.Sentinel() }

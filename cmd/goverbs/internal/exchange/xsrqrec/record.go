// Package xsrqrec is the out-of-band exchange of rdma-core's xsrq_pingpong
// (libibverbs/examples/xsrq_pingpong.c): one fixed-size text record each way per client,
// and a termination message each way at the end.
package xsrqrec

import (
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/goverbs/goverbs/verbs"
)

// The record is "LLLL:RRRRRR:SSSSSS:PPPPPP:NNNNNN:GGGG…": LID (4 hex digits), the receive
// (XRC_RECV) and send (XRC_SEND) QP numbers, the PSN and the XRC SRQ number (6 hex digits
// each), and the GID as 32 hex digits (its 16 bytes in order), NUL-padded to RecordLen.
// When the messages are done the client writes End and reads the server's; the server
// reads every client's before it answers any.
const (
	RecordLen = 66
	End       = "END\x00"
)

// Dest is one side's facts for one peer.
type Dest struct {
	LID              uint16
	RecvQPN, SendQPN uint32
	PSN              uint32
	SRQN             uint32
	GID              verbs.GID
}

// Record is d as the peer reads it.
func (d Dest) Record() []byte {
	s := fmt.Sprintf("%04x:%06x:%06x:%06x:%06x:%s", d.LID, d.RecvQPN&0xffffff, d.SendQPN&0xffffff,
		d.PSN&0xffffff, d.SRQN&0xffffff, hex.EncodeToString(d.GID[:]))
	b := make([]byte, RecordLen)
	copy(b, s)
	return b
}

// ErrForeignPeer: what the peer sent is not an xsrq_pingpong record.
var ErrForeignPeer = errors.New("the peer does not speak xsrq_pingpong's exchange (66-byte LID:RQPN:SQPN:PSN:SRQN:GID records)")

// Parse reads one record.
func Parse(b []byte) (Dest, error) {
	var d Dest
	if len(b) != RecordLen {
		return d, ErrForeignPeer
	}
	f := strings.Split(strings.TrimRight(string(b), "\x00"), ":")
	if len(f) != 6 || len(f[5]) != 32 {
		return d, ErrForeignPeer
	}
	var v [5]uint64
	for i, bits := range []int{16, 24, 24, 24, 24} {
		x, err := strconv.ParseUint(f[i], 16, bits)
		if err != nil {
			return d, ErrForeignPeer
		}
		v[i] = x
	}
	if _, err := hex.Decode(d.GID[:], []byte(f[5])); err != nil {
		return d, ErrForeignPeer
	}
	d.LID, d.RecvQPN, d.SendQPN, d.PSN, d.SRQN = uint16(v[0]), uint32(v[1]), uint32(v[2]), uint32(v[3]), uint32(v[4])
	return d, nil
}

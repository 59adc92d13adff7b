package rdmanet

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// The stream protocol's constants and encodings; the package doc describes the protocol.

const (
	// setupVersion is the version byte of a setup message.
	setupVersion = 1
	// setupLen is a setup message's length: it fits rdma_cm's private data in a
	// connect (56 bytes) and an accept (196).
	setupLen = 24

	// ringSize is the receive ring each side advertises: the most bytes a peer may have
	// written and not yet seen read. The sender's staging buffer mirrors it, so a
	// connection holds twice this. A 256 KiB ring kept only four 64 KiB messages between
	// the writer and the credit that frees them, so the stream waited on credits; the
	// measurements are in docs/DESIGN.md ("1 MiB rings") and bench/rstream.sh re-runs them.
	ringSize = 1 << 20
	// maxChunk bounds one data message, so that a large Write is several messages in
	// flight at once and the reader starts on the first while the rest arrive. 256 KiB
	// messages in a 1 MiB ring streamed no faster (docs/DESIGN.md).
	maxChunk = 64 << 10
	// msgCredits is how many data messages a side may have in flight and not yet
	// credited; the receiver posts that many receives for them.
	msgCredits = 256
	// ctrlSlots is how many control messages a side keeps in flight at most; the
	// receiver posts that many more receives for them.
	ctrlSlots = 32
	// recvDepth is the receives a side keeps posted: data and control.
	recvDepth = msgCredits + ctrlSlots
	// sendDepth is the send queue's depth: every data and control message in flight.
	sendDepth = msgCredits + ctrlSlots
)

// op is the operation in the top two bits of an immediate.
type op uint32

const (
	// opData: an RDMA WRITE WITH IMMEDIATE of length bytes at the receiver's ring
	// position; bits 29..0 are the length.
	opData op = 0
	// opCredit: the receiver read bytes and reposted receives; bits 29..21 are the
	// data messages credited, bits 20..0 the bytes.
	opCredit op = 1
	// opFin: the sender will write no more (half-close); what it wrote is all there is.
	opFin op = 2
	// opClose: the peer closed; it reads no more, and writes to it fail.
	opClose op = 3
)

const (
	immOpShift      = 30
	immLenMask      = 1<<30 - 1
	creditMsgShift  = 21
	creditMsgMax    = 1<<9 - 1
	creditBytesMask = 1<<21 - 1
)

// The credit fields must be wide enough for what a side can owe.
var _ = [creditBytesMask - ringSize]struct{}{}
var _ = [creditMsgMax - msgCredits]struct{}{}

func dataImm(n int) uint32 { return uint32(opData)<<immOpShift | uint32(n) }

func creditImm(msgs, bytes int) uint32 {
	return uint32(opCredit)<<immOpShift | uint32(msgs)<<creditMsgShift | uint32(bytes)
}

func ctrlImm(o op) uint32 { return uint32(o) << immOpShift }

func immOp(imm uint32) op { return op(imm >> immOpShift) }

func immLen(imm uint32) int { return int(imm & immLenMask) }

func immCredit(imm uint32) (msgs, bytes int) {
	return int(imm>>creditMsgShift) & creditMsgMax, int(imm & creditBytesMask)
}

// setup is what each side tells the other when the connection is made: where its
// receive ring is. On the wire (big-endian):
//
//	0      version (1)
//	1      flags (0; a receiver ignores unknown flags)
//	2..3   message credits: data messages the sender may have in flight
//	4..7   ring size in bytes
//	8..15  ring address (the MR's address, as the peer's RDMA WRITEs name it)
//	16..19 ring rkey
//	20..23 reserved (0)
type setup struct {
	credits  uint16
	ringSize uint32
	ringAddr uint64
	ringRKey uint32
}

var errSetup = errors.New("rdmanet: bad setup message")

func (s setup) marshal(b []byte) []byte {
	var m [setupLen]byte
	m[0] = setupVersion
	binary.BigEndian.PutUint16(m[2:], s.credits)
	binary.BigEndian.PutUint32(m[4:], s.ringSize)
	binary.BigEndian.PutUint64(m[8:], s.ringAddr)
	binary.BigEndian.PutUint32(m[16:], s.ringRKey)
	return append(b, m[:]...)
}

// parseSetup reads a peer's setup message; extra trailing bytes (rdma_cm pads private
// data with zeros) are ignored.
func parseSetup(b []byte) (setup, error) {
	if len(b) < setupLen {
		return setup{}, fmt.Errorf("%w: %d bytes, want %d", errSetup, len(b), setupLen)
	}
	if b[0] != setupVersion {
		return setup{}, fmt.Errorf("%w: version %d, want %d", errSetup, b[0], setupVersion)
	}
	s := setup{
		credits:  binary.BigEndian.Uint16(b[2:]),
		ringSize: binary.BigEndian.Uint32(b[4:]),
		ringAddr: binary.BigEndian.Uint64(b[8:]),
		ringRKey: binary.BigEndian.Uint32(b[16:]),
	}
	switch {
	case s.credits == 0 || s.credits > msgCredits:
		return setup{}, fmt.Errorf("%w: %d message credits (1..%d)", errSetup, s.credits, msgCredits)
	case s.ringSize == 0 || s.ringSize > ringSize:
		return setup{}, fmt.Errorf("%w: ring of %d bytes (1..%d)", errSetup, s.ringSize, ringSize)
	}
	return s, nil
}

package rdmanet

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// rsockets' stream protocol: its constants and encodings. The package doc describes
// the protocol; rdma-core's librdmacm/docs/rsocket is its reference.

const (
	// ringSize is the receive buffer each side has. rsockets advertises it in two
	// halves (the first in the connection's data, the second at once by an SGL
	// update, each again once the reader has emptied it), so a writer may have a
	// whole ring unread at the peer. rsockets' own default is 128 KiB; a 256 KiB ring
	// kept only four 64 KiB messages between the writer and the update that frees
	// them, so goverbs' stream waited on them (docs/DESIGN.md, "1 MiB rings";
	// bench/rstream.sh re-runs the comparison).
	ringSize = 1 << 20
	// stageSize is the send buffer each side copies outgoing bytes into; a WRITE's
	// bytes there are free again when its completion comes.
	stageSize = 1 << 20
	// maxChunk bounds one data message (rsockets' RS_MAX_TRANSFER), so that a large
	// Write is several messages in flight at once and the reader starts on the first
	// while the rest arrive.
	maxChunk = 64 << 10
	// msgCredits is how many data messages the peer may have sent and this side not
	// yet received (the credits of rs_conn_data): a receive is kept posted for each.
	msgCredits = 256
	// ctrlSlots is how many control messages (SGL and credit updates, SHUTDOWN,
	// DISCONNECT) a side keeps in flight, rsockets' RS_QP_CTRL_SIZE: they consume the
	// peer's receives beyond its credits, and rsockets relies on the RNR retries for
	// the rest.
	ctrlSlots = 4
	// recvSpare is how many receives a side posts beyond its credits for the peer's
	// control messages (at most ctrlSlots from a peer that keeps to rsockets' limit).
	recvSpare = 32
	// recvDepth is the receives a side keeps posted: data and control.
	recvDepth = msgCredits + recvSpare
	// sendDepth is the send queue's depth: data, control and keepalives in flight.
	sendDepth = msgCredits + ctrlSlots + 1
	// sglEntries is the length of the target SGL a side advertises, rsockets'
	// RS_SGL_SIZE: the peer writes each buffer it frees into the next entry.
	sglEntries = 2
	// sgeLen is an rs_sge's size: addr (8), key (4), length (4).
	sgeLen = 16
	// maxPeerSGL bounds the target SGL a peer may advertise; rsockets' is 2 entries.
	maxPeerSGL = 1 << 10
)

// op is rsockets' operation, in the top 3 bits of an immediate.
type op uint32

const (
	// opData: an RDMA WRITE WITH IMMEDIATE of that many bytes (the low 29 bits) into
	// the writer's current target buffer.
	opData op = 0
	// opWrite is rsockets' direct (iomap) write; it is never on the wire.
	opWrite op = 2
	// opSGL: a credit update, the low 16 bits the sequence number up to which the
	// peer may send data messages; its WRITE may carry a 16-byte SGE into the peer's
	// target SGL (a buffer freed).
	opSGL op = 4
	// opIOMapSGL: an iomap entry was updated (riomap). goverbs advertises no iomap.
	opIOMapSGL op = 6
	// opCtrl: a control message; the low bits say which (ctrl*).
	opCtrl op = 7
)

// Control messages, rsockets' RS_CTRL_*.
const (
	// ctrlDisconnect: the sender is closed; it reads and writes no more.
	ctrlDisconnect = 0
	// ctrlKeepalive: rsockets sends keepalives as zero-length WRITEs without
	// immediate; one with it is accepted and ignored.
	ctrlKeepalive = 1
	// ctrlShutdown: the sender writes no more (shutdown(SHUT_WR)).
	ctrlShutdown = 2
)

const (
	immOpShift = 29
	immValMask = 1<<29 - 1
)

func msgImm(o op, v uint32) uint32 { return uint32(o)<<immOpShift | v&immValMask }

func immOp(imm uint32) op { return op(imm >> immOpShift) }

func immVal(imm uint32) uint32 { return imm & immValMask }

// sge is rsockets' rs_sge: a buffer (or SGL) a peer may write, as addr, key, length.
type sge struct {
	addr   uint64
	key    uint32
	length uint32
}

// putSGE encodes s in the byte order the reader of it asked for.
func putSGE(b []byte, s sge, order binary.ByteOrder) {
	order.PutUint64(b, s.addr)
	order.PutUint32(b[8:], s.key)
	order.PutUint32(b[12:], s.length)
}

func getSGE(b []byte, order binary.ByteOrder) sge {
	return sge{addr: order.Uint64(b), key: order.Uint32(b[8:]), length: order.Uint32(b[12:])}
}

// Flags of rs_conn_data.
const (
	// connFlagNet: the sender's host is big-endian; SGL updates written into its
	// target SGL must be big-endian too (otherwise little-endian).
	connFlagNet = 1 << 0
	// connFlagIOMap: the sender has an iomap after its target SGL.
	connFlagIOMap = 1 << 1
)

const (
	// connVersion is rs_conn_data's version.
	connVersion = 1
	// connLen is rs_conn_data's size: it goes in the REQ's private data after
	// rdma_cm's 36-byte header (56 bytes are left) and in the REP's (196).
	connLen = 40
)

// connData is rsockets' rs_conn_data, what each side tells the other when the
// connection is made. All of it is big-endian on the wire:
//
//	0      version (1)
//	1      flags (connFlag*)
//	2..3   credits: data messages the peer may send before the first update
//	4..6   reserved (0)
//	7      target_iomap_size (log2 of the entries; 0: none)
//	8..23  target SGL: addr, key, length in entries (where the peer writes updates)
//	24..39 data buffer: addr, key, length in bytes (the peer's first target buffer)
type connData struct {
	flags     uint8
	credits   uint16
	targetSGL sge
	dataBuf   sge
}

var errConnData = errors.New("rdmanet: bad rsockets connection data")

func (d connData) marshal(b []byte) []byte {
	var m [connLen]byte
	m[0] = connVersion
	m[1] = d.flags
	binary.BigEndian.PutUint16(m[2:], d.credits)
	putSGE(m[8:], d.targetSGL, binary.BigEndian)
	putSGE(m[24:], d.dataBuf, binary.BigEndian)
	return append(b, m[:]...)
}

// parseConnData reads a peer's rs_conn_data; extra trailing bytes (rdma_cm pads
// private data with zeros) are ignored, and so are flags this side does not know.
func parseConnData(b []byte) (connData, error) {
	if len(b) < connLen {
		return connData{}, fmt.Errorf("%w: %d bytes, want %d", errConnData, len(b), connLen)
	}
	if b[0] != connVersion {
		return connData{}, fmt.Errorf("%w: version %d, want %d", errConnData, b[0], connVersion)
	}
	d := connData{flags: b[1], credits: binary.BigEndian.Uint16(b[2:]),
		targetSGL: getSGE(b[8:], binary.BigEndian), dataBuf: getSGE(b[24:], binary.BigEndian)}
	switch {
	case d.credits == 0 || d.credits == 0xFFFF:
		// A 16-bit sequence window of 65535 or more cannot tell full from empty.
		return connData{}, fmt.Errorf("%w: %d credits", errConnData, d.credits)
	case d.targetSGL.length == 0 || d.targetSGL.length > maxPeerSGL:
		return connData{}, fmt.Errorf("%w: target SGL of %d entries (1..%d)", errConnData, d.targetSGL.length, maxPeerSGL)
	case d.targetSGL.addr+uint64(d.targetSGL.length)*sgeLen < d.targetSGL.addr:
		return connData{}, fmt.Errorf("%w: target SGL wraps the address space", errConnData)
	case d.dataBuf.length == 0 || d.dataBuf.addr+uint64(d.dataBuf.length) < d.dataBuf.addr:
		return connData{}, fmt.Errorf("%w: data buffer of %d bytes at %#x", errConnData, d.dataBuf.length, d.dataBuf.addr)
	}
	return d, nil
}

// order is the byte order of the SGEs a peer with these flags wants written into its
// target SGL.
func (d connData) order() binary.ByteOrder {
	if d.flags&connFlagNet != 0 {
		return binary.BigEndian
	}
	return binary.LittleEndian
}

// hostIsNet says whether this host is big-endian (rsockets' RS_CONN_FLAG_NET): the
// peer writes this side's target SGL in host order, which the Conn reads as it is.
func hostIsNet() bool {
	var b [2]byte
	binary.NativeEndian.PutUint16(b[:], 1)
	return b[0] == 0
}

// nativeOrder is this host's byte order, in which the peer writes this side's target
// SGL.
var nativeOrder binary.ByteOrder = binary.NativeEndian

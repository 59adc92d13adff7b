// Package attach is the protocol between `goverbs serve` (the daemon that owns shared
// software devices, internal/attach/server) and the processes attached to it (the Go
// client, verbs/attach; the C client to come). docs/attach-protocol.md is its
// specification; this package is its Go text: the message framing, the commands, the
// layouts of work and completion queue entries in shared memory, and the error codes.
//
// Everything here decodes bytes a peer wrote and never trusts them: a Reader that runs
// short reports it once (Err) and yields zeros, it never panics.
package attach

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"net/netip"
	"path/filepath"
)

// Version is the protocol version HELLO carries; a daemon refuses any other.
const Version = 1

// MaxMsg is the largest message either side sends (one SOCK_SEQPACKET datagram).
const MaxMsg = 4096

// HdrLen is the size of every message's header:
//
//	off 0  u16 op       the command; a reply has ReplyBit set
//	off 2  u16 flags    0
//	off 4  u32 seq      chosen by the client, echoed by the reply
//	off 8  i32 errno    0 in requests and in successful replies
//	off 12 u32 len      payload bytes after the header
const HdrLen = 16

// ReplyBit marks a reply's op.
const ReplyBit = 0x8000

// Op is a command on the control socket.
type Op uint16

// The commands, numbered as the protocol document lists them.
const (
	OpHello Op = iota + 1
	OpQueryDevice
	OpQueryPort
	OpQueryGID
	OpAllocPD
	OpDeallocPD
	OpRegMR
	OpDeregMR
	OpCreateCQ
	OpResizeCQ
	OpDestroyCQ
	OpCreateQP
	OpModifyQP
	OpQueryQP
	OpDestroyQP
	OpCreateSRQ
	OpArmSRQ
	OpQuerySRQ
	OpDestroySRQ
	OpCreateAH
	OpDestroyAH
	OpAllocMW
	OpDeallocMW
	OpBindMW
	OpAttachMcast
	OpDetachMcast
	OpQPCounters
	OpDeviceCounters
	// rdma_cm (cm.go): the device's connection manager, shared by its clients.
	OpCMCreateChannel
	OpCMDestroyChannel
	OpCMCreateID
	OpCMDestroyID
	OpCMBindAddr
	OpCMResolveAddr
	OpCMResolveRoute
	OpCMQueryAddr
	OpCMListen
	OpCMConnect
	OpCMAccept
	OpCMReject
	OpCMEstablish
	OpCMDisconnect
	OpCMInitQPAttr
	OpCMJoinMcast
	OpCMLeaveMcast
	// XRC (IBTA Vol. 1 Annex A14): domains shared by file, XRC SRQs, XRC_RECV QPs.
	// XRC_SEND QPs are CREATE_QP's type 9; XRC SRQs and XRC_RECV QPs are destroyed,
	// queried, armed and modified with the SRQ and QP commands.
	OpOpenXRCD
	OpCloseXRCD
	OpCreateXRCSRQ
	OpCreateXRCRecvQP
	// rdma_cm again (cm.go): commands that came after XRC's.
	OpCMSetOption // 50: rdma_set_option, level RDMA_OPTION_ID
	OpCMNotify    // 51: rdma_notify
	// A Go client's own engine on the device's address (the daemon's steer.go).
	OpEngine // 52: a socket in the device's SO_REUSEPORT group and its QPN range
	// The own engine's stat socket (the daemon's ownstat.go): goverbs stat asks it.
	OpEngineStat // 53: fd: the client's end of a SOCK_SEQPACKET pair
	opEnd
)

// CM reports whether op is an rdma_cm command (cm.go).
func (op Op) CM() bool {
	return op >= OpCMCreateChannel && op <= OpCMLeaveMcast || op == OpCMSetOption || op == OpCMNotify
}

// Valid reports whether op is a command of this version.
func (op Op) Valid() bool { return op >= OpHello && op < opEnd }

// Header is a message's header.
type Header struct {
	Op    Op
	Seq   uint32
	Errno int32
	Len   uint32
}

// PutHeader writes h into b[:HdrLen].
func PutHeader(b []byte, h Header) {
	binary.LittleEndian.PutUint16(b[0:], uint16(h.Op))
	binary.LittleEndian.PutUint16(b[2:], 0)
	binary.LittleEndian.PutUint32(b[4:], h.Seq)
	binary.LittleEndian.PutUint32(b[8:], uint32(h.Errno))
	binary.LittleEndian.PutUint32(b[12:], h.Len)
}

// ErrFraming is a message whose header does not describe it.
var ErrFraming = errors.New("attach: malformed message")

// ParseHeader checks msg's header against its length and returns it with the payload.
func ParseHeader(msg []byte) (Header, []byte, error) {
	if len(msg) < HdrLen {
		return Header{}, nil, ErrFraming
	}
	h := Header{Op: Op(binary.LittleEndian.Uint16(msg[0:])), Seq: binary.LittleEndian.Uint32(msg[4:]),
		Errno: int32(binary.LittleEndian.Uint32(msg[8:])), Len: binary.LittleEndian.Uint32(msg[12:])}
	if uint64(h.Len) != uint64(len(msg)-HdrLen) {
		return Header{}, nil, ErrFraming
	}
	return h, msg[HdrLen:], nil
}

// SocketPath is the rendezvous socket of the device on addr in dir (shm.Dir()).
func SocketPath(dir string, addr netip.Addr) string {
	return filepath.Join(dir, "attach-"+addr.Unmap().String()+".sock")
}

// Writer appends little-endian fields to a message.
type Writer struct{ B []byte }

func (w *Writer) U8(v uint8)   { w.B = append(w.B, v) }
func (w *Writer) U16(v uint16) { w.B = binary.LittleEndian.AppendUint16(w.B, v) }
func (w *Writer) U32(v uint32) { w.B = binary.LittleEndian.AppendUint32(w.B, v) }
func (w *Writer) U64(v uint64) { w.B = binary.LittleEndian.AppendUint64(w.B, v) }
func (w *Writer) Bytes(b []byte) {
	w.B = append(w.B, b...)
}

// Int writes a non-negative int as u64 (negative ones as 0).
func (w *Writer) Int(v int) {
	if v < 0 {
		v = 0
	}
	w.U64(uint64(v))
}

// Str writes a string as u16 length and bytes (truncated to 1024).
func (w *Writer) Str(s string) {
	if len(s) > 1024 {
		s = s[:1024]
	}
	w.U16(uint16(len(s)))
	w.B = append(w.B, s...)
}

// Reader takes little-endian fields from a payload a peer wrote. Running short sets
// Err and yields zeros from then on.
type Reader struct {
	B   []byte
	Err error
}

func (r *Reader) take(n int) []byte {
	if r.Err != nil || len(r.B) < n {
		if r.Err == nil {
			r.Err = fmt.Errorf("%w: payload too short", ErrFraming)
		}
		return nil
	}
	b := r.B[:n]
	r.B = r.B[n:]
	return b
}

func (r *Reader) U8() uint8 {
	if b := r.take(1); b != nil {
		return b[0]
	}
	return 0
}
func (r *Reader) U16() uint16 {
	if b := r.take(2); b != nil {
		return binary.LittleEndian.Uint16(b)
	}
	return 0
}
func (r *Reader) U32() uint32 {
	if b := r.take(4); b != nil {
		return binary.LittleEndian.Uint32(b)
	}
	return 0
}
func (r *Reader) U64() uint64 {
	if b := r.take(8); b != nil {
		return binary.LittleEndian.Uint64(b)
	}
	return 0
}

// Int reads a u64 written by Writer.Int, clamped to an int.
func (r *Reader) Int() int {
	v := r.U64()
	if v > math.MaxInt32 {
		return math.MaxInt32
	}
	return int(v)
}

// Fixed reads n bytes into a copy.
func (r *Reader) Fixed(dst []byte) {
	if b := r.take(len(dst)); b != nil {
		copy(dst, b)
	}
}

// Str reads a string written by Writer.Str.
func (r *Reader) Str() string {
	n := int(r.U16())
	if b := r.take(n); b != nil {
		return string(b)
	}
	return ""
}

// The own engine's stat socket (ENGINE_STAT, docs/attach-protocol.md): a
// SOCK_SEQPACKET pair whose one end the client keeps and the other it gives the daemon.
// The daemon asks with an 8-byte message, a sequence number (little-endian); the
// client answers with messages of the same number, a flag byte (1 on the last) and up
// to StatChunk bytes of text: a line "engine NAME VALUE ..." (its engine's counters),
// then one line "qp QPN tx_pkts N ..." per QP of its engine (package control's
// PrintQPStats line).
const (
	StatHdr   = 9
	StatChunk = 16 << 10
)

package attach

import (
	"encoding/binary"

	"github.com/goverbs/goverbs/internal/shm"
	"github.com/goverbs/goverbs/verbs/driver"
)

// Shared-memory layouts (docs/attach-protocol.md, "Queues"). Every queue is one of
// internal/shm's slot rings: a 256-byte control block (head at 0, tail at 128, the
// consumer's sleeping flag at 192), then the slots. Fields are little-endian.

// Entry sizes.
const (
	SGELen     = 16 // u64 addr, u32 length, u32 lkey
	SendWQEHdr = 96 // a send WQE's fixed part; its SGEs follow
	RecvWQEHdr = 16 // a receive WQE's fixed part; its SGEs follow
	CQELen     = 64 // a completion
	// MaxSGE bounds the SGEs of a WQE slot, so that a slot's size is bounded too.
	MaxSGE = 32
)

// SendSlot and RecvSlot are the slot sizes of queues with room for sge SGEs per WQE.
func SendSlot(sge uint32) int { return SendWQEHdr + SGELen*int(max(sge, 1)) }
func RecvSlot(sge uint32) int { return RecvWQEHdr + SGELen*int(max(sge, 1)) }

// RingSlots is the slot count of a ring that holds depth entries: a power of two.
func RingSlots(depth uint32) int {
	n := 1
	for n < int(depth) {
		n <<= 1
	}
	return n
}

func alignUp(n, a int) int { return (n + a - 1) &^ (a - 1) }

// CQLayout is a CQ region: the ring of completions the daemon writes, then the CQ's
// control words at CtlOff:
//
//	CtlOff+0  u32 arm       0 not armed; 1 next completion; 2 next solicited one. The
//	                        client stores it (ibv_req_notify_cq); the daemon swaps it to
//	                        0 when it fires and writes the CQ's eventfd.
//	CtlOff+4  u32 overflow  1 once completions were lost (the CQ overran)
type CQLayout struct{ Slots, CtlOff, Size int }

// CQRegion lays out a CQ of depth entries.
func CQRegion(depth uint32) CQLayout {
	n := RingSlots(depth)
	off := alignUp(shm.SlotRingSize(n, CQELen), 64)
	return CQLayout{Slots: n, CtlOff: off, Size: off + 64}
}

// QPLayout is a QP region: the send queue's ring at 0, the receive queue's at RQOff
// (none when the QP has an SRQ: RQSlots 0).
type QPLayout struct {
	SQSlots, SQSlot int
	RQOff           int
	RQSlots, RQSlot int
	Size            int
}

// QPRegion lays out a QP's queues for its capabilities.
func QPRegion(c driver.QPCap, srq bool) QPLayout {
	l := QPLayout{SQSlots: RingSlots(max(c.MaxSendWR, 1)), SQSlot: SendSlot(c.MaxSendSGE)}
	l.RQOff = alignUp(shm.SlotRingSize(l.SQSlots, l.SQSlot), 4096)
	l.Size = l.RQOff
	if !srq {
		l.RQSlots, l.RQSlot = RingSlots(max(c.MaxRecvWR, 1)), RecvSlot(c.MaxRecvSGE)
		l.Size += shm.SlotRingSize(l.RQSlots, l.RQSlot)
	}
	return l
}

// SendWQE is a send work request as a slot holds it; handles name the session's
// objects (an AH, a window and a region for BIND_MW).
//
//	0 u64 wr_id          40 u64 compare_add
//	8 u32 opcode         48 u64 swap
//	12 u32 send_flags    56 u32 remote_qpn (UD), remote_srqn (XRC_SEND)
//	16 u32 imm           60 u32 remote_qkey (UD)
//	20 u32 num_sge       64 u32 bind_mw, 68 u32 bind_rkey, 72 u32 bind_mr, 76 u32 bind_access
//	24 u64 remote_addr   80 u64 bind_addr
//	32 u32 rkey          88 u64 bind_length
//	36 u32 ah (UD)       96 the SGEs
type SendWQE struct {
	AH, BindMW, BindMR uint32
}

// PutSendWQE writes wr into slot, whose size holds len(wr.SGL) SGEs; handles are
// the session's handles of wr's AH and binding.
func PutSendWQE(slot []byte, wr *driver.SendWR, h SendWQE, bindRKey uint32, bindAddr, bindLen uint64, bindAccess driver.Access) {
	le := binary.LittleEndian
	le.PutUint64(slot[0:], wr.ID)
	le.PutUint32(slot[8:], uint32(wr.Opcode))
	le.PutUint32(slot[12:], uint32(wr.Flags))
	le.PutUint32(slot[16:], wr.Imm)
	le.PutUint32(slot[20:], uint32(len(wr.SGL)))
	le.PutUint64(slot[24:], wr.RemoteAddr)
	le.PutUint32(slot[32:], wr.RKey)
	le.PutUint32(slot[36:], h.AH)
	le.PutUint64(slot[40:], wr.CompareAdd)
	le.PutUint64(slot[48:], wr.Swap)
	le.PutUint32(slot[56:], wr.RemoteQPN|wr.RemoteSRQN) // a UD QP sets the one, an XRC_SEND QP the other
	le.PutUint32(slot[60:], wr.RemoteQKey)
	le.PutUint32(slot[64:], h.BindMW)
	le.PutUint32(slot[68:], bindRKey)
	le.PutUint32(slot[72:], h.BindMR)
	le.PutUint32(slot[76:], uint32(bindAccess))
	le.PutUint64(slot[80:], bindAddr)
	le.PutUint64(slot[88:], bindLen)
	putSGL(slot[SendWQEHdr:], wr.SGL)
}

func putSGL(b []byte, sgl []driver.SGE) {
	for i, s := range sgl {
		o := i * SGELen
		binary.LittleEndian.PutUint64(b[o:], s.Addr)
		binary.LittleEndian.PutUint32(b[o+8:], s.Length)
		binary.LittleEndian.PutUint32(b[o+12:], s.LKey)
	}
}

// SendBind is a BIND_MW WQE's binding as the slot has it.
type SendBind struct {
	RKey, Access uint32
	Addr, Length uint64
}

// ParseSendWQE decodes a slot the client wrote into wr (its SGL into sgl's array, of
// capacity the QP's max SGEs). slot must be a private copy: the client can rewrite
// shared memory while we read it. ok is false for an entry no client could have
// written (more SGEs than the QP has). The word at 56 goes to wr.RemoteQPN; for an
// XRC_SEND QP it is the remote SRQ number, which the daemon, knowing the QP's type, moves.
func ParseSendWQE(slot []byte, wr *driver.SendWR, sgl []driver.SGE) (h SendWQE, b SendBind, ok bool) {
	if len(slot) < SendWQEHdr {
		return h, b, false
	}
	le := binary.LittleEndian
	n := le.Uint32(slot[20:])
	if uint64(n) > uint64(cap(sgl)) || SendWQEHdr+int(n)*SGELen > len(slot) {
		return h, b, false
	}
	*wr = driver.SendWR{ID: le.Uint64(slot[0:]), Opcode: driver.WROpcode(le.Uint32(slot[8:])),
		Flags: driver.SendFlags(le.Uint32(slot[12:])), Imm: le.Uint32(slot[16:]),
		RemoteAddr: le.Uint64(slot[24:]), RKey: le.Uint32(slot[32:]), CompareAdd: le.Uint64(slot[40:]),
		Swap: le.Uint64(slot[48:]), RemoteQPN: le.Uint32(slot[56:]), RemoteQKey: le.Uint32(slot[60:])}
	if le.Uint32(slot[8:]) > 0xff {
		return h, b, false
	}
	h = SendWQE{AH: le.Uint32(slot[36:]), BindMW: le.Uint32(slot[64:]), BindMR: le.Uint32(slot[72:])}
	b = SendBind{RKey: le.Uint32(slot[68:]), Access: le.Uint32(slot[76:]), Addr: le.Uint64(slot[80:]), Length: le.Uint64(slot[88:])}
	wr.SGL = parseSGL(slot[SendWQEHdr:], sgl[:n])
	return h, b, true
}

func parseSGL(b []byte, sgl []driver.SGE) []driver.SGE {
	for i := range sgl {
		o := i * SGELen
		sgl[i] = driver.SGE{Addr: binary.LittleEndian.Uint64(b[o:]), Length: binary.LittleEndian.Uint32(b[o+8:]),
			LKey: binary.LittleEndian.Uint32(b[o+12:])}
	}
	return sgl
}

// A receive WQE: 0 u64 wr_id, 8 u32 num_sge, 12 u32 0, 16 the SGEs.

// PutRecvWQE writes wr into slot.
func PutRecvWQE(slot []byte, wr *driver.RecvWR) {
	binary.LittleEndian.PutUint64(slot[0:], wr.ID)
	binary.LittleEndian.PutUint32(slot[8:], uint32(len(wr.SGL)))
	binary.LittleEndian.PutUint32(slot[12:], 0)
	putSGL(slot[RecvWQEHdr:], wr.SGL)
}

// ParseRecvWQE decodes a private copy of a receive slot, as ParseSendWQE does.
func ParseRecvWQE(slot []byte, wr *driver.RecvWR, sgl []driver.SGE) bool {
	if len(slot) < RecvWQEHdr {
		return false
	}
	n := binary.LittleEndian.Uint32(slot[8:])
	if uint64(n) > uint64(cap(sgl)) || RecvWQEHdr+int(n)*SGELen > len(slot) {
		return false
	}
	wr.ID = binary.LittleEndian.Uint64(slot[0:])
	wr.SGL = parseSGL(slot[RecvWQEHdr:], sgl[:n])
	return true
}

// A completion:
//
//	0 u64 wr_id    12 u32 byte_len   24 u32 src_qp
//	8 u8 status    16 u32 imm        28 u32 wc_flags
//	9 u8 opcode    20 u32 qp_num     32 u32 vendor_err   36..63 zero
//	10 u16 0

// PutCQE writes wc into slot.
func PutCQE(slot []byte, wc *driver.WC) {
	le := binary.LittleEndian
	le.PutUint64(slot[0:], wc.ID)
	slot[8], slot[9] = byte(wc.Status), byte(wc.Opcode)
	le.PutUint16(slot[10:], 0)
	le.PutUint32(slot[12:], wc.ByteLen)
	le.PutUint32(slot[16:], wc.Imm)
	le.PutUint32(slot[20:], wc.QPN)
	le.PutUint32(slot[24:], wc.SrcQP)
	le.PutUint32(slot[28:], uint32(wc.Flags))
	le.PutUint32(slot[32:], wc.VendorErr)
}

// ParseCQE decodes a completion slot.
func ParseCQE(slot []byte, wc *driver.WC) {
	le := binary.LittleEndian
	*wc = driver.WC{ID: le.Uint64(slot[0:]), Status: driver.WCStatus(slot[8]), Opcode: driver.WCOpcode(slot[9]),
		ByteLen: le.Uint32(slot[12:]), Imm: le.Uint32(slot[16:]), QPN: le.Uint32(slot[20:]), SrcQP: le.Uint32(slot[24:]),
		Flags: driver.WCFlags(le.Uint32(slot[28:])), VendorErr: le.Uint32(slot[32:])}
}

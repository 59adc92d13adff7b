package wire

import "encoding/binary"

// RETH is the RDMA Extended Transport Header (IBTA Vol. 1 9.3.3), carried by
// RDMA WRITE FIRST/ONLY and RDMA READ requests.
//
//	 0                   1                   2                   3
//	+---------------------------------------------------------------+
//	|                    Virtual Address (63..32)                   |
//	+---------------------------------------------------------------+
//	|                    Virtual Address (31..0)                    |
//	+---------------------------------------------------------------+
//	|                         R_Key                                 |
//	+---------------------------------------------------------------+
//	|                       DMA Length                              |
//	+---------------------------------------------------------------+
type RETH []byte

// RETHFields is the whole RETH decoded.
type RETHFields struct {
	VA     uint64
	RKey   uint32
	DMALen uint32
}

// VA is the remote virtual address.
func (h RETH) VA() uint64 { return binary.BigEndian.Uint64(h[0:]) }

// RKey is the remote key of the target memory region.
func (h RETH) RKey() uint32 { return binary.BigEndian.Uint32(h[8:]) }

// DMALen is the length in bytes of the whole RDMA operation.
func (h RETH) DMALen() uint32 { return binary.BigEndian.Uint32(h[12:]) }

// SetVA sets the virtual address.
func (h RETH) SetVA(v uint64) { binary.BigEndian.PutUint64(h[0:], v) }

// SetRKey sets the remote key.
func (h RETH) SetRKey(v uint32) { binary.BigEndian.PutUint32(h[8:], v) }

// SetDMALen sets the DMA length.
func (h RETH) SetDMALen(v uint32) { binary.BigEndian.PutUint32(h[12:], v) }

// Encode writes f into h.
func (h RETH) Encode(f *RETHFields) {
	_ = h[RETHLen-1]
	h.SetVA(f.VA)
	h.SetRKey(f.RKey)
	h.SetDMALen(f.DMALen)
}

// Fields decodes h.
func (h RETH) Fields() RETHFields {
	_ = h[RETHLen-1]
	return RETHFields{VA: h.VA(), RKey: h.RKey(), DMALen: h.DMALen()}
}

// AETH is the ACK Extended Transport Header (IBTA Vol. 1 9.3.5), carried by
// acknowledgements and by the first, last and only RDMA READ responses.
//
//	 0               1               2               3
//	+---------------+-----------------------------------------------+
//	|   Syndrome    |                   MSN                         |
//	+---------------+-----------------------------------------------+
//
// MSN is the 24-bit Message Sequence Number.
type AETH []byte

// AETHFields is the whole AETH decoded.
type AETHFields struct {
	Syndrome Syndrome
	MSN      uint32
}

// Syndrome says whether this is an ACK, RNR NAK or NAK (see Syndrome).
func (h AETH) Syndrome() Syndrome { return Syndrome(h[0]) }

// MSN is the 24-bit message sequence number.
func (h AETH) MSN() uint32 { return get24(h[1:]) }

// SetSyndrome sets the syndrome byte.
func (h AETH) SetSyndrome(s Syndrome) { h[0] = byte(s) }

// SetMSN sets the MSN (low 24 bits of v).
func (h AETH) SetMSN(v uint32) { put24(h[1:], v&mask24) }

// Encode writes f into h.
func (h AETH) Encode(f *AETHFields) {
	_ = h[AETHLen-1]
	h[0] = byte(f.Syndrome)
	put24(h[1:], f.MSN&mask24)
}

// Fields decodes h.
func (h AETH) Fields() AETHFields {
	_ = h[AETHLen-1]
	return AETHFields{Syndrome: h.Syndrome(), MSN: h.MSN()}
}

// AtomicETH is the Atomic Extended Transport Header (IBTA Vol. 1 9.3.4),
// carried by CmpSwap and FetchAdd requests.
//
//	 0                   1                   2                   3
//	+---------------------------------------------------------------+
//	|                 Virtual Address (8 bytes)                     |
//	+---------------------------------------------------------------+
//	|                         R_Key                                 |
//	+---------------------------------------------------------------+
//	|              Swap (or Add) Data (8 bytes)                     |
//	+---------------------------------------------------------------+
//	|                Compare Data (8 bytes)                         |
//	+---------------------------------------------------------------+
type AtomicETH []byte

// AtomicETHFields is the whole AtomicETH decoded.
type AtomicETHFields struct {
	VA      uint64
	RKey    uint32
	SwapAdd uint64
	Compare uint64
}

// VA is the remote virtual address (8-byte aligned).
func (h AtomicETH) VA() uint64 { return binary.BigEndian.Uint64(h[0:]) }

// RKey is the remote key.
func (h AtomicETH) RKey() uint32 { return binary.BigEndian.Uint32(h[8:]) }

// SwapAdd is the "Swap (or Add) Data" field.
func (h AtomicETH) SwapAdd() uint64 { return binary.BigEndian.Uint64(h[12:]) }

// Compare is the "Compare Data" field (CmpSwap only).
func (h AtomicETH) Compare() uint64 { return binary.BigEndian.Uint64(h[20:]) }

// SetVA sets the virtual address.
func (h AtomicETH) SetVA(v uint64) { binary.BigEndian.PutUint64(h[0:], v) }

// SetRKey sets the remote key.
func (h AtomicETH) SetRKey(v uint32) { binary.BigEndian.PutUint32(h[8:], v) }

// SetSwapAdd sets the swap/add data.
func (h AtomicETH) SetSwapAdd(v uint64) { binary.BigEndian.PutUint64(h[12:], v) }

// SetCompare sets the compare data.
func (h AtomicETH) SetCompare(v uint64) { binary.BigEndian.PutUint64(h[20:], v) }

// Encode writes f into h.
func (h AtomicETH) Encode(f *AtomicETHFields) {
	_ = h[AtomicETHLen-1]
	h.SetVA(f.VA)
	h.SetRKey(f.RKey)
	h.SetSwapAdd(f.SwapAdd)
	h.SetCompare(f.Compare)
}

// Fields decodes h.
func (h AtomicETH) Fields() AtomicETHFields {
	_ = h[AtomicETHLen-1]
	return AtomicETHFields{VA: h.VA(), RKey: h.RKey(), SwapAdd: h.SwapAdd(), Compare: h.Compare()}
}

// AtomicAckETH is the Atomic Acknowledge Extended Transport Header (IBTA
// Vol. 1 9.3.6): the value the target held before the atomic operation.
//
//	+---------------------------------------------------------------+
//	|                Original Remote Data (8 bytes)                 |
//	+---------------------------------------------------------------+
type AtomicAckETH []byte

// OrigData is the original remote data.
func (h AtomicAckETH) OrigData() uint64 { return binary.BigEndian.Uint64(h) }

// SetOrigData sets the original remote data.
func (h AtomicAckETH) SetOrigData(v uint64) { binary.BigEndian.PutUint64(h, v) }

// ImmDt is the Immediate Data extended header (IBTA Vol. 1 9.3.7).
//
//	+---------------------------------------------------------------+
//	|                     Immediate Data                            |
//	+---------------------------------------------------------------+
//
// The four bytes are opaque to the transport; Imm reads them big endian, so
// the value equals what libibverbs carries in its network-order imm_data.
type ImmDt []byte

// Imm is the immediate data read big endian.
func (h ImmDt) Imm() uint32 { return binary.BigEndian.Uint32(h) }

// SetImm writes the immediate data big endian.
func (h ImmDt) SetImm(v uint32) { binary.BigEndian.PutUint32(h, v) }

// IETH is the Invalidate Extended Transport Header (IBTA Vol. 1 9.3.8,
// SEND with Invalidate): the R_Key the responder invalidates.
//
//	+---------------------------------------------------------------+
//	|                          R_Key                                |
//	+---------------------------------------------------------------+
type IETH []byte

// RKey is the R_Key to invalidate.
func (h IETH) RKey() uint32 { return binary.BigEndian.Uint32(h) }

// SetRKey sets the R_Key to invalidate.
func (h IETH) SetRKey(v uint32) { binary.BigEndian.PutUint32(h, v) }

// DETH is the Datagram Extended Transport Header (IBTA Vol. 1 9.3.2), carried
// by every UD packet.
//
//	 0               1               2               3
//	+---------------------------------------------------------------+
//	|                          Q_Key                                |
//	+---------------+-----------------------------------------------+
//	|   Reserved    |                 SrcQP                         |
//	+---------------+-----------------------------------------------+
//
// The reserved byte is sent as zero; Encode always writes zero there.
type DETH []byte

// DETHFields is the DETH decoded (the reserved byte is not kept).
type DETHFields struct {
	QKey  uint32
	SrcQP uint32
}

// QKey is the queue key.
func (h DETH) QKey() uint32 { return binary.BigEndian.Uint32(h) }

// SrcQP is the 24-bit source queue pair number.
func (h DETH) SrcQP() uint32 { return get24(h[5:]) }

// SetQKey sets the queue key.
func (h DETH) SetQKey(v uint32) { binary.BigEndian.PutUint32(h, v) }

// SetSrcQP sets the source QP (low 24 bits of v).
func (h DETH) SetSrcQP(v uint32) { put24(h[5:], v&mask24) }

// Encode writes f into h, with the reserved byte zero.
func (h DETH) Encode(f *DETHFields) {
	_ = h[DETHLen-1]
	h.SetQKey(f.QKey)
	h[4] = 0
	h.SetSrcQP(f.SrcQP)
}

// Fields decodes h.
func (h DETH) Fields() DETHFields {
	_ = h[DETHLen-1]
	return DETHFields{QKey: h.QKey(), SrcQP: h.SrcQP()}
}

// XRCETH is the XRC Extended Transport Header (IBTA Vol. 1 Annex A14), carried by
// every XRC request directly after the BTH. It names the XRC SRQ at the target
// whose receive WQEs (and whose XRC domain) the request uses; the BTH's DestQP
// names the target's XRC_RECV QP, which holds the transport state.
//
//	 0               1               2               3
//	+---------------+-----------------------------------------------+
//	|   Reserved    |              XRC SRQ Number                   |
//	+---------------+-----------------------------------------------+
//
// The reserved byte is sent as zero and ignored on receive.
type XRCETH []byte

// SRQN is the 24-bit XRC SRQ number.
func (h XRCETH) SRQN() uint32 { return get24(h[1:]) }

// SetSRQN sets the XRC SRQ number (low 24 bits of v) and zeroes the reserved byte.
func (h XRCETH) SetSRQN(v uint32) {
	h[0] = 0
	put24(h[1:], v&mask24)
}

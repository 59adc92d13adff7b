package attach

import "github.com/goverbs/goverbs/verbs/driver"

// The attribute structs on the wire, each field in its declared order: integers as
// the widths below, little-endian (docs/attach-protocol.md, "Attributes").

// PutAH writes an address vector: gid[16], u8 sgid_index, hop_limit, traffic_class,
// sl, port, 3 zero bytes, u32 flow_label.
func (w *Writer) PutAH(a *driver.AHAttr) {
	w.Bytes(a.DGID[:])
	w.U8(a.SGIDIndex)
	w.U8(a.HopLimit)
	w.U8(a.TrafficClass)
	w.U8(a.SL)
	w.U8(a.Port)
	w.Bytes([]byte{0, 0, 0})
	w.U32(a.FlowLabel)
}

// AH reads what PutAH wrote.
func (r *Reader) AH() driver.AHAttr {
	var a driver.AHAttr
	r.Fixed(a.DGID[:])
	a.SGIDIndex, a.HopLimit, a.TrafficClass, a.SL, a.Port = r.U8(), r.U8(), r.U8(), r.U8(), r.U8()
	r.take(3)
	a.FlowLabel = r.U32()
	return a
}

// PutCap writes a QP's capabilities: five u32.
func (w *Writer) PutCap(c driver.QPCap) {
	w.U32(c.MaxSendWR)
	w.U32(c.MaxRecvWR)
	w.U32(c.MaxSendSGE)
	w.U32(c.MaxRecvSGE)
	w.U32(c.MaxInline)
}

// Cap reads what PutCap wrote.
func (r *Reader) Cap() driver.QPCap {
	return driver.QPCap{MaxSendWR: r.U32(), MaxRecvWR: r.U32(), MaxSendSGE: r.U32(), MaxRecvSGE: r.U32(), MaxInline: r.U32()}
}

// PutQPAttr writes a QP's attributes: u8 state, cur_state, path_mtu, port,
// min_rnr_timer, timeout, retry_cnt, rnr_retry, max_rd_atomic, max_dest_rd_atomic,
// u16 pkey_index, u32 qkey, rq_psn, sq_psn, dest_qp_num, access_flags, the cap, the AH.
func (w *Writer) PutQPAttr(a *driver.QPAttr) {
	for _, v := range []uint8{uint8(a.State), uint8(a.CurState), uint8(a.PathMTU), a.Port, a.MinRNRTimer, a.Timeout,
		a.RetryCnt, a.RNRRetry, a.MaxRdAtomic, a.MaxDestRdAtomic} {
		w.U8(v)
	}
	w.U16(a.PKeyIndex)
	w.U32(a.QKey)
	w.U32(a.RQPSN)
	w.U32(a.SQPSN)
	w.U32(a.DestQPN)
	w.U32(uint32(a.AccessFlags))
	w.PutCap(a.Cap)
	w.PutAH(&a.AH)
}

// QPAttr reads what PutQPAttr wrote.
func (r *Reader) QPAttr() driver.QPAttr {
	var a driver.QPAttr
	a.State, a.CurState, a.PathMTU = driver.QPState(r.U8()), driver.QPState(r.U8()), driver.MTU(r.U8())
	a.Port, a.MinRNRTimer, a.Timeout, a.RetryCnt, a.RNRRetry = r.U8(), r.U8(), r.U8(), r.U8(), r.U8()
	a.MaxRdAtomic, a.MaxDestRdAtomic = r.U8(), r.U8()
	a.PKeyIndex = r.U16()
	a.QKey, a.RQPSN, a.SQPSN, a.DestQPN = r.U32(), r.U32(), r.U32(), r.U32()
	a.AccessFlags = driver.Access(r.U32())
	a.Cap = r.Cap()
	a.AH = r.AH()
	return a
}

// PutDeviceAttr writes a device's attributes: fw_ver as a string, then u64 node_guid,
// sys_image_guid, max_mr_size, page_size_cap, and every other field in DeviceAttr's
// order as u64, atomic_cap, phys_port_cnt and max_pkeys included.
func (w *Writer) PutDeviceAttr(a *driver.DeviceAttr) {
	w.Str(a.FWVer)
	for _, v := range []uint64{a.NodeGUID, a.SysImageGUID, a.MaxMRSize, a.PageSizeCap, uint64(a.VendorID),
		uint64(a.VendorPartID), uint64(a.HWVer)} {
		w.U64(v)
	}
	for _, v := range []int{a.MaxQP, a.MaxQPWR, int(a.DeviceCapFlags), a.MaxSGE, a.MaxSGERd, a.MaxCQ, a.MaxCQE, a.MaxMR,
		a.MaxPD, a.MaxQPRdAtom, a.MaxQPInitRdAtom, a.MaxSRQ, a.MaxSRQWR, a.MaxSRQSGE, a.MaxAH, a.MaxMcastGrp,
		a.MaxMcastQPAttach, a.MaxTotalMcastQPAttach, a.MaxMW, a.MaxInlineData, int(a.AtomicCap), int(a.PhysPortCnt),
		int(a.MaxPKeys)} {
		w.Int(v)
	}
}

// DeviceAttr reads what PutDeviceAttr wrote.
func (r *Reader) DeviceAttr() driver.DeviceAttr {
	var a driver.DeviceAttr
	a.FWVer = r.Str()
	a.NodeGUID, a.SysImageGUID, a.MaxMRSize, a.PageSizeCap = r.U64(), r.U64(), r.U64(), r.U64()
	a.VendorID, a.VendorPartID, a.HWVer = uint32(r.U64()), uint32(r.U64()), uint32(r.U64())
	a.MaxQP, a.MaxQPWR, a.DeviceCapFlags = r.Int(), r.Int(), uint32(r.Int())
	a.MaxSGE, a.MaxSGERd, a.MaxCQ, a.MaxCQE, a.MaxMR = r.Int(), r.Int(), r.Int(), r.Int(), r.Int()
	a.MaxPD, a.MaxQPRdAtom, a.MaxQPInitRdAtom, a.MaxSRQ, a.MaxSRQWR = r.Int(), r.Int(), r.Int(), r.Int(), r.Int()
	a.MaxSRQSGE, a.MaxAH, a.MaxMcastGrp, a.MaxMcastQPAttach = r.Int(), r.Int(), r.Int(), r.Int()
	a.MaxTotalMcastQPAttach, a.MaxMW, a.MaxInlineData = r.Int(), r.Int(), r.Int()
	a.AtomicCap, a.PhysPortCnt, a.MaxPKeys = driver.AtomicCap(r.Int()), uint8(r.Int()), uint16(r.Int())
	return a
}

// PutPortAttr writes a port's attributes: u8 state, max_mtu, active_mtu, lmc,
// phys_state, 3 zero bytes, u32 gid_tbl_len, port_cap_flags, max_msg_sz, u16
// pkey_tbl_len, lid, sm_lid, then link_layer, active_speed, active_width as strings.
func (w *Writer) PutPortAttr(a *driver.PortAttr) {
	w.U8(uint8(a.State))
	w.U8(uint8(a.MaxMTU))
	w.U8(uint8(a.ActiveMTU))
	w.U8(a.LMC)
	w.U8(a.PhysState)
	w.Bytes([]byte{0, 0, 0})
	w.U32(uint32(a.GIDTblLen))
	w.U32(a.PortCapFlags)
	w.U32(a.MaxMsgSz)
	w.U16(a.PKeyTblLen)
	w.U16(a.LID)
	w.U16(a.SMLID)
	w.Str(a.LinkLayer)
	w.Str(a.ActiveSpeed)
	w.Str(a.ActiveWidth)
}

// PortAttr reads what PutPortAttr wrote.
func (r *Reader) PortAttr() driver.PortAttr {
	var a driver.PortAttr
	a.State, a.MaxMTU, a.ActiveMTU, a.LMC, a.PhysState = driver.PortState(r.U8()), driver.MTU(r.U8()), driver.MTU(r.U8()), r.U8(), r.U8()
	r.take(3)
	a.GIDTblLen, a.PortCapFlags, a.MaxMsgSz = int(r.U32()), r.U32(), r.U32()
	a.PKeyTblLen, a.LID, a.SMLID = r.U16(), r.U16(), r.U16()
	a.LinkLayer, a.ActiveSpeed, a.ActiveWidth = r.Str(), r.Str(), r.Str()
	return a
}

// PutCounters writes named counters: u32 count, then per counter its name (a
// string) and u64 value.
func (w *Writer) PutCounters(c driver.Counters) {
	w.U32(uint32(len(c)))
	for _, x := range c {
		w.Str(x.Name)
		w.U64(x.Value)
	}
}

// Counters reads what PutCounters wrote.
func (r *Reader) Counters() driver.Counters {
	n := r.U32()
	var out driver.Counters
	for i := uint32(0); i < n && r.Err == nil; i++ {
		out = append(out, driver.Counter{Name: r.Str(), Value: r.U64()})
	}
	return out
}

// PutQPCounters writes a QP's nine counters as u64, in QPCounters' order.
func (w *Writer) PutQPCounters(c driver.QPCounters) {
	for _, v := range []uint64{c.TxPackets, c.RxPackets, c.Retransmits, c.RetryTimeouts, c.RNRNakSent, c.RNRNakReceived,
		c.SeqNakSent, c.SeqNakReceived, c.DuplicateRequests} {
		w.U64(v)
	}
}

// QPCounters reads what PutQPCounters wrote.
func (r *Reader) QPCounters() driver.QPCounters {
	return driver.QPCounters{TxPackets: r.U64(), RxPackets: r.U64(), Retransmits: r.U64(), RetryTimeouts: r.U64(),
		RNRNakSent: r.U64(), RNRNakReceived: r.U64(), SeqNakSent: r.U64(), SeqNakReceived: r.U64(), DuplicateRequests: r.U64()}
}

// An async event on the event socket is one message of 16 bytes: u32 type (enum
// ibv_event_type), u32 what (EventQP, EventCQ, EventSRQ or EventPort), u32 handle
// (the object's, or the port number), u32 0.
const (
	EventPort uint32 = iota
	EventQP
	EventCQ
	EventSRQ
	EventLen = 16
)

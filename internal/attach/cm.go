package attach

import (
	"encoding/binary"
	"net/netip"

	"github.com/goverbs/goverbs/verbs/driver"
)

// rdma_cm over the attach protocol (docs/attach-protocol.md, "rdma_cm"): the daemon's
// connection manager of the device, shared by every client as the kernel's rdma_cm
// is, commands shaped as rdma_ucm's and events on an event channel socket.

// Port spaces (enum rdma_port_space).
const (
	PortSpaceIPoIB = 0x0002
	PortSpaceTCP   = 0x0106
	PortSpaceUDP   = 0x0111
)

// Address families of an address field.
const (
	AFNone  = 0
	AFInet  = 2
	AFInet6 = 10
)

// AddrLen is an address field: u16 family (AFNone, AFInet, AFInet6), u16 port, 16
// bytes of address (an IPv4 one as ::ffff:a.b.c.d).
const AddrLen = 20

// PutAddr writes a (the zero AddrPort as family AFNone).
func (w *Writer) PutAddr(a netip.AddrPort) {
	ip := a.Addr()
	switch {
	case !ip.IsValid():
		w.U16(AFNone)
	case ip.Unmap().Is4():
		w.U16(AFInet)
	default:
		w.U16(AFInet6)
	}
	w.U16(a.Port())
	var b [16]byte
	if ip.IsValid() {
		b = ip.As16()
	}
	w.Bytes(b[:])
}

// Addr reads an address field; family AFNone (or an unknown one) is the zero AddrPort.
func (r *Reader) Addr() netip.AddrPort {
	fam, port := r.U16(), r.U16()
	var b [16]byte
	r.Fixed(b[:])
	ip := netip.AddrFrom16(b)
	switch fam {
	case AFInet:
		if !ip.Is4In6() {
			return netip.AddrPort{}
		}
		return netip.AddrPortFrom(ip.Unmap(), port)
	case AFInet6:
		return netip.AddrPortFrom(ip, port)
	}
	return netip.AddrPort{}
}

// ConnParam is struct rdma_conn_param: u8 responder_resources, initiator_depth,
// retry_count, rnr_retry_count, srq, private_data_len; u16 0; u32 qp_num; then
// private_data_len bytes (at most MaxPrivate).
type ConnParam struct {
	ResponderResources, InitiatorDepth uint8
	RetryCount, RNRRetryCount          uint8
	SRQ                                bool
	QPN                                uint32
	PrivateData                        []byte
}

// MaxPrivate bounds private data in commands and events (a u8 length).
const MaxPrivate = 255

// PutConnParam writes p (private data cut to MaxPrivate).
func (w *Writer) PutConnParam(p *ConnParam) {
	priv := p.PrivateData
	if len(priv) > 255 {
		priv = priv[:255]
	}
	w.U8(p.ResponderResources)
	w.U8(p.InitiatorDepth)
	w.U8(p.RetryCount)
	w.U8(p.RNRRetryCount)
	if p.SRQ {
		w.U8(1)
	} else {
		w.U8(0)
	}
	w.U8(uint8(len(priv)))
	w.U16(0)
	w.U32(p.QPN)
	w.Bytes(priv)
}

// ConnParam reads a connection parameter block.
func (r *Reader) ConnParam() ConnParam {
	p := ConnParam{ResponderResources: r.U8(), InitiatorDepth: r.U8(), RetryCount: r.U8(), RNRRetryCount: r.U8(), SRQ: r.U8() != 0}
	n := int(r.U8())
	r.U16()
	p.QPN = r.U32()
	if n > 0 {
		p.PrivateData = make([]byte, n)
		r.Fixed(p.PrivateData)
	}
	return p
}

// CMEvent is an rdma_cm event as the event channel socket carries it, one message
// each:
//
//	off 0   u32 event        enum rdma_cm_event_type
//	off 4   i32 status       REJECTED: the REJ's reason; UNREACHABLE: -ETIMEDOUT or a SIDR status; else 0 or -errno
//	off 8   u64 uid          the id's uid from CM_CREATE_ID (CONNECT_REQUEST: the listener's)
//	off 16  u32 id           the id's handle (CONNECT_REQUEST: the new id's)
//	off 20  u32 listen_id    CONNECT_REQUEST: the listening id's handle, else 0
//	off 24  local address    (AddrLen)
//	off 44  remote address   (AddrLen)
//	off 64  u32 qkey         UD (ESTABLISHED of a UDP id, MULTICAST_JOIN): rdma_ud_param's
//	off 68  address vector   UD: rdma_ud_param's ah_attr (28 bytes, as CREATE_AH's)
//	off 96  conn param       the peer's (CONNECT_REQUEST, CONNECT_RESPONSE; UD: qp_num is
//	                         rdma_ud_param's), with the private data of the event's message
//
// The message is CMEventHdr + private_data_len bytes.
type CMEvent struct {
	Event         uint32
	Status        int32
	UID           uint64
	ID, ListenID  uint32
	Local, Remote netip.AddrPort
	QKey          uint32
	AH            driver.AHAttr
	Param         ConnParam
}

// CMEventHdr is a CM event's fixed part.
const CMEventHdr = 108

// PutCMEvent appends e's message to b.
func PutCMEvent(b []byte, e *CMEvent) []byte {
	w := Writer{B: b}
	w.U32(e.Event)
	w.U32(uint32(e.Status))
	w.U64(e.UID)
	w.U32(e.ID)
	w.U32(e.ListenID)
	w.PutAddr(e.Local)
	w.PutAddr(e.Remote)
	w.U32(e.QKey)
	w.PutAH(&e.AH)
	w.PutConnParam(&e.Param)
	return w.B
}

// ParseCMEvent decodes an event message; false if it is not one.
func ParseCMEvent(m []byte) (CMEvent, bool) {
	if len(m) < CMEventHdr {
		return CMEvent{}, false
	}
	r := Reader{B: m}
	e := CMEvent{Event: r.U32(), Status: int32(r.U32()), UID: r.U64(), ID: r.U32(), ListenID: r.U32()}
	e.Local, e.Remote = r.Addr(), r.Addr()
	e.QKey = r.U32()
	e.AH = r.AH()
	e.Param = r.ConnParam()
	return e, r.Err == nil && len(r.B) == 0 && binary.LittleEndian.Uint32(m) < 64
}

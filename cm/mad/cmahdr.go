package mad

import (
	"errors"
	"fmt"
	"net/netip"
)

// PortSpace is rdma_cm's port space, the upper half of the 32-bit prefix of
// its service IDs (the RDMA IP CM Service annex, A11).
type PortSpace uint16

// rdma_cm's port spaces.
const (
	PortSpaceIPoIB PortSpace = 0x0002
	PortSpaceTCP   PortSpace = 0x0106 // RC and UC connections (RDMA_PS_TCP)
	PortSpaceUDP   PortSpace = 0x0111 // UD through SIDR (RDMA_PS_UDP)
	PortSpaceIB    PortSpace = 0x013F // any QP type (RDMA_PS_IB)
)

func (p PortSpace) String() string {
	switch p {
	case PortSpaceIPoIB:
		return "IPoIB"
	case PortSpaceTCP:
		return "TCP"
	case PortSpaceUDP:
		return "UDP"
	case PortSpaceIB:
		return "IB"
	}
	return fmt.Sprintf("portspace(%#04x)", uint16(p))
}

// ServiceID is the service ID rdma_cm uses for a port in a port space:
// (port space << 16) + port. rping's port 7174 in the TCP space is
// 0x0000000001061C06.
func ServiceID(ps PortSpace, port uint16) uint64 { return uint64(ps)<<16 | uint64(port) }

// SplitServiceID is ServiceID's inverse; ok is false for a service ID that
// is not in one of rdma_cm's port spaces.
func SplitServiceID(id uint64) (ps PortSpace, port uint16, ok bool) {
	ps, port = PortSpace(id>>16), uint16(id)
	switch {
	case id>>32 != 0:
		return 0, 0, false
	case ps == PortSpaceTCP, ps == PortSpaceUDP, ps == PortSpaceIB, ps == PortSpaceIPoIB:
		return ps, port, true
	}
	return 0, 0, false
}

// CMAHeaderLen is the length of rdma_cm's header at the start of a REQ's or
// a SIDR_REQ's private data.
const CMAHeaderLen = 36

// The private data left to an rdma_cm user (librdmacm's budgets): a
// connection's REQ and a SIDR_REQ lose CMAHeaderLen to the header.
const (
	ConnectPrivateLen = REQPrivateLen - CMAHeaderLen     // rdma_connect: 56
	AcceptPrivateLen  = REPPrivateLen                    // rdma_accept: 196
	RejectPrivateLen  = REJPrivateLen                    // rdma_reject: 148
	UDPrivateLen      = SIDRReqPrivateLen - CMAHeaderLen // rdma_connect on UD: 180
)

// Errors from ParseCMAHeader.
var (
	ErrCMAHeaderShort = errors.New("mad: private data shorter than the rdma_cm header")
	ErrCMAVersion     = errors.New("mad: unsupported rdma_cm header version")
	ErrCMAIPVersion   = errors.New("mad: rdma_cm header IP version is neither 4 nor 6")
)

// CMAHeader is the header rdma_cm puts first in the private data of a REQ
// and a SIDR_REQ, which carries the IP addresses the CM's own fields have no
// room for (Linux cma.c's struct cma_hdr; the RDMA IP CM Service annex).
//
//	0  version (0)   1  IP version (4 bits) | reserved   2  source port (16)
//	4  source address (16)   20 destination address (16)
//
// An IPv4 address is in the last 4 bytes of its 16, the first 12 zero.
// The source is the active side (the one that connects).
type CMAHeader []byte

// CMAHeaderFields is a whole rdma_cm header.
type CMAHeaderFields struct {
	Version uint8
	Port    uint16     // the active side's port
	Src     netip.Addr // the active side's address; its IP version is the header's
	Dst     netip.Addr // the address connected to
}

// ParseCMAHeader checks that the private data p starts with a version 0
// rdma_cm header for IPv4 or IPv6.
func ParseCMAHeader(p []byte) (CMAHeader, error) {
	if len(p) < CMAHeaderLen {
		return nil, ErrCMAHeaderShort
	}
	h := CMAHeader(p[:CMAHeaderLen])
	if h.Version() != 0 {
		return nil, fmt.Errorf("%w: %d", ErrCMAVersion, h.Version())
	}
	if v := h.IPVersion(); v != 4 && v != 6 {
		return nil, fmt.Errorf("%w: %d", ErrCMAIPVersion, v)
	}
	return h, nil
}

// Version is the header's version.
func (h CMAHeader) Version() uint8 { return h[0] }

// IPVersion is 4 or 6.
func (h CMAHeader) IPVersion() uint8 { return bits(h[1], 0, 4) }

// Port is the active side's port.
func (h CMAHeader) Port() uint16 { return uint16(h[2])<<8 | uint16(h[3]) }

// Src is the active side's address.
func (h CMAHeader) Src() netip.Addr { return h.addr(h[4:20]) }

// Dst is the address the active side connects to.
func (h CMAHeader) Dst() netip.Addr { return h.addr(h[20:36]) }

func (h CMAHeader) addr(b []byte) netip.Addr {
	if h.IPVersion() == 4 {
		return netip.AddrFrom4([4]byte(b[12:16]))
	}
	return netip.AddrFrom16([16]byte(b))
}

// Fields decodes every field of h.
func (h CMAHeader) Fields() CMAHeaderFields {
	return CMAHeaderFields{Version: h.Version(), Port: h.Port(), Src: h.Src(), Dst: h.Dst()}
}

// Encode writes f into h. The IP version is Src's; an IPv4-mapped IPv6
// address counts as IPv4, as rdma_cm keeps it.
func (h CMAHeader) Encode(f *CMAHeaderFields) {
	_ = h[CMAHeaderLen-1]
	clear(h)
	h[0] = f.Version
	h[2], h[3] = byte(f.Port>>8), byte(f.Port)
	v4 := f.Src.Unmap().Is4()
	if v4 {
		h[1] = 4 << 4
		a, b := f.Src.Unmap().As4(), f.Dst.Unmap().As4()
		copy(h[16:20], a[:])
		copy(h[32:36], b[:])
		return
	}
	h[1] = 6 << 4
	a, b := f.Src.As16(), f.Dst.As16()
	copy(h[4:20], a[:])
	copy(h[20:36], b[:])
}

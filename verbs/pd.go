package verbs

import (
	"fmt"
	"net/netip"

	"github.com/goverbs/goverbs/verbs/driver"
)

// PD is a protection domain (struct ibv_pd): memory regions, address handles and QPs
// work together only within one PD.
type PD struct {
	dev  *Device
	impl driver.PD
	life life
}

// Device returns the device the PD belongs to.
func (pd *PD) Device() *Device { return pd.dev }

// Close deallocates the PD (ibv_dealloc_pd). It fails with ErrBusy while MRs, MWs, QPs
// or SRQs still use it.
func (pd *PD) Close() error {
	if pd.dev.closed.Load() {
		return errDeviceClosed
	}
	return pd.life.close(errPDClosed, pd.impl.Close)
}

// usable reports why the PD cannot make objects, nil if it can.
func (pd *PD) usable() error { return pd.dev.usable(&pd.life, errPDClosed) }

// MR is a registered memory region (struct ibv_mr). The region is buf as passed to
// RegMR; Addr is buf's virtual address, which a peer uses in RDMA and atomic requests.
type MR struct {
	pd     *PD
	impl   driver.MR
	life   life
	buf    []byte
	access Access
}

// RegMR registers buf for access (ibv_reg_mr). buf may be any Go byte slice, or
// caller-owned memory such as an mmap'd area (see Mmap). The memory must stay untouched
// by the garbage collector's moves: Go's heap does not move objects, so any slice works.
// Remote write and remote atomic need local write (IBTA 10.6.3.1).
func (pd *PD) RegMR(buf []byte, access Access) (*MR, error) {
	if err := pd.usable(); err != nil {
		return nil, err
	}
	impl, err := pd.impl.RegMR(buf, access)
	if err != nil {
		return nil, &opError{"register memory region", err}
	}
	return &MR{pd: pd, impl: impl, buf: buf, access: access}, nil
}

// Close deregisters the region (ibv_dereg_mr); its keys stop working at once. It fails
// with ErrBusy while memory windows are bound to it.
func (mr *MR) Close() error {
	if mr.pd.dev.closed.Load() {
		return errDeviceClosed
	}
	return mr.life.close(errMRClosed, mr.impl.Close)
}

// LKey is the local key, for SGEs.
func (mr *MR) LKey() uint32 { return mr.impl.LKey() }

// RKey is the remote key a peer puts in RDMA and atomic requests.
func (mr *MR) RKey() uint32 { return mr.impl.RKey() }

// Addr is the region's start address.
func (mr *MR) Addr() uint64 { return mr.impl.Addr() }

// Buf is the registered memory.
func (mr *MR) Buf() []byte { return mr.buf }

// Len is the region's length in bytes.
func (mr *MR) Len() int { return len(mr.buf) }

// Access returns the region's access rights.
func (mr *MR) Access() Access { return mr.access }

// SGE returns the scatter/gather element for n bytes at offset off of the region.
func (mr *MR) SGE(off, n int) SGE {
	if off < 0 || n < 0 || off+n > len(mr.buf) {
		panic(fmt.Sprintf("verbs: SGE [%d, %d) outside a %d-byte region", off, off+n, len(mr.buf)))
	}
	return SGE{Addr: mr.Addr() + uint64(off), Length: uint32(n), LKey: mr.LKey()}
}

// DriverMR returns the provider's memory region, for the provider a binding reaches
// (package verbs/driver); programs have no use for it.
func (mr *MR) DriverMR() driver.MR {
	if mr == nil {
		return nil
	}
	return mr.impl
}

// AddrOf returns the address of byte off of the region, for a peer's RemoteAddr.
func (mr *MR) AddrOf(off int) uint64 { return mr.Addr() + uint64(off) }

// AH is an address handle (struct ibv_ah): the destination of UD sends.
type AH struct {
	pd   *PD
	attr AHAttr
	impl driver.AH
	life life
}

// CreateAH creates an address handle (ibv_create_ah).
func (pd *PD) CreateAH(attr AHAttr) (*AH, error) {
	if attr.DGID.IsZero() {
		return nil, fmt.Errorf("%w: address handle needs a destination GID", ErrInvalidAttr)
	}
	if err := pd.usable(); err != nil {
		return nil, err
	}
	impl, err := pd.impl.CreateAH(&attr)
	if err != nil {
		return nil, err
	}
	return &AH{pd: pd, attr: attr, impl: impl}, nil
}

// Attr returns the address handle's attributes.
func (ah *AH) Attr() AHAttr { return ah.attr }

// Close destroys the address handle (ibv_destroy_ah). A UD request naming it afterwards
// is refused with ErrClosed.
func (ah *AH) Close() error {
	if ah.pd.dev.closed.Load() {
		return errDeviceClosed
	}
	return ah.life.close(errAHClosed, ah.impl.Close)
}

// DriverAH returns the provider's address handle, for the provider a work request
// reaches (package verbs/driver); programs have no use for it.
func (ah *AH) DriverAH() driver.AH {
	if ah == nil {
		return nil
	}
	return ah.impl
}

// AHAttrFromWC builds the address vector that answers a UD receive completion, from the
// GRH area at the start of the receive buffer (ibv_init_ah_from_wc).
func AHAttrFromWC(wc *WC, grh []byte, port uint8) (AHAttr, error) {
	if wc.Flags&WCWithGRH == 0 || len(grh) < GRHLen {
		return AHAttr{}, fmt.Errorf("%w: completion has no GRH", ErrInvalidAttr)
	}
	var a AHAttr
	a.Port = port
	a.HopLimit = 64
	if grhIsIPv4(grh) { // IPv4 header in the last 20 bytes (RoCEv2 over IPv4)
		var ip [4]byte
		copy(ip[:], grh[20+12:20+16])
		a.DGID = GIDFromAddr(netip.AddrFrom4(ip))
		a.TrafficClass = grh[20+1]
		return a, nil
	}
	if grh[0]>>4 == 6 {
		copy(a.DGID[:], grh[8:24]) // the source address of the IPv6 header
		a.TrafficClass = grh[0]<<4 | grh[1]>>4
		a.FlowLabel = uint32(grh[1]&15)<<16 | uint32(grh[2])<<8 | uint32(grh[3])
		return a, nil
	}
	return AHAttr{}, fmt.Errorf("%w: GRH area holds no IP header", ErrInvalidAttr)
}

// grhIsIPv4 tells an IPv4 header in the last 20 bytes of the GRH area from an IPv6
// header, as ibv_init_ah_from_wc does: byte 20 of an IPv6 header is inside its source
// address, so a version nibble of 4 there proves nothing when the first byte says 6.
// Then only a 20-byte IPv4 header with a valid header checksum is IPv4.
func grhIsIPv4(grh []byte) bool {
	ip := grh[20:40]
	if ip[0]>>4 != 4 {
		return false
	}
	if grh[0]>>4 != 6 {
		return true
	}
	if ip[0]&15 != 5 {
		return false
	}
	var sum uint32 // RFC 791 header checksum: the one's complement sum of the header is all ones
	for i := 0; i < 20; i += 2 {
		sum += uint32(ip[i])<<8 | uint32(ip[i+1])
	}
	for sum > 0xffff {
		sum = sum&0xffff + sum>>16
	}
	return sum == 0xffff
}

// CreateAHFromWC creates the address handle that answers a UD receive
// (ibv_create_ah_from_wc).
func (pd *PD) CreateAHFromWC(wc *WC, grh []byte, port uint8) (*AH, error) {
	a, err := AHAttrFromWC(wc, grh, port)
	if err != nil {
		return nil, err
	}
	return pd.CreateAH(a)
}

// Package ibping is infiniband-diags' ibping on goverbs devices: a Get of the OpenIB
// ping vendor class on QP1, answered by a responder (ibping -S) with its host name.
//
// The MAD is a vendor-specific MAD of range 2 (IBTA Vol. 1 13.4's management class
// values: 0x30-0x4F, whose MADs carry an OUI; ch. 16 on vendor-specific classes), laid
// out as libibmad and Linux's struct ib_vendor_mad do:
//
//	 0                   24                  36  37     40                      256
//	+--------------------+-------------------+---+------+------------------------+
//	| common header (24) | RMPP header (12)  | r | OUI  | data (216): host name  |
//	+--------------------+-------------------+---+------+------------------------+
//
// The common header is cm/mad's (13.4.2); the RMPP header is zero (ibping never
// segments), the OUI names the vendor (OpenIB's 0x001405 unless -o says otherwise).
package ibping

import (
	"errors"
	"fmt"

	"github.com/goverbs/goverbs/cm/mad"
)

// The ping class as infiniband-diags defines it (libibmad's IB_VENDOR_OPENIB_PING_CLASS,
// IB_OPENIB_OUI) and the vendor range-2 layout.
const (
	Class        = 0x32     // vendor range 2 start (0x30) + 2
	ClassVersion = 1        // libibmad sends class version 1 for vendor classes
	OpenIBOUI    = 0x001405 // OpenIB's OUI
	ouiOffset    = 37       // after the RMPP header (24..35) and a reserved byte
	DataOffset   = 40
	DataLen      = mad.Len - DataOffset // 216
)

// Errors from Parse: the reasons a MAD is not a ping this side can use. A responder or
// pinger drops such a MAD and counts it.
var (
	ErrClass  = errors.New("ibping: not an ibping MAD (class or class version)")
	ErrOUI    = errors.New("ibping: another vendor's OUI")
	ErrMethod = errors.New("ibping: unexpected method")
)

// MAD is a 256-byte ping request or response.
type MAD []byte

// Header is the common MAD header.
func (m MAD) Header() mad.Header { return mad.Header(m[:mad.HeaderLen]) }

// OUI is the 24-bit vendor OUI.
func (m MAD) OUI() uint32 {
	return uint32(m[ouiOffset])<<16 | uint32(m[ouiOffset+1])<<8 | uint32(m[ouiOffset+2])
}

// Data is the 216-byte vendor data: empty in a request, the responder's host name in a
// response.
func (m MAD) Data() []byte { return m[DataOffset:mad.Len] }

// Host is the host name a response carries: the data up to its first NUL, with
// anything unprintable shown as '?' (it came from the wire and goes to a terminal).
func (m MAD) Host() string {
	d := m.Data()
	n := 0
	for n < len(d) && d[n] != 0 {
		n++
	}
	b := make([]byte, n)
	for i, c := range d[:n] {
		if c < 0x20 || c > 0x7e {
			c = '?'
		}
		b[i] = c
	}
	return string(b)
}

// Parse checks that b is a ping MAD of the given OUI: 256 bytes, base version 1, the
// ping class and class version. The method is the caller's to check (a responder wants
// a Get or Set, a pinger a GetResp).
func Parse(b []byte, oui uint32) (MAD, error) {
	m, err := mad.Parse(b)
	if err != nil {
		return nil, err
	}
	h := m.Header()
	if h.MgmtClass() != Class || h.ClassVersion() != ClassVersion {
		return nil, fmt.Errorf("%w: class %#02x version %d", ErrClass, h.MgmtClass(), h.ClassVersion())
	}
	p := MAD(m)
	if p.OUI() != oui {
		return nil, fmt.Errorf("%w: %#06x", ErrOUI, p.OUI())
	}
	return p, nil
}

// EncodeRequest writes a ping (a Get, attribute 0, modifier 0, empty data) into b, which
// must be 256 bytes.
func EncodeRequest(b []byte, tid uint64, oui uint32) MAD {
	m := MAD(b[:mad.Len])
	clear(m)
	m.Header().Encode(&mad.HeaderFields{BaseVersion: mad.BaseVersion, MgmtClass: Class,
		ClassVersion: ClassVersion, Method: mad.MethodGet, TransactionID: tid})
	m.setOUI(oui)
	return m
}

// EncodeResponse turns the request req, in place, into its response carrying host, as
// libibmad's mad_respond does: a Get or Set becomes a GetResp (13.4.5) with status 0,
// the TransactionID, attribute and OUI kept.
func (m MAD) EncodeResponse(host string) {
	f := m.Header().Fields()
	f.Method = mad.MethodGetResp
	f.Status, f.ClassSpecific = 0, 0
	m.Header().Encode(&f)
	clear(m[mad.HeaderLen:ouiOffset]) // no RMPP: whatever the request held there
	d := m.Data()
	n := copy(d[:len(d)-1], host) // NUL-terminated, as the C string it is
	clear(d[n:])
}

func (m MAD) setOUI(oui uint32) {
	m[ouiOffset], m[ouiOffset+1], m[ouiOffset+2] = byte(oui>>16), byte(oui>>8), byte(oui)
}

package mad_test

import (
	"bytes"
	"errors"
	"net/netip"
	"reflect"
	"testing"

	"github.com/goverbs/goverbs/cm/mad"
)

// reencode decodes the message in m's data by its attribute and encodes the
// fields into a fresh MAD, the way a sender would build it.
func reencode(t testing.TB, m mad.MAD) mad.MAD {
	t.Helper()
	out := make(mad.MAD, mad.Len)
	hf := m.Header().Fields()
	out.Header().Encode(&hf)
	d, o := m.Data(), out.Data()
	switch hf.AttrID {
	case mad.AttrREQ:
		f := mad.REQ(d).Fields()
		mad.REQ(o).Encode(&f)
	case mad.AttrREP:
		f := mad.REP(d).Fields()
		mad.REP(o).Encode(&f)
	case mad.AttrRTU:
		f := mad.RTU(d).Fields()
		mad.RTU(o).Encode(&f)
	case mad.AttrREJ:
		f := mad.REJ(d).Fields()
		mad.REJ(o).Encode(&f)
	case mad.AttrMRA:
		f := mad.MRA(d).Fields()
		mad.MRA(o).Encode(&f)
	case mad.AttrDREQ:
		f := mad.DREQ(d).Fields()
		mad.DREQ(o).Encode(&f)
	case mad.AttrDREP:
		f := mad.DREP(d).Fields()
		mad.DREP(o).Encode(&f)
	case mad.AttrSIDRReq:
		f := mad.SIDRReq(d).Fields()
		mad.SIDRReq(o).Encode(&f)
	case mad.AttrSIDRRep:
		f := mad.SIDRRep(d).Fields()
		mad.SIDRRep(o).Encode(&f)
	default:
		t.Fatalf("no codec for %v", hf.AttrID)
	}
	return out
}

// definedBits is the mask of the bits a message of attr defines: the
// re-encoding of an all-ones message keeps every field at its maximum and
// leaves the reserved bits zero.
func definedBits(t testing.TB, attr mad.AttrID) []byte {
	ones := make(mad.MAD, mad.Len)
	for i := range ones {
		ones[i] = 0xff
	}
	ones.Header().Encode(&mad.HeaderFields{BaseVersion: 1, MgmtClass: 0xff, ClassVersion: 0xff,
		Method: 0xff, Status: 0xffff, ClassSpecific: 0xffff, TransactionID: ^uint64(0), AttrID: attr,
		AttrModifier: ^uint32(0)})
	return reencode(t, ones)
}

// reservedCount is how many bits of the 232-byte message the specification
// leaves reserved (tables 106-120), counted by hand from the layouts.
var reservedCount = map[mad.AttrID]int{
	mad.AttrREQ:     32 + 32 + (6 + 3 + 3) + (6 + 3 + 2), // bytes 4..7 and 24..27; per path 6 after the flow label, 3 after SL, 3 after the ACK timeout (2 after SAP Supported)
	mad.AttrREP:     8 + 8 + 8 + 4,
	mad.AttrRTU:     0,
	mad.AttrREJ:     6 + 1,
	mad.AttrMRA:     6 + 3,
	mad.AttrDREQ:    8,
	mad.AttrDREP:    0,
	mad.AttrSIDRReq: 16,
	mad.AttrSIDRRep: 16 + 8,
}

func TestReservedBits(t *testing.T) {
	for attr, want := range reservedCount {
		mask := definedBits(t, attr)
		n := 0
		for _, b := range mask[mad.HeaderLen:] {
			for ; b != 0xff; b |= b + 1 {
				n++
			}
		}
		if n != want {
			t.Errorf("%v: %d reserved bits, want %d", attr, n, want)
		}
	}
}

func newMAD(attr mad.AttrID) mad.MAD {
	m := make(mad.MAD, mad.Len)
	for i := range m {
		m[i] = 0xa5 // garbage an Encode must overwrite
	}
	h := mad.CMHeader(0x0000_0002_1234_5678, attr)
	m.Header().Encode(&h)
	return m
}

func pd(n int, seed byte) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = seed + byte(i)
	}
	return b
}

func gid(a string) [16]byte { return netip.MustParseAddr(a).As16() }

// TestRoundTrip encodes one message of each kind with every field set,
// parses it back, and compares field by field.
func TestRoundTrip(t *testing.T) {
	path := mad.Path{LocalLID: 0xffff, RemoteLID: 0xfffe, LocalGID: gid("::ffff:10.0.0.1"),
		RemoteGID: gid("fe80::1"), FlowLabel: 0xabcde, PacketRate: 0x3f, TrafficClass: 0x12,
		HopLimit: 64, SL: 15, SubnetLocal: true, LocalACKTimeout: 31}
	alt := path
	alt.FlowLabel, alt.SL, alt.LocalACKTimeout = 1, 3, 19
	cases := []struct {
		attr   mad.AttrID
		fields any
	}{
		{mad.AttrREQ, mad.REQFields{LocalCommID: 0x01020304, ServiceID: mad.ServiceID(mad.PortSpaceTCP, 7174),
			LocalCAGUID: 0x505400fffe770002, LocalQKey: 0x11111111, LocalQPN: 0xabcdef, ResponderResources: 16,
			LocalEECN: 0x123456, InitiatorDepth: 8, RemoteEECN: 0x654321, RemoteCMResponseTimeout: 20,
			TransportServiceType: mad.TransportUC, EndToEndFlowControl: true, StartingPSN: 0xfedcba,
			LocalCMResponseTimeout: 31, RetryCount: 7, PKey: 0xffff, PathMTU: 5, RDCExists: true,
			RNRRetryCount: 6, MaxCMRetries: 15, SRQ: true, ExtendedTransportType: 5, Primary: path,
			Alternate: alt, SAPSupported: true, PrivateData: pd(mad.REQPrivateLen, 1)}},
		{mad.AttrREP, mad.REPFields{LocalCommID: 1, RemoteCommID: 2, LocalQKey: 3, LocalQPN: 0xffffff,
			LocalEECN: 5, StartingPSN: 0x800000, ResponderResources: 1, InitiatorDepth: 2, TargetACKDelay: 15,
			FailoverAccepted: 3, EndToEndFlowControl: true, RNRRetryCount: 7, SRQ: true,
			LocalCAGUID: 0x0102030405060708, PrivateData: pd(mad.REPPrivateLen, 2)}},
		{mad.AttrRTU, mad.RTUFields{LocalCommID: 7, RemoteCommID: 8, PrivateData: pd(mad.RTUPrivateLen, 3)}},
		{mad.AttrREJ, mad.REJFields{LocalCommID: 9, RemoteCommID: 10, MessageRejected: mad.RejectedREP,
			RejectInfoLen: 127, Reason: mad.ReasonConsumerReject, ARI: pd(mad.REJARILen, 4),
			PrivateData: pd(mad.REJPrivateLen, 5)}},
		{mad.AttrMRA, mad.MRAFields{LocalCommID: 11, RemoteCommID: 12, MessageMRAed: mad.RejectedOther,
			ServiceTimeout: 31, PrivateData: pd(mad.MRAPrivateLen, 6)}},
		{mad.AttrDREQ, mad.DREQFields{LocalCommID: 13, RemoteCommID: 14, RemoteQPN: 0x1c,
			PrivateData: pd(mad.DREQPrivateLen, 7)}},
		{mad.AttrDREP, mad.DREPFields{LocalCommID: 15, RemoteCommID: 16, PrivateData: pd(mad.DREPPrivateLen, 8)}},
		{mad.AttrSIDRReq, mad.SIDRReqFields{RequestID: 17, PKey: 0xffff, ServiceID: mad.ServiceID(mad.PortSpaceUDP, 7174),
			PrivateData: pd(mad.SIDRReqPrivateLen, 9)}},
		{mad.AttrSIDRRep, mad.SIDRRepFields{RequestID: 18, Status: mad.SIDRNoQP, InfoLen: 72, QPN: 0x123456,
			ServiceID: 99, QKey: 0x80010000, Info: pd(mad.SIDRRepInfoLen, 10), PrivateData: pd(mad.SIDRRepPrivateLen, 11)}},
	}
	for _, tc := range cases {
		t.Run(tc.attr.String(), func(t *testing.T) {
			m := newMAD(tc.attr)
			d := m.Data()
			var got any
			switch f := tc.fields.(type) {
			case mad.REQFields:
				mad.REQ(d).Encode(&f)
				got = mad.REQ(d).Fields()
			case mad.REPFields:
				mad.REP(d).Encode(&f)
				got = mad.REP(d).Fields()
			case mad.RTUFields:
				mad.RTU(d).Encode(&f)
				got = mad.RTU(d).Fields()
			case mad.REJFields:
				mad.REJ(d).Encode(&f)
				got = mad.REJ(d).Fields()
			case mad.MRAFields:
				mad.MRA(d).Encode(&f)
				got = mad.MRA(d).Fields()
			case mad.DREQFields:
				mad.DREQ(d).Encode(&f)
				got = mad.DREQ(d).Fields()
			case mad.DREPFields:
				mad.DREP(d).Encode(&f)
				got = mad.DREP(d).Fields()
			case mad.SIDRReqFields:
				mad.SIDRReq(d).Encode(&f)
				got = mad.SIDRReq(d).Fields()
			case mad.SIDRRepFields:
				mad.SIDRRep(d).Encode(&f)
				got = mad.SIDRRep(d).Fields()
			}
			if !reflect.DeepEqual(got, tc.fields) {
				t.Fatalf("round trip:\n got %+v\nwant %+v", got, tc.fields)
			}
			pm, err := mad.ParseCM(m)
			if err != nil {
				t.Fatal(err)
			}
			if h := pm.Header().Fields(); h.AttrID != tc.attr || h.TransactionID != 0x0000_0002_1234_5678 {
				t.Fatalf("header %+v", h)
			}
			// The reserved bits are zero in what Encode wrote over garbage.
			mask := definedBits(t, tc.attr)
			for i := mad.HeaderLen; i < mad.Len; i++ {
				if m[i]&^mask[i] != 0 {
					t.Fatalf("byte %d = %#02x has reserved bits set (mask %#02x)", i, m[i], mask[i])
				}
			}
		})
	}
}

// TestShortPrivateData: Encode zero-fills private data shorter than its field.
func TestShortPrivateData(t *testing.T) {
	m := newMAD(mad.AttrREP)
	mad.REP(m.Data()).Encode(&mad.REPFields{PrivateData: []byte("hi")})
	p := mad.REP(m.Data()).PrivateData()
	if len(p) != mad.REPPrivateLen || string(p[:2]) != "hi" || !bytes.Equal(p[2:], make([]byte, len(p)-2)) {
		t.Fatalf("private data %x", p)
	}
}

func TestParseErrors(t *testing.T) {
	good := newMAD(mad.AttrRTU)
	mutate := func(f func(m mad.MAD)) []byte {
		m := bytes.Clone(good)
		f(m)
		return m
	}
	cases := []struct {
		name string
		b    []byte
		want error
	}{
		{"empty", nil, mad.ErrLength},
		{"short", good[:255], mad.ErrLength},
		{"long", append(bytes.Clone(good), 0), mad.ErrLength},
		{"base version", mutate(func(m mad.MAD) { m[0] = 2 }), mad.ErrBaseVersion},
		{"class", mutate(func(m mad.MAD) { m[1] = 0x04 }), mad.ErrClass},
		{"class version", mutate(func(m mad.MAD) { m[2] = 1 }), mad.ErrClassVersion},
		{"method", mutate(func(m mad.MAD) { m[3] = byte(mad.MethodGet) }), mad.ErrMethod},
		{"LAP", mutate(func(m mad.MAD) { m[17] = byte(mad.AttrLAP) }), mad.ErrAttribute},
		{"ClassPortInfo", mutate(func(m mad.MAD) { m[17] = byte(mad.AttrClassPortInfo) }), mad.ErrAttribute},
	}
	for _, tc := range cases {
		if _, err := mad.ParseCM(tc.b); !errors.Is(err, tc.want) {
			t.Errorf("%s: err %v, want %v", tc.name, err, tc.want)
		}
	}
	if _, err := mad.ParseCM(good); err != nil {
		t.Fatal(err)
	}
}

func TestServiceID(t *testing.T) {
	if got := mad.ServiceID(mad.PortSpaceTCP, 7174); got != 0x0000000001061C06 {
		t.Fatalf("ServiceID = %#x", got)
	}
	for _, ps := range []mad.PortSpace{mad.PortSpaceTCP, mad.PortSpaceUDP, mad.PortSpaceIB, mad.PortSpaceIPoIB} {
		gps, port, ok := mad.SplitServiceID(mad.ServiceID(ps, 4791))
		if !ok || gps != ps || port != 4791 {
			t.Errorf("SplitServiceID(%v) = %v %d %v", ps, gps, port, ok)
		}
	}
	for _, id := range []uint64{0x1_0106_0001, 0x0200_0001, 0} {
		if _, _, ok := mad.SplitServiceID(id); ok {
			t.Errorf("SplitServiceID(%#x) ok", id)
		}
	}
}

func TestCMAHeader(t *testing.T) {
	for _, f := range []mad.CMAHeaderFields{
		{Port: 0xe516, Src: netip.MustParseAddr("10.77.0.2"), Dst: netip.MustParseAddr("10.77.0.3")},
		{Port: 1, Src: netip.MustParseAddr("fd00::1"), Dst: netip.MustParseAddr("fd00::2")},
	} {
		b := make([]byte, mad.REQPrivateLen)
		mad.CMAHeader(b).Encode(&f)
		h, err := mad.ParseCMAHeader(b)
		if err != nil {
			t.Fatal(err)
		}
		if got := h.Fields(); got != f {
			t.Errorf("got %+v want %+v", got, f)
		}
		want := uint8(6)
		if f.Src.Is4() {
			want = 4
			if !bytes.Equal(b[4:16], make([]byte, 12)) {
				t.Errorf("IPv4 source not zero-padded: %x", b[4:20])
			}
		}
		if h.IPVersion() != want {
			t.Errorf("IP version %d", h.IPVersion())
		}
	}
	// An IPv4-mapped address is written as IPv4.
	b := make([]byte, mad.CMAHeaderLen)
	mad.CMAHeader(b).Encode(&mad.CMAHeaderFields{Src: netip.MustParseAddr("::ffff:1.2.3.4"),
		Dst: netip.MustParseAddr("::ffff:5.6.7.8")})
	if h, _ := mad.ParseCMAHeader(b); h.IPVersion() != 4 || h.Dst() != netip.MustParseAddr("5.6.7.8") {
		t.Errorf("mapped: %x", b)
	}
	for _, tc := range []struct {
		b    []byte
		want error
	}{
		{make([]byte, 35), mad.ErrCMAHeaderShort},
		{append([]byte{1, 0x40}, make([]byte, 34)...), mad.ErrCMAVersion},
		{append([]byte{0, 0x50}, make([]byte, 34)...), mad.ErrCMAIPVersion},
		{make([]byte, 36), mad.ErrCMAIPVersion},
	} {
		if _, err := mad.ParseCMAHeader(tc.b); !errors.Is(err, tc.want) {
			t.Errorf("%x: %v, want %v", tc.b[:2], err, tc.want)
		}
	}
}

func TestStrings(t *testing.T) {
	for v, want := range map[fmtStringer]string{
		mad.AttrREQ: "REQ", mad.AttrSIDRRep: "SIDR_REP", mad.AttrID(0x99): "attr(0x0099)",
		mad.ReasonInvalidServiceID: "invalid service ID", mad.ReasonStaleConnection: "stale connection",
		mad.ReasonConsumerReject: "consumer reject", mad.Reason(34): "reason 34", mad.Reason(999): "reason 999",
		mad.TransportRC: "RC", mad.RejectedREP: "REP", mad.SIDRNoQP: "no QP", mad.PortSpaceTCP: "TCP",
	} {
		if got := v.String(); got != want {
			t.Errorf("%#v: %q, want %q", v, got, want)
		}
	}
}

type fmtStringer interface{ String() string }

package mad_test

import (
	"bytes"
	"testing"

	"github.com/goverbs/goverbs/cm/mad"
)

// FuzzParseCM: whatever ParseCM accepts decodes and re-encodes to the same
// bytes, reserved bits aside; whatever it is given, nothing panics.
func FuzzParseCM(f *testing.F) {
	for _, c := range loadMADs(f) {
		f.Add([]byte(c.mad))
	}
	for _, attr := range []mad.AttrID{mad.AttrREQ, mad.AttrMRA, mad.AttrREJ, mad.AttrREP,
		mad.AttrRTU, mad.AttrDREQ, mad.AttrDREP, mad.AttrSIDRReq, mad.AttrSIDRRep} {
		f.Add([]byte(newMAD(attr)))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := mad.ParseCM(b)
		if err != nil {
			return
		}
		attr := m.Header().AttrID()
		got := reencode(t, m)
		mask := definedBits(t, attr)
		want := bytes.Clone(b)
		for i := range want {
			want[i] &= mask[i]
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("%v re-encodes differently:\n got %x\nwant %x", attr, []byte(got), want)
		}
		if attr == mad.AttrREQ {
			if h, err := mad.ParseCMAHeader(mad.REQ(m.Data()).PrivateData()); err == nil {
				f := h.Fields()
				enc := make([]byte, mad.CMAHeaderLen)
				mad.CMAHeader(enc).Encode(&f)
				g := mad.CMAHeader(enc).Fields()
				if g != f {
					t.Fatalf("rdma_cm header %+v re-encodes as %+v", f, g)
				}
			}
		}
	})
}

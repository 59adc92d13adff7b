package ibping

import (
	"bytes"
	"encoding/binary"
	"errors"
	"strings"
	"testing"

	"github.com/goverbs/goverbs/cm/mad"
)

// The request's bytes as libibmad lays them out: base version 1, class 0x32, class
// version 1, method Get, the TID at 8, attribute and modifier 0, the OUI at 37..39.
func TestEncodeRequestLayout(t *testing.T) {
	b := make([]byte, mad.Len)
	for i := range b {
		b[i] = 0xAA // EncodeRequest must clear what it does not set
	}
	EncodeRequest(b, 0x0102030405060708, OpenIBOUI)
	want := make([]byte, mad.Len)
	want[0], want[1], want[2], want[3] = 1, 0x32, 1, 0x01
	binary.BigEndian.PutUint64(want[8:], 0x0102030405060708)
	want[37], want[38], want[39] = 0x00, 0x14, 0x05
	if !bytes.Equal(b, want) {
		t.Fatalf("request\n got %x\nwant %x", b, want)
	}
}

func TestRequestResponseRoundTrip(t *testing.T) {
	b := make([]byte, mad.Len)
	EncodeRequest(b, 77, 0xABCDEF)
	m, err := Parse(b, 0xABCDEF)
	if err != nil {
		t.Fatal(err)
	}
	if m.Header().Method() != mad.MethodGet || m.Header().TransactionID() != 77 || m.OUI() != 0xABCDEF {
		t.Fatalf("request fields: %+v oui %#x", m.Header().Fields(), m.OUI())
	}
	m[30] = 0x5A // a hostile RMPP byte: the response must not echo it
	m.EncodeResponse("host.example")
	r, err := Parse(m, 0xABCDEF)
	if err != nil {
		t.Fatal(err)
	}
	f := r.Header().Fields()
	if f.Method != mad.MethodGetResp || f.Status != 0 || f.TransactionID != 77 || r.Host() != "host.example" || r[30] != 0 {
		t.Fatalf("response fields %+v host %q rmpp %#x", f, r.Host(), r[30])
	}
}

// A host name longer than the data keeps its NUL; a response without one (hostile)
// still reads, cut at the data's end; unprintable bytes come out as '?'.
func TestHost(t *testing.T) {
	b := make([]byte, mad.Len)
	m := EncodeRequest(b, 1, OpenIBOUI)
	m.EncodeResponse(strings.Repeat("h", 500))
	if got := m.Host(); len(got) != DataLen-1 {
		t.Fatalf("long host name: %d bytes", len(got))
	}
	for i := range m.Data() {
		m.Data()[i] = 'x'
	}
	m.Data()[3] = 0x1b // ESC: a terminal control sequence from the wire
	if got := m.Host(); len(got) != DataLen || got[3] != '?' {
		t.Fatalf("hostile host name %q", got)
	}
}

// Hostile MADs: what is not a ping of this OUI is an error, never a panic.
func TestParseHostile(t *testing.T) {
	valid := func() []byte {
		b := make([]byte, mad.Len)
		EncodeRequest(b, 1, OpenIBOUI)
		return b
	}
	cases := []struct {
		name string
		b    []byte
		want error
	}{
		{"empty", nil, mad.ErrLength},
		{"truncated to the header", valid()[:mad.HeaderLen], mad.ErrLength},
		{"one byte short", valid()[:mad.Len-1], mad.ErrLength},
		{"one byte long", append(valid(), 0), mad.ErrLength},
		{"base version 2", func() []byte { b := valid(); b[0] = 2; return b }(), mad.ErrBaseVersion},
		{"CM class", func() []byte { b := valid(); b[1] = mad.ClassCM; return b }(), ErrClass},
		{"class version 2", func() []byte { b := valid(); b[2] = 2; return b }(), ErrClass},
		{"another OUI", func() []byte { b := valid(); b[39] = 6; return b }(), ErrOUI},
	}
	for _, c := range cases {
		if _, err := Parse(c.b, OpenIBOUI); !errors.Is(err, c.want) {
			t.Errorf("%s: %v, want %v", c.name, err, c.want)
		}
	}
}

// FuzzParse: whatever Parse accepts answers without panicking, and its response parses
// with the same TID and OUI.
func FuzzParse(f *testing.F) {
	b := make([]byte, mad.Len)
	f.Add(bytes.Clone(EncodeRequest(b, 9, OpenIBOUI)))
	f.Add([]byte{1, 0x32, 1})
	f.Fuzz(func(t *testing.T, in []byte) {
		m, err := Parse(in, OpenIBOUI)
		if err != nil {
			return
		}
		_ = m.Host()
		r := MAD(bytes.Clone(m))
		r.EncodeResponse("h")
		p, err := Parse(r, OpenIBOUI)
		if err != nil || p.Header().TransactionID() != m.Header().TransactionID() || p.Host() != "h" {
			t.Fatalf("response of %x: %v", []byte(m), err)
		}
	})
}

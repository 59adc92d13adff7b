package attach

import (
	"bytes"
	"net/netip"
	"reflect"
	"testing"

	"github.com/goverbs/goverbs/verbs/driver"
)

// A CM event survives its layout, and what is not one is refused.
func TestCMEventRoundTrip(t *testing.T) {
	e := CMEvent{Event: 4, Status: -110, UID: 0x1122334455667788, ID: 7, ListenID: 3,
		Local: netip.MustParseAddrPort("127.0.0.2:7174"), Remote: netip.MustParseAddrPort("[fd00::1]:40000"),
		QKey: 0x01234567, AH: driver.AHAttr{DGID: driver.GID{15: 1}, HopLimit: 64, Port: 1},
		Param: ConnParam{ResponderResources: 1, InitiatorDepth: 2, RetryCount: 7, RNRRetryCount: 6, SRQ: true,
			QPN: 0x123456, PrivateData: []byte("hello")}}
	m := PutCMEvent(nil, &e)
	if len(m) != CMEventHdr+5 {
		t.Fatalf("%d bytes", len(m))
	}
	got, ok := ParseCMEvent(m)
	if !ok || !bytes.Equal(got.Param.PrivateData, e.Param.PrivateData) {
		t.Fatalf("parsed %+v, %v", got, ok)
	}
	got.Param.PrivateData, e.Param.PrivateData = nil, nil
	if !reflect.DeepEqual(got, e) {
		t.Fatalf("parsed %+v, want %+v", got, e)
	}
	for _, bad := range [][]byte{m[:CMEventHdr-1], m[:len(m)-1], append(m, 0)} {
		if _, ok := ParseCMEvent(bad); ok {
			t.Errorf("%d bytes parsed", len(bad))
		}
	}
	// An address field that claims IPv4 without a mapped address is none.
	var w Writer
	w.U16(AFInet)
	w.U16(1)
	w.Bytes(make([]byte, 16))
	r := Reader{B: w.B}
	if a := r.Addr(); a.IsValid() {
		t.Fatalf("parsed %v", a)
	}
}

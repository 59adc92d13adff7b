package xsrqrec

import (
	"bytes"
	"errors"
	"testing"
)

// TestRecord: a record as rdma-core's xsrq_pingpong writes it (its MSG_FORMAT, the GID
// as gid_to_wire_gid spells it) parses, and re-encodes byte for byte.
func TestRecord(t *testing.T) {
	rdma := make([]byte, RecordLen)
	copy(rdma, "0000:63f3ab:63f3ac:ec995a:000001:00000000000000000000ffff7f004d18")
	d, err := Parse(rdma)
	if err != nil {
		t.Fatal(err)
	}
	want := Dest{RecvQPN: 0x63f3ab, SendQPN: 0x63f3ac, PSN: 0xec995a, SRQN: 1}
	want.GID[10], want.GID[11], want.GID[12], want.GID[13], want.GID[14], want.GID[15] = 0xff, 0xff, 127, 0, 77, 24
	if d != want {
		t.Fatalf("parsed %+v, want %+v", d, want)
	}
	if got := d.Record(); !bytes.Equal(got, rdma) {
		t.Errorf("re-encoded %q, want %q", got, rdma)
	}
	for _, bad := range [][]byte{rdma[:RecordLen-1], bytes.Replace(rdma, []byte(":000001:"), []byte(":00000g:"), 1),
		bytes.Replace(rdma, []byte(":000001"), []byte("       "), 1), make([]byte, RecordLen)} {
		if _, err := Parse(bad); !errors.Is(err, ErrForeignPeer) {
			t.Errorf("Parse(%q) = %v", bad, err)
		}
	}
}

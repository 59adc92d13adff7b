package pingpongrec

import (
	"bytes"
	"errors"
	"net"
	"testing"

	"github.com/goverbs/goverbs/verbs"
)

func TestRecordRoundTrip(t *testing.T) {
	d := Dest{LID: 0x12, QPN: 0xabcdef, PSN: 0x123456, GID: verbs.GID{10: 0xff, 11: 0xff, 12: 127, 15: 1}}
	b := d.Record()
	if len(b) != RecordLen || b[RecordLen-1] != 0 {
		t.Fatalf("record %q: want %d bytes ending in NUL", b, RecordLen)
	}
	// rdma-core's gid_to_wire_gid writes the 16 bytes in order as hex.
	if want := "0012:abcdef:123456:00000000000000000000ffff7f000001\x00"; string(b) != want {
		t.Fatalf("record %q, want %q", b, want)
	}
	got, err := ParseRecord(b)
	if err != nil || got != d {
		t.Fatalf("parsed %+v, %v; want %+v", got, err, d)
	}
}

func TestParseRecordRefusesForeign(t *testing.T) {
	for _, b := range [][]byte{
		make([]byte, RecordLen),
		append([]byte("6.06"), make([]byte, RecordLen-4)...),              // a perftest's version
		[]byte("0012:abcdef:123456:00000000000000000000ffff7f000001x"),    // no NUL
		[]byte("001g:abcdef:123456:00000000000000000000ffff7f000001\x00"), // not hex
		[]byte("0012:abcdef:123456:00000000000000000000ffff7f00000\x00"),  // short
		[]byte("0012:abcdef:123456:00000000000000000000ffff7f00000z\x00"), // GID not hex
		bytes.Repeat([]byte(":"), RecordLen),
	} {
		if _, err := ParseRecord(b); !errors.Is(err, ErrForeignPeer) {
			t.Errorf("ParseRecord(%q) = %v, want ErrForeignPeer", b, err)
		}
	}
}

// TestExchange runs both sides as rdma-core's examples do: the client writes its
// records, reads the server's and says done; the server reads, answers and waits for
// the done.
func TestExchange(t *testing.T) {
	cli, srv := net.Pipe()
	defer cli.Close()
	defer srv.Close()
	mine := []Dest{{QPN: 1, PSN: 2}, {QPN: 3, PSN: 4}}
	theirs := []Dest{{QPN: 5, PSN: 6, GID: verbs.GID{15: 9}}, {QPN: 7, PSN: 8}}
	done := make(chan error, 1)
	go func() {
		got, err := ReadRemote(srv, len(mine))
		if err == nil && (got[0] != mine[0] || got[1] != mine[1]) {
			t.Errorf("server read %+v, want %+v", got, mine)
		}
		if err == nil {
			err = ServerFinish(srv, theirs)
		}
		done <- err
	}()
	got, err := ClientExchange(cli, mine)
	if err != nil {
		t.Fatal(err)
	}
	if got[0] != theirs[0] || got[1] != theirs[1] {
		t.Fatalf("client read %+v, want %+v", got, theirs)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// TestForeignPeerAtOnce: a perftest-style peer's 16-byte version is recognised from
// its first five bytes, without waiting for a whole record that never comes.
func TestForeignPeerAtOnce(t *testing.T) {
	cli, srv := net.Pipe()
	defer cli.Close()
	defer srv.Close()
	go cli.Write(append([]byte("6.06\x00"), make([]byte, 11)...))
	if _, err := ReadRemote(srv, 1); !errors.Is(err, ErrForeignPeer) {
		t.Fatalf("ReadRemote = %v, want ErrForeignPeer", err)
	}
}

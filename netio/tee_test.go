package netio

import (
	"errors"
	"net/netip"
	"sync"
	"testing"
	"time"
)

type recorded struct {
	src, dst netip.AddrPort
	id       uint16
	n        int
}

type fakeRecorder struct {
	mu   sync.Mutex
	recs []recorded
	err  error
}

func (r *fakeRecorder) Record(_ time.Time, src, dst netip.AddrPort, id uint16, b []byte) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.recs = append(r.recs, recorded{src, dst, id, len(b)})
	return r.err
}

func TestTee(t *testing.T) {
	a := listen(t, "127.0.0.2:0", UDPOptions{})
	b := listen(t, "127.0.0.3:0", UDPOptions{})
	ra, rb := &fakeRecorder{}, &fakeRecorder{}
	ta, tb := Tee(a, ra), Tee(b, rb)
	const seg = 1000
	buf := make([]byte, 3*seg+10)
	ms := []Message{
		{Buf: buf, N: len(buf), Addr: b.LocalAddr(), SegSize: seg},
		{Buf: []byte("plain"), N: 5, Addr: b.LocalAddr()},
	}
	if _, err := ta.WriteBatch(ms); err != nil {
		t.Fatal(err)
	}
	got, _ := readN(t, tb, 5, 5*time.Second)
	if len(got) != 5 {
		t.Fatal(len(got))
	}
	src := a.SourceAddr() // the send socket
	wantW := []recorded{{src, b.LocalAddr(), 0, seg}, {src, b.LocalAddr(), 1, seg}, {src, b.LocalAddr(), 2, seg}, {src, b.LocalAddr(), 3, 10}, {src, b.LocalAddr(), 0, 5}}
	if !a.Caps().GSO {
		for i := range wantW {
			wantW[i].id = 0
		}
	}
	if len(ra.recs) != len(wantW) {
		t.Fatalf("written: %+v", ra.recs)
	}
	for i := range wantW {
		if ra.recs[i] != wantW[i] {
			t.Errorf("written %d: %+v, want %+v", i, ra.recs[i], wantW[i])
		}
	}
	if len(rb.recs) != 5 {
		t.Fatalf("read: %+v", rb.recs)
	}
	for i, r := range rb.recs {
		// A GRO run is recorded numbered as the GSO sender numbered it; a lone datagram 0.
		if r.src != src || r.dst != b.LocalAddr() || r.id != 0 && r.id != wantW[i].id || r.n != wantW[i].n {
			t.Errorf("read %d: %+v", i, r)
		}
	}

	// Record errors never reach traffic; the first is kept.
	ra.err = errors.New("disk full")
	if _, err := ta.WriteBatch(ms[1:]); err != nil {
		t.Fatal(err)
	}
	if err := ta.(interface{ RecordErr() error }).RecordErr(); err != ra.err {
		t.Fatalf("RecordErr = %v", err)
	}
	if ta.LocalAddr() != a.LocalAddr() || ta.SourceAddr() != src || ta.Caps() != a.Caps() {
		t.Fatal("Tee changed LocalAddr/SourceAddr/Caps")
	}
}

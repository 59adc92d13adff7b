package goverbsperf

import (
	"errors"
	"net"
	"testing"

	"github.com/goverbs/goverbs/cmd/goverbs/internal/exchange/perftestcomm"
	"github.com/goverbs/goverbs/verbs"
)

// send writes with w on one end of a pipe and reads with r on the other.
func send(t *testing.T, w func(net.Conn) error, r func(net.Conn) error) {
	t.Helper()
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	errc := make(chan error, 1)
	go func() { errc <- w(a) }()
	if err := r(b); err != nil {
		t.Fatalf("read: %v", err)
	}
	if err := <-errc; err != nil {
		t.Fatalf("write: %v", err)
	}
}

func TestHeader(t *testing.T) {
	p := Params{Test: "atomic_bw", Conn: "RC", QPs: 4, Size: 8, Iters: 1000, All: false, Duration: 3, MTU: 1024,
		Bidir: true, Infinite: true, Atomic: "CMP_AND_SWAP"}
	h := p.Header()
	want := "GOVERBS-PERF/1 atomic_bw conn=RC qps=4 size=8 iters=1000 all=false dur=3 mtu=1024 bidir=true inf=true atomic=CMP_AND_SWAP"
	if len(h) != perfHeaderLen || string(h[:len(want)]) != want {
		t.Fatalf("header %q", h)
	}
	var got Params
	send(t, func(c net.Conn) error { _, err := c.Write(h); return err },
		func(c net.Conn) (err error) { got, err = ReadHeader(c); return err })
	if got != p {
		t.Fatalf("read %+v, want %+v", got, p)
	}
}

func TestHeaderRefused(t *testing.T) {
	for _, b := range []string{"6.06\x00goverbs/2\x00\x00\x00\x00\x00\x00\x00", "GOVERBS-PERF/1 write_bw qps=0"} {
		msg := make([]byte, perfHeaderLen)
		copy(msg, b)
		var err error
		send(t, func(c net.Conn) error { c.Write(msg); return nil },
			func(c net.Conn) error { _, err = ReadHeader(c); c.Close(); return nil })
		if err == nil {
			t.Errorf("header %q was accepted", b)
		}
	}
}

func TestDests(t *testing.T) {
	ds := []perftestcomm.Dest{
		{LID: 1, OutReads: 16, QPN: 0x123456, PSN: 0xabcdef, RKey: 0xdeadbeef, VAddr: 0x7f0011223344, GID: verbs.GID{15: 1}},
		{QPN: 2, PSN: 3},
	}
	var got []perftestcomm.Dest
	send(t, func(c net.Conn) error { return WriteDests(c, ds) },
		func(c net.Conn) (err error) { got, err = ReadDests(c, len(ds)); return err })
	if len(got) != 2 || got[0] != ds[0] || got[1] != ds[1] {
		t.Fatalf("read %+v, want %+v", got, ds)
	}
}

func TestRoundEnd(t *testing.T) {
	send(t, WriteReady, ReadReady)
	var d Done
	send(t, func(c net.Conn) error { return WriteDone(c, Done{Sent: 12345, Last: true}) },
		func(c net.Conn) (err error) { d, err = ReadDone(c); return err })
	if d != (Done{Sent: 12345, Last: true}) {
		t.Fatalf("done %+v", d)
	}
	r := Report{Bytes: 65536, Iterations: 5000, PeakMiB: 3476.25, AvgMiB: 3400.5, MsgRate: 0.054408, CPU: 99.5}
	var got Report
	send(t, func(c net.Conn) error { return WriteReport(c, r) },
		func(c net.Conn) (err error) { got, err = ReadReport(c); return err })
	if got != r {
		t.Fatalf("report %+v, want %+v", got, r)
	}
	var err error
	send(t, func(c net.Conn) error { c.Write(make([]byte, len(readyMsg))); return nil },
		func(c net.Conn) error { err = ReadReady(c); return nil })
	if !errors.Is(err, perftestcomm.ErrForeignPeer) {
		t.Fatalf("a wrong ready: %v", err)
	}
}

package perftestcm

import (
	"bytes"
	"context"
	"io"
	"net/netip"
	"testing"
	"time"

	"github.com/goverbs/goverbs/cm"
	"github.com/goverbs/goverbs/cmd/goverbs/internal/exchange/perftestcomm"
	"github.com/goverbs/goverbs/cmd/goverbs/internal/tool"
)

// TestConn: the -R exchange QP carries perftest's messages both ways as a stream, each
// one SEND answered before the next, as ctx_xchg_data_rdma sends them into one receive;
// a message longer than that receive is refused unsent, and a key record keeps its length
// (the peer's layout).
func TestConn(t *testing.T) {
	so, co := tool.DevOpts{Dev: "sw0", IBPort: 1}, tool.DevOpts{Dev: "sw1", IBPort: 1}
	sep, cep, err := tool.OpenLoopbackPair(&so, &co)
	if err != nil {
		t.Fatal(err)
	}
	defer sep.Close()
	defer cep.Close()
	srv, err := cm.NewAgent(sep.Dev, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	l, err := srv.Listen(18515, 256)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	cli, err := cm.NewAgent(cep.Dev, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	type res struct {
		w   *Conn
		err error
	}
	acc := make(chan res, 1)
	go func() { w, err := Accept(ctx, srv, l); acc <- res{w, err} }()
	cw, err := Dial(ctx, cli, netip.AddrPortFrom(sep.Addr.Unmap(), 18515))
	if err != nil {
		t.Fatal(err)
	}
	defer cw.Close()
	r := <-acc
	if r.err != nil {
		t.Fatal(r.err)
	}
	sw := r.w
	defer sw.Close()

	// The version, the cycle buffer and MTU, a report field: the client writes, the
	// server reads (in pieces: a stream) and answers, as xchg does.
	for _, m := range [][]byte{append([]byte("6.06\x00"), make([]byte, 11)...), {0, 0, 16, 0}, []byte("5\x00"), make([]byte, 8)} {
		if _, err := cw.Write(m); err != nil {
			t.Fatal(err)
		}
		got := make([]byte, len(m))
		sw.SetReadDeadline(time.Now().Add(10 * time.Second))
		if _, err := io.ReadFull(sw, got[:1]); err != nil {
			t.Fatalf("reading the first byte: %v", err)
		}
		if _, err := io.ReadFull(sw, got[1:]); err != nil {
			t.Fatalf("reading %d bytes: %v", len(m)-1, err)
		}
		if !bytes.Equal(got, m) {
			t.Fatalf("server got %q, want %q", got, m)
		}
		if _, err := sw.Write(m); err != nil {
			t.Fatal(err)
		}
		if _, err := io.ReadFull(cw, got); err != nil || !bytes.Equal(got, m) {
			t.Fatalf("client got %q, %v; want %q", got, err, m)
		}
	}
	if n, err := cw.Write(make([]byte, MaxMessageLen+1)); err == nil || n != 0 {
		t.Fatalf("a %d-byte message: wrote %d, %v; want it refused", MaxMessageLen+1, n, err)
	}
	// A binary key record, as perftest 6.28+ and before.
	d := perftestcomm.Dest{LID: 1, OutReads: 16, QPN: 0x123456, PSN: 0xabcdef, RKey: 0xdeadbeef, VAddr: 0x7f0011223344, GID: [16]byte{10: 0xff, 11: 0xff, 12: 127, 15: 1}}
	for _, ver := range []float64{6.04, 6.29} {
		if _, err := sw.Write(perftestcomm.KeyRecordBin(d, ver)); err != nil {
			t.Fatal(err)
		}
		b, err := cw.ReadMessage()
		if err != nil {
			t.Fatal(err)
		}
		got, err := perftestcomm.ParseKeyRecordBin(b)
		if err != nil || got != d {
			t.Fatalf("version %v: record of %d bytes parsed as %+v, %v; want %+v", ver, len(b), got, err, d)
		}
	}
}

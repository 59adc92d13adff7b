package main

import (
	"bytes"
	"context"
	"io"
	"net/netip"
	"testing"
	"time"
)

// TestCMWire: the -R exchange QP carries perftest's messages both ways as a stream, each
// one SEND answered before the next, as ctx_xchg_data_rdma sends them into one receive;
// a message longer than that receive is refused unsent, and a key record keeps its length
// (the peer's layout).
func TestCMWire(t *testing.T) {
	so, co := devOpts{dev: "sw0", ibPort: 1}, devOpts{dev: "sw1", ibPort: 1}
	sep, cep, err := openLoopbackPair(&so, &co)
	if err != nil {
		t.Fatal(err)
	}
	defer sep.close()
	defer cep.close()
	srv, err := newPerfCM(sep, true, 18515, netip.AddrPort{})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.agent.Close()
	cli, err := newPerfCM(cep, false, 0, netip.AddrPortFrom(sep.addr.Unmap(), 18515))
	if err != nil {
		t.Fatal(err)
	}
	defer cli.agent.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	type res struct {
		w   *cmWire
		err error
	}
	acc := make(chan res, 1)
	go func() { w, err := acceptCMWire(ctx, srv); acc <- res{w, err} }()
	cw, err := dialCMWire(ctx, cli)
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
	if n, err := cw.Write(make([]byte, cmWireMsgLen+1)); err == nil || n != 0 {
		t.Fatalf("a %d-byte message: wrote %d, %v; want it refused", cmWireMsgLen+1, n, err)
	}
	// A binary key record, as perftest 6.28+ and before.
	d := perfDest{lid: 1, outReads: 16, qpn: 0x123456, psn: 0xabcdef, rkey: 0xdeadbeef, vaddr: 0x7f0011223344, gid: [16]byte{10: 0xff, 11: 0xff, 12: 127, 15: 1}}
	for _, ver := range []float64{6.04, 6.29} {
		if _, err := sw.Write(keyRecordBin(d, ver)); err != nil {
			t.Fatal(err)
		}
		b, err := cw.readMsg()
		if err != nil {
			t.Fatal(err)
		}
		got, err := parseKeyRecordBin(b)
		if err != nil || got != d {
			t.Fatalf("version %v: record of %d bytes parsed as %+v, %v; want %+v", ver, len(b), got, err, d)
		}
	}
}

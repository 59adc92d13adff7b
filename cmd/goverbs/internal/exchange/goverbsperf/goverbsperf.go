// Package goverbsperf is the exchange between two goverbs perf tools, once perftest's
// version exchange (perftestcomm.Hello) has shown both are goverbs: the client's
// parameters, which the server adopts, the QPs' facts, and the messages that end each
// round and carry its results.
package goverbsperf

import (
	"bytes"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/goverbs/goverbs/cmd/goverbs/internal/exchange"
	"github.com/goverbs/goverbs/cmd/goverbs/internal/exchange/perftestcomm"
)

// The exchange between two goverbs perf tools, once their versions
// (perftestcomm.Hello) have shown both are goverbs: a header naming the test and its
// parameters, then one record per QP with LID, the outstanding-reads count, QPN, PSN,
// RKey, VAddr and GID. The client sends first; the server checks the header, adopts the
// client's parameters and answers with its own; the client says READY once its QPs are
// in RTR. Each bandwidth round ends with DONE and REPORT messages. Against a real
// perftest the tools use perftest's own exchange instead (package perftestcomm).

const (
	perfMagic     = "GOVERBS-PERF/1 "
	perfHeaderLen = 256
	perfRecordLen = 96
)

// Params are the parameters both sides must agree on.
type Params struct {
	Test     string // e.g. "write_bw"
	Conn     string // RC, UC, UD
	QPs      int
	Size     int
	Iters    int
	All      bool
	Duration int
	MTU      int
	Bidir    bool
	Infinite bool
	Atomic   string // atomic tests: FETCH_AND_ADD or CMP_AND_SWAP
}

// Header is p as the client sends it.
func (p Params) Header() []byte {
	s := fmt.Sprintf("%s%s conn=%s qps=%d size=%d iters=%d all=%t dur=%d mtu=%d bidir=%t inf=%t atomic=%s",
		perfMagic, p.Test, p.Conn, p.QPs, p.Size, p.Iters, p.All, p.Duration, p.MTU, p.Bidir, p.Infinite, p.Atomic)
	b := make([]byte, perfHeaderLen)
	copy(b, s)
	return b
}

// WriteHeader sends p's Header.
func WriteHeader(c net.Conn, p Params) error { return exchange.WriteAll(c, p.Header(), "parameters") }

// ReadHeader reads the peer's Header.
func ReadHeader(c net.Conn) (Params, error) {
	b := make([]byte, perfHeaderLen)
	if err := exchange.ReadFull(c, b[:len(perfMagic)], "the peer's parameters"); err != nil {
		return Params{}, err
	}
	if string(b[:len(perfMagic)]) != perfMagic {
		return Params{}, perftestcomm.ErrForeignPeer
	}
	if err := exchange.ReadFull(c, b[len(perfMagic):], "the peer's parameters"); err != nil {
		return Params{}, err
	}
	text := string(bytes.TrimRight(b[len(perfMagic):], "\x00"))
	f := strings.Fields(text)
	if len(f) == 0 {
		return Params{}, perftestcomm.ErrForeignPeer
	}
	p := Params{Test: f[0]}
	for _, kv := range f[1:] {
		k, v, _ := strings.Cut(kv, "=")
		n, _ := strconv.Atoi(v)
		switch k {
		case "conn":
			p.Conn = v
		case "qps":
			p.QPs = n
		case "size":
			p.Size = n
		case "iters":
			p.Iters = n
		case "all":
			p.All = v == "true"
		case "dur":
			p.Duration = n
		case "mtu":
			p.MTU = n
		case "bidir":
			p.Bidir = v == "true"
		case "inf":
			p.Infinite = v == "true"
		case "atomic":
			p.Atomic = v
		}
	}
	if p.QPs < 1 || p.QPs > 256 || p.Size < 0 || p.Iters < 0 {
		return Params{}, fmt.Errorf("the peer sent invalid parameters: %q", text)
	}
	return p, nil
}

// record is d as goverbs sends it.
func record(d perftestcomm.Dest) []byte {
	s := fmt.Sprintf("%04x:%04x:%06x:%06x:%08x:%016x:%s", d.LID, d.OutReads, d.QPN, d.PSN, d.RKey, d.VAddr, hex.EncodeToString(d.GID[:]))
	b := make([]byte, perfRecordLen)
	copy(b, s)
	return b
}

// ReadDests reads the peer's n QP records.
func ReadDests(c net.Conn, n int) ([]perftestcomm.Dest, error) {
	out := make([]perftestcomm.Dest, n)
	b := make([]byte, perfRecordLen)
	for i := range out {
		if err := exchange.ReadFull(c, b, "the peer's QP address"); err != nil {
			return nil, err
		}
		f := strings.Split(string(bytes.TrimRight(b, "\x00")), ":")
		if len(f) != 7 {
			return nil, perftestcomm.ErrForeignPeer
		}
		var v [6]uint64
		for j := 0; j < 6; j++ {
			x, err := strconv.ParseUint(f[j], 16, 64)
			if err != nil {
				return nil, perftestcomm.ErrForeignPeer
			}
			v[j] = x
		}
		d := perftestcomm.Dest{LID: uint16(v[0]), OutReads: int(v[1]), QPN: uint32(v[2]), PSN: uint32(v[3]), RKey: uint32(v[4]), VAddr: v[5]}
		if _, err := hex.Decode(d.GID[:], []byte(f[6])); err != nil || len(f[6]) != 32 {
			return nil, perftestcomm.ErrForeignPeer
		}
		out[i] = d
	}
	return out, nil
}

// WriteDests sends this side's QP records.
func WriteDests(c net.Conn, ds []perftestcomm.Dest) error {
	var b []byte
	for _, d := range ds {
		b = append(b, record(d)...)
	}
	return exchange.WriteAll(c, b, "local QP addresses")
}

// readyMsg: the client's QPs are in RTR; the server may send.
const readyMsg = "READY\x00\x00\x00"

// WriteReady tells the server that the client's QPs are in RTR.
func WriteReady(c net.Conn) error { return exchange.WriteAll(c, []byte(readyMsg), "ready") }

// ReadReady waits for the client's WriteReady.
func ReadReady(c net.Conn) error {
	ready := make([]byte, len(readyMsg))
	if err := exchange.ReadFull(c, ready, "the client's ready"); err != nil {
		return err
	}
	if string(ready) != readyMsg {
		return perftestcomm.ErrForeignPeer
	}
	return nil
}

// The end of a round: each side sends "DONE <messages sent> <last>", padded to 32
// bytes; last is 1 when Ctrl-C ended the run on that side.
const doneLen = 32

// Done ends a side's part of a round.
type Done struct {
	Sent int  // messages sent
	Last bool // Ctrl-C ended the run on that side
}

// WriteDone sends d.
func WriteDone(c net.Conn, d Done) error {
	b := make([]byte, doneLen)
	last := 0
	if d.Last {
		last = 1
	}
	copy(b, fmt.Sprintf("DONE %d %d", d.Sent, last))
	return exchange.WriteAll(c, b, "done")
}

// ReadDone waits for the peer's Done, for as long as its run takes.
func ReadDone(c net.Conn) (Done, error) {
	b := make([]byte, doneLen)
	c.SetReadDeadline(time.Time{}) // the run may be long; a dead peer closes the connection
	if _, err := io.ReadFull(c, b); err != nil {
		return Done{}, fmt.Errorf("the other side went away before the end of the test: %v", err)
	}
	var d Done
	var last int
	if n, err := fmt.Sscanf(string(bytes.TrimRight(b, "\x00")), "DONE %d %d", &d.Sent, &last); n != 2 || err != nil || d.Sent < 0 {
		return Done{}, perftestcomm.ErrForeignPeer
	}
	d.Last = last != 0
	return d, nil
}

// A round's result row, for the other side to print or add to its own: "REPORT" and
// the row's fields, padded to 128 bytes.
const reportLen = 128

// Report is a bandwidth round's result row.
type Report struct {
	Bytes      int
	Iterations int
	PeakMiB    float64
	AvgMiB     float64
	MsgRate    float64 // Mpps
	CPU        float64 // percent of a core
}

// WriteReport sends r.
func WriteReport(c net.Conn, r Report) error {
	b := make([]byte, reportLen)
	copy(b, fmt.Sprintf("REPORT %d %d %g %g %g %g", r.Bytes, r.Iterations, r.PeakMiB, r.AvgMiB, r.MsgRate, r.CPU))
	return exchange.WriteAll(c, b, "report")
}

// ReadReport reads the peer's Report.
func ReadReport(c net.Conn) (Report, error) {
	b := make([]byte, reportLen)
	if _, err := io.ReadFull(c, b); err != nil {
		return Report{}, fmt.Errorf("the other side went away before reporting: %v", err)
	}
	var r Report
	n, err := fmt.Sscanf(string(bytes.TrimRight(b, "\x00")), "REPORT %d %d %g %g %g %g", &r.Bytes, &r.Iterations, &r.PeakMiB, &r.AvgMiB, &r.MsgRate, &r.CPU)
	if n != 6 || err != nil {
		return Report{}, perftestcomm.ErrForeignPeer
	}
	return r, nil
}

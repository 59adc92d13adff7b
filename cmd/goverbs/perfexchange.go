package main

import (
	"bytes"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/goverbs/goverbs/verbs"
)

// The exchange between two goverbs perf tools, once their versions (perfwire.go's
// hello) have shown both are goverbs: a header naming the test and its parameters, then
// one record per QP with LID, the outstanding-reads count, QPN, PSN, RKey, VAddr and
// GID. The client sends first; the server checks the header, adopts the client's
// parameters and answers with its own; the client says READY once its QPs are in RTR.
// Each bandwidth round ends with DONE and REPORT messages (perfbw.go). Against a real
// perftest the tools use perftest's own exchange instead (perfwire.go, perfpeer.go).

const (
	perfMagic     = "GOVERBS-PERF/1 "
	perfHeaderLen = 256
	perfRecordLen = 96
)

// perfParams are the parameters both sides must agree on.
type perfParams struct {
	test     string // e.g. "write_bw"
	conn     string // RC, UC, UD
	qps      int
	size     int
	iters    int
	all      bool
	duration int
	mtu      int
	bidir    bool
	infinite bool
	atomic   string // atomic tests: FETCH_AND_ADD or CMP_AND_SWAP
}

func (p perfParams) header() []byte {
	s := fmt.Sprintf("%s%s conn=%s qps=%d size=%d iters=%d all=%t dur=%d mtu=%d bidir=%t inf=%t atomic=%s",
		perfMagic, p.test, p.conn, p.qps, p.size, p.iters, p.all, p.duration, p.mtu, p.bidir, p.infinite, p.atomic)
	b := make([]byte, perfHeaderLen)
	copy(b, s)
	return b
}

var errForeignPerfPeer = fmt.Errorf("the peer does not speak perftest's exchange (an rdma-core ping-pong?)")

func readPerfHeader(c net.Conn) (perfParams, error) {
	b := make([]byte, perfHeaderLen)
	if err := readFull(c, b[:len(perfMagic)], "the peer's parameters"); err != nil {
		return perfParams{}, err
	}
	if string(b[:len(perfMagic)]) != perfMagic {
		return perfParams{}, errForeignPerfPeer
	}
	if err := readFull(c, b[len(perfMagic):], "the peer's parameters"); err != nil {
		return perfParams{}, err
	}
	text := string(bytes.TrimRight(b[len(perfMagic):], "\x00"))
	f := strings.Fields(text)
	if len(f) == 0 {
		return perfParams{}, errForeignPerfPeer
	}
	p := perfParams{test: f[0]}
	for _, kv := range f[1:] {
		k, v, _ := strings.Cut(kv, "=")
		n, _ := strconv.Atoi(v)
		switch k {
		case "conn":
			p.conn = v
		case "qps":
			p.qps = n
		case "size":
			p.size = n
		case "iters":
			p.iters = n
		case "all":
			p.all = v == "true"
		case "dur":
			p.duration = n
		case "mtu":
			p.mtu = n
		case "bidir":
			p.bidir = v == "true"
		case "inf":
			p.infinite = v == "true"
		case "atomic":
			p.atomic = v
		}
	}
	if p.qps < 1 || p.qps > 256 || p.size < 0 || p.iters < 0 {
		return perfParams{}, fmt.Errorf("the peer sent invalid parameters: %q", text)
	}
	return p, nil
}

// perfDest is one QP's facts for the peer.
type perfDest struct {
	lid      uint16
	outReads int
	qpn, psn uint32
	rkey     uint32
	vaddr    uint64
	gid      verbs.GID
}

func (d perfDest) record() []byte {
	s := fmt.Sprintf("%04x:%04x:%06x:%06x:%08x:%016x:%s", d.lid, d.outReads, d.qpn, d.psn, d.rkey, d.vaddr, hex.EncodeToString(d.gid[:]))
	b := make([]byte, perfRecordLen)
	copy(b, s)
	return b
}

func readPerfDests(c net.Conn, n int) ([]perfDest, error) {
	out := make([]perfDest, n)
	b := make([]byte, perfRecordLen)
	for i := range out {
		if err := readFull(c, b, "the peer's QP address"); err != nil {
			return nil, err
		}
		f := strings.Split(string(bytes.TrimRight(b, "\x00")), ":")
		if len(f) != 7 {
			return nil, errForeignPerfPeer
		}
		var v [6]uint64
		for j := 0; j < 6; j++ {
			x, err := strconv.ParseUint(f[j], 16, 64)
			if err != nil {
				return nil, errForeignPerfPeer
			}
			v[j] = x
		}
		d := perfDest{lid: uint16(v[0]), outReads: int(v[1]), qpn: uint32(v[2]), psn: uint32(v[3]), rkey: uint32(v[4]), vaddr: v[5]}
		if _, err := hex.Decode(d.gid[:], []byte(f[6])); err != nil || len(f[6]) != 32 {
			return nil, errForeignPerfPeer
		}
		out[i] = d
	}
	return out, nil
}

func writePerfDests(c net.Conn, ds []perfDest) error {
	var b []byte
	for _, d := range ds {
		b = append(b, d.record()...)
	}
	return writeAll(c, b, "local QP addresses")
}

// readyMsg: the client's QPs are in RTR; the server may send.
const readyMsg = "READY\x00\x00\x00"

// The end of a round: each side sends "DONE <messages sent> <last>", padded to 32
// bytes; last is 1 when Ctrl-C ended the run on that side.
const doneLen = 32

type doneMsg struct {
	sent int
	last bool
}

func writeDone(c net.Conn, d doneMsg) error {
	b := make([]byte, doneLen)
	last := 0
	if d.last {
		last = 1
	}
	copy(b, fmt.Sprintf("DONE %d %d", d.sent, last))
	return writeAll(c, b, "done")
}

func readDone(c net.Conn) (doneMsg, error) {
	b := make([]byte, doneLen)
	c.SetReadDeadline(time.Time{}) // the run may be long; a dead peer closes the connection
	if _, err := io.ReadFull(c, b); err != nil {
		return doneMsg{}, fmt.Errorf("the other side went away before the end of the test: %v", err)
	}
	var d doneMsg
	var last int
	if n, err := fmt.Sscanf(string(bytes.TrimRight(b, "\x00")), "DONE %d %d", &d.sent, &last); n != 2 || err != nil || d.sent < 0 {
		return doneMsg{}, errForeignPerfPeer
	}
	d.last = last != 0
	return d, nil
}

// A round's result row, for the other side to print or add to its own: "REPORT" and
// the row's fields, padded to 128 bytes.
const reportLen = 128

func writeReport(c net.Conn, r bwRow) error {
	b := make([]byte, reportLen)
	copy(b, fmt.Sprintf("REPORT %d %d %g %g %g %g", r.Bytes, r.Iterations, r.PeakMiB, r.AvgMiB, r.MsgRate, r.CPU))
	return writeAll(c, b, "report")
}

func readReport(c net.Conn) (bwRow, error) {
	b := make([]byte, reportLen)
	if _, err := io.ReadFull(c, b); err != nil {
		return bwRow{}, fmt.Errorf("the other side went away before reporting: %v", err)
	}
	var r bwRow
	n, err := fmt.Sscanf(string(bytes.TrimRight(b, "\x00")), "REPORT %d %d %g %g %g %g", &r.Bytes, &r.Iterations, &r.PeakMiB, &r.AvgMiB, &r.MsgRate, &r.CPU)
	if n != 6 || err != nil {
		return bwRow{}, errForeignPerfPeer
	}
	return r, nil
}

// perftestVersion is the perftest version the tools report (-V) and announce in
// perftest's exchange: what Debian 12's perftest 4.5-0.20 announces. Upstream
// perftest negotiates parameters only with peers of 6.28 or later, so it talks to us
// as to Debian's.
const perftestVersion = "6.06"

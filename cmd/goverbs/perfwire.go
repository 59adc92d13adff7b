package main

import (
	"bytes"
	bin "encoding/binary"
	"errors"
	"fmt"
	"math"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/goverbs/goverbs/verbs"
)

// perftest's out-of-band exchange over TCP (perftest_communication.c), learned from
// its source and written anew. Every step is one exchange of a fixed-size message:
// the client writes its own and then reads the server's, the server reads and then
// writes. In order:
//
//   - the version: 16 bytes, a NUL-terminated decimal such as "6.06";
//   - (peer 5.32 or later) the cycle buffer (page size) and the cache line size: 4 bytes
//     each, big-endian; both sides take the larger;
//   - (peer 5.1 or later) the MTU: the enum ibv_mtu as decimal text, 2 bytes ("3\0";
//     4 bytes before 5.31); both sides take the smaller;
//   - (both 6.28 or later) a binary parameter block with struct ibv_device_attr: not
//     done here, since we announce 6.06, for which upstream perftest skips it;
//   - per QP, the key record: "LID:OUT_READS:QPN:PSN:RKEY:VADDR:GID[16]:SRQN:" in hex,
//     108 bytes with the NUL; then each tool's sequence of such records as handshakes,
//     and for bandwidth tests the client's report (size, iterations, peak, average,
//     message rate: 8 bytes each, big-endian integers and IEEE doubles).
//
// perftest sends no test parameters (its flags marked SYMMETRIC must match on both
// sides), so a goverbs tool facing a real perftest runs with its own flags. Two goverbs
// tools recognise each other by a mark after the NUL of the version, which perftest
// ignores (it reads the version with atof), and then use goverbs' richer exchange,
// in which the server adopts the client's parameters.

const (
	versionLen   = 16
	goverbsMark  = "goverbs/2" // after the version's NUL: the peer is a goverbs tool
	perfKeyLen   = 108
	minPeerVer   = 5.70 // perftest refuses older peers (check_version_compatibility)
	helloTimeout = 5 * time.Second
	cacheLine    = 64
	pageSize     = 4096
)

// hello exchanges versions. It reports whether the peer is a goverbs tool (never with
// plain: --perftest-exchange), and the peer's perftest version.
func hello(c net.Conn, client, plain bool) (goverbs bool, ver float64, err error) {
	mine := make([]byte, versionLen)
	copy(mine, perftestVersion)
	if !plain { // --perftest-exchange: say nothing more than perftest says
		copy(mine[len(perftestVersion)+1:], goverbsMark)
	}
	peer := make([]byte, versionLen)
	// A real perftest answers within a second (it sleeps one after connecting); a peer
	// that says nothing is not a perftest server.
	c.SetReadDeadline(time.Now().Add(helloTimeout))
	defer c.SetReadDeadline(time.Time{})
	if client {
		if err := writeAll(c, mine, "the version"); err != nil {
			return false, 0, err
		}
		if err := readFull(c, peer, "the server's version"); err != nil {
			return false, 0, fmt.Errorf("%v: is it a perftest or goverbs perf server?", err)
		}
	} else if err := readFull(c, peer, "the client's version"); err != nil {
		return false, 0, err
	}
	text, rest, _ := bytes.Cut(peer, []byte{0})
	ver, perr := strconv.ParseFloat(string(text), 64)
	if perr != nil || ver < minPeerVer {
		return false, 0, errForeignPerfPeer
	}
	if !client {
		if err := writeAll(c, mine, "the version"); err != nil {
			return false, 0, err
		}
	}
	return !plain && bytes.HasPrefix(rest, []byte(goverbsMark)), ver, nil
}

// pwire is the perftest exchange on one connection.
type pwire struct {
	c      net.Conn
	client bool
	ver    float64 // the peer's version
}

// xchg sends mine and returns the peer's message of the same size.
func (w *pwire) xchg(mine []byte, what string) ([]byte, error) {
	peer := make([]byte, len(mine))
	w.c.SetReadDeadline(time.Time{}) // a handshake may wait for the other side's whole run
	if w.client {
		if err := writeAll(w.c, mine, what); err != nil {
			return nil, err
		}
	}
	if _, err := readFullNoDeadline(w.c, peer); err != nil {
		return nil, fmt.Errorf("couldn't read the peer's %s: %v", what, err)
	}
	if !w.client {
		if err := writeAll(w.c, mine, what); err != nil {
			return nil, err
		}
	}
	return peer, nil
}

func readFullNoDeadline(c net.Conn, b []byte) (int, error) {
	n := 0
	for n < len(b) {
		m, err := c.Read(b[n:])
		n += m
		if err != nil {
			if n < len(b) {
				return n, fmt.Errorf("the other side went away (%v)", err)
			}
		}
	}
	return n, nil
}

func be32(v int) []byte { return bin.BigEndian.AppendUint32(nil, uint32(v)) }
func be64(v uint64) []byte {
	return bin.BigEndian.AppendUint64(nil, v)
}

// sysData exchanges the cycle buffer and cache line sizes; it returns the larger
// cycle buffer (the span of a peer's buffer perftest cycles its remote address in).
func (w *pwire) sysData() (int, error) {
	if w.ver < 5.32 {
		return pageSize, nil
	}
	cb, err := w.xchg(be32(pageSize), "page size")
	if err != nil {
		return 0, err
	}
	if _, err := w.xchg(be32(cacheLine), "cache line size"); err != nil {
		return 0, err
	}
	return max(pageSize, int(bin.BigEndian.Uint32(cb))), nil
}

// mtu exchanges the MTUs and returns the smaller.
func (w *pwire) mtu(mine verbs.MTU) (verbs.MTU, error) {
	if w.ver < 5.1 {
		return mine, nil
	}
	n := 4
	if w.ver >= 5.31 {
		n = 2
	}
	b := make([]byte, n)
	copy(b, strconv.Itoa(int(mine)))
	peer, err := w.xchg(b, "MTU")
	if err != nil {
		return 0, err
	}
	text, _, _ := bytes.Cut(peer, []byte{0})
	if m, err := strconv.Atoi(string(text)); err == nil && m >= 1 && m <= 5 && verbs.MTU(m) < mine {
		return verbs.MTU(m), nil
	}
	return mine, nil
}

// keyRecord is perftest's KEY_PRINT_FMT_GID record of one QP.
func keyRecord(d perfDest) []byte {
	var b strings.Builder
	fmt.Fprintf(&b, "%04x:%04x:%06x:%06x:%08x:%016x:", d.lid, d.outReads, d.qpn, d.psn, d.rkey, d.vaddr)
	for _, x := range d.gid {
		fmt.Fprintf(&b, "%02x:", x)
	}
	fmt.Fprintf(&b, "%08x:", 0) // SRQN: XRC and DC only
	out := make([]byte, perfKeyLen)
	copy(out, b.String())
	return out
}

var errBadKey = errors.New("the peer's QP record is not perftest's LID:OUT:QPN:PSN:RKEY:VADDR:GID:SRQN")

func parseKeyRecord(b []byte) (perfDest, error) {
	text, _, _ := bytes.Cut(b, []byte{0})
	f := strings.Split(string(text), ":")
	if len(f) < 6+16 {
		return perfDest{}, errBadKey
	}
	var v [6]uint64
	for i := range v {
		x, err := strconv.ParseUint(f[i], 16, 64)
		if err != nil {
			return perfDest{}, errBadKey
		}
		v[i] = x
	}
	d := perfDest{lid: uint16(v[0]), outReads: int(v[1]), qpn: uint32(v[2]) & 0xffffff, psn: uint32(v[3]) & 0xffffff,
		rkey: uint32(v[4]), vaddr: v[5]}
	for i := range d.gid {
		x, err := strconv.ParseUint(f[6+i], 16, 8)
		if err != nil {
			return perfDest{}, errBadKey
		}
		d.gid[i] = byte(x)
	}
	return d, nil
}

// xchgKey exchanges one QP record: perftest's text over TCP, its binary struct over
// rdma_cm (rdma_write_keys), whose length the peer's version decides.
func (w *pwire) xchgKey(d perfDest, what string) (perfDest, error) {
	cw, ok := w.c.(*cmWire)
	if !ok {
		b, err := w.xchg(keyRecord(d), what)
		if err != nil {
			return perfDest{}, err
		}
		return parseKeyRecord(b)
	}
	mine := keyRecordBin(d, w.ver)
	if w.client {
		if err := writeAll(cw, mine, what); err != nil {
			return perfDest{}, err
		}
	}
	b, err := cw.readMsg()
	if err != nil {
		return perfDest{}, fmt.Errorf("couldn't read the peer's %s: %v", what, err)
	}
	if !w.client {
		if err := writeAll(cw, mine, what); err != nil {
			return perfDest{}, err
		}
	}
	return parseKeyRecordBin(b)
}

// keys exchanges every QP's record and keeps the peer's.
func (s *perfSide) keys(w *pwire) error {
	s.remote = make([]perfDest, len(s.local))
	for i, d := range s.local {
		r, err := w.xchgKey(d, "QP record")
		if err != nil {
			return err
		}
		s.remote[i] = r
	}
	return nil
}

// handshake is perftest's ctx_hand_shake used as a barrier: QP 0's record once more.
func (s *perfSide) handshake(w *pwire) error {
	_, err := w.xchgKey(s.local[0], "handshake")
	return err
}

// xchgReport exchanges bandwidth reports (xchg_bw_reports) in the unit this side
// prints (MiB/s, or Gb/s with --report_gbits: perftest's flag is SYMMETRIC).
func (s *perfSide) xchgReport(w *pwire, mine bwRow) (bwRow, error) {
	unit := func(mib float64) float64 {
		if s.o.gbits {
			return gbits(mib)
		}
		return mib
	}
	fields := [][]byte{be64(uint64(mine.Bytes)), nil,
		be64(math.Float64bits(unit(mine.PeakMiB))), be64(math.Float64bits(unit(mine.AvgMiB))), be64(math.Float64bits(mine.MsgRate))}
	if w.ver >= 5.33 {
		fields[1] = be64(uint64(mine.Iterations))
	} else {
		fields[1] = be32(mine.Iterations)
	}
	var got [5][]byte
	for i, f := range fields {
		b, err := w.xchg(f, "report")
		if err != nil {
			return bwRow{}, err
		}
		got[i] = b
	}
	mib := func(b []byte) float64 {
		v := math.Float64frombits(bin.BigEndian.Uint64(b))
		if s.o.gbits {
			return v * 1e9 / 8 / (1 << 20)
		}
		return v
	}
	r := bwRow{Bytes: int(bin.BigEndian.Uint64(got[0])), PeakMiB: mib(got[2]), AvgMiB: mib(got[3]),
		MsgRate: math.Float64frombits(bin.BigEndian.Uint64(got[4]))}
	if len(got[1]) == 8 {
		r.Iterations = int(bin.BigEndian.Uint64(got[1]))
	} else {
		r.Iterations = int(bin.BigEndian.Uint32(got[1]))
	}
	return r, nil
}

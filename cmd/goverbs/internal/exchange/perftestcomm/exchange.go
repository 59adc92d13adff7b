// Package perftestcomm is perftest's out-of-band exchange (perftest_communication.c):
// the version, the system facts, the MTU, one key record per QP, the handshakes and the
// bandwidth reports, each one fixed-size message each way, so that a goverbs tool and a
// real perftest can be the two sides of a test.
package perftestcomm

import (
	"bytes"
	bin "encoding/binary"
	"fmt"
	"math"
	"net"
	"strconv"
	"time"

	"github.com/goverbs/goverbs/cmd/goverbs/internal/exchange"
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

// Version is the perftest version the tools report (-V) and announce in the exchange:
// what Debian 12's perftest 4.5-0.20 announces. Upstream perftest negotiates parameters
// only with peers of 6.28 or later, so it talks to us as to Debian's.
const Version = "6.06"

const (
	versionLen   = 16
	goverbsMark  = "goverbs/2" // after the version's NUL: the peer is a goverbs tool
	perfKeyLen   = 108
	minPeerVer   = 5.70 // perftest refuses older peers (check_version_compatibility)
	helloTimeout = 5 * time.Second
	cacheLine    = 64
	pageSize     = 4096
)

// ErrForeignPeer: the peer speaks neither perftest's exchange nor goverbs'.
var ErrForeignPeer = fmt.Errorf("the peer does not speak perftest's exchange (an rdma-core ping-pong?)")

// Hello exchanges versions. It reports whether the peer is a goverbs tool (never with
// plain: --perftest-exchange), and the peer's perftest version.
func Hello(c net.Conn, client, plain bool) (goverbs bool, ver float64, err error) {
	mine := make([]byte, versionLen)
	copy(mine, Version)
	if !plain { // --perftest-exchange: say nothing more than perftest says
		copy(mine[len(Version)+1:], goverbsMark)
	}
	peer := make([]byte, versionLen)
	// A real perftest answers within a second (it sleeps one after connecting); a peer
	// that says nothing is not a perftest server.
	c.SetReadDeadline(time.Now().Add(helloTimeout))
	defer c.SetReadDeadline(time.Time{})
	if client {
		if err := exchange.WriteAll(c, mine, "the version"); err != nil {
			return false, 0, err
		}
		if err := exchange.ReadFull(c, peer, "the server's version"); err != nil {
			return false, 0, fmt.Errorf("%v: is it a perftest or goverbs perf server?", err)
		}
	} else if err := exchange.ReadFull(c, peer, "the client's version"); err != nil {
		return false, 0, err
	}
	text, rest, _ := bytes.Cut(peer, []byte{0})
	ver, perr := strconv.ParseFloat(string(text), 64)
	if perr != nil || ver < minPeerVer {
		return false, 0, ErrForeignPeer
	}
	if !client {
		if err := exchange.WriteAll(c, mine, "the version"); err != nil {
			return false, 0, err
		}
	}
	return !plain && bytes.HasPrefix(rest, []byte(goverbsMark)), ver, nil
}

// Exchange is perftest's exchange on one connection, after Hello.
type Exchange struct {
	c      net.Conn
	client bool
	ver    float64 // the peer's version
}

// NewExchange continues the exchange on c after Hello, with the peer of version ver.
func NewExchange(c net.Conn, client bool, ver float64) *Exchange {
	return &Exchange{c: c, client: client, ver: ver}
}

// xchg sends mine and returns the peer's message of the same size.
func (w *Exchange) xchg(mine []byte, what string) ([]byte, error) {
	peer := make([]byte, len(mine))
	w.c.SetReadDeadline(time.Time{}) // a handshake may wait for the other side's whole run
	if w.client {
		if err := exchange.WriteAll(w.c, mine, what); err != nil {
			return nil, err
		}
	}
	if _, err := readFullNoDeadline(w.c, peer); err != nil {
		return nil, fmt.Errorf("couldn't read the peer's %s: %v", what, err)
	}
	if !w.client {
		if err := exchange.WriteAll(w.c, mine, what); err != nil {
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

// SysData exchanges the cycle buffer and cache line sizes; it returns the larger
// cycle buffer (the span of a peer's buffer perftest cycles its remote address in).
func (w *Exchange) SysData() (int, error) {
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

// MTU exchanges the MTUs and returns the smaller.
func (w *Exchange) MTU(mine verbs.MTU) (verbs.MTU, error) {
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

// Report is a bandwidth test's result, as xchg_bw_reports carries it: the bandwidths in
// the unit the sides print (MiB/s, or Gb/s with --report_gbits: the flag is SYMMETRIC).
type Report struct {
	Bytes, Iterations int
	Peak, Avg         float64
	MsgRate           float64 // Mpps
}

// Report exchanges bandwidth reports (xchg_bw_reports).
func (w *Exchange) Report(mine Report) (Report, error) {
	fields := [][]byte{be64(uint64(mine.Bytes)), nil,
		be64(math.Float64bits(mine.Peak)), be64(math.Float64bits(mine.Avg)), be64(math.Float64bits(mine.MsgRate))}
	if w.ver >= 5.33 {
		fields[1] = be64(uint64(mine.Iterations))
	} else {
		fields[1] = be32(mine.Iterations)
	}
	var got [5][]byte
	for i, f := range fields {
		b, err := w.xchg(f, "report")
		if err != nil {
			return Report{}, err
		}
		got[i] = b
	}
	float := func(b []byte) float64 { return math.Float64frombits(bin.BigEndian.Uint64(b)) }
	r := Report{Bytes: int(bin.BigEndian.Uint64(got[0])), Peak: float(got[2]), Avg: float(got[3]), MsgRate: float(got[4])}
	if len(got[1]) == 8 {
		r.Iterations = int(bin.BigEndian.Uint64(got[1]))
	} else {
		r.Iterations = int(bin.BigEndian.Uint32(got[1]))
	}
	return r, nil
}

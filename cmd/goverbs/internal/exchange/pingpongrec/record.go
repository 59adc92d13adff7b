// Package pingpongrec is the out-of-band exchange of rdma-core's ping-pongs
// (libibverbs/examples/pingpong.c): one fixed-size text record per QP.
package pingpongrec

import (
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"strconv"

	"github.com/goverbs/goverbs/cmd/goverbs/internal/exchange"
	"github.com/goverbs/goverbs/verbs"
)

// The out-of-band exchange of the rdma-core ping-pongs (libibverbs/examples/pingpong.c):
// over TCP, each side sends one 52-byte record "LLLL:QQQQQQ:PPPPPP:GGGG…" — LID, QPN and
// PSN in hex, the GID as 32 hex digits (its 16 bytes in order) — NUL-terminated. The
// client writes its record, reads the server's and writes "done\x00".

// RecordLen is the length of a record, its NUL included.
const RecordLen = 52

// Dest is one QP's connection facts.
type Dest struct {
	LID uint16
	QPN uint32
	PSN uint32
	GID verbs.GID
}

// Record is d as the peer reads it.
func (d Dest) Record() []byte {
	s := fmt.Sprintf("%04x:%06x:%06x:%s", d.LID, d.QPN&0xffffff, d.PSN&0xffffff, hex.EncodeToString(d.GID[:]))
	b := make([]byte, RecordLen)
	copy(b, s)
	return b
}

// ErrForeignPeer: what the peer sent is not a record.
var ErrForeignPeer = errors.New("the peer does not speak the rdma-core ping-pong exchange format (52-byte LID:QPN:PSN:GID records)")

// ParseRecord reads one record.
func ParseRecord(b []byte) (Dest, error) {
	if len(b) != RecordLen || b[4] != ':' || b[11] != ':' || b[18] != ':' || b[51] != 0 {
		return Dest{}, ErrForeignPeer
	}
	var d Dest
	lid, err1 := strconv.ParseUint(string(b[0:4]), 16, 16)
	qpn, err2 := strconv.ParseUint(string(b[5:11]), 16, 32)
	psn, err3 := strconv.ParseUint(string(b[12:18]), 16, 32)
	_, err4 := hex.Decode(d.GID[:], b[19:51])
	if err1 != nil || err2 != nil || err3 != nil || err4 != nil {
		return Dest{}, ErrForeignPeer
	}
	d.LID, d.QPN, d.PSN = uint16(lid), uint32(qpn), uint32(psn)
	return d, nil
}

// ClientExchange sends n local records and reads n remote ones, then writes "done".
func ClientExchange(c net.Conn, local []Dest) ([]Dest, error) {
	for _, d := range local {
		if err := exchange.WriteAll(c, d.Record(), "local address"); err != nil {
			return nil, err
		}
	}
	remote, err := ReadRemote(c, len(local))
	if err != nil {
		return nil, err
	}
	if err := exchange.WriteAll(c, []byte("done\x00"), "done"); err != nil {
		return nil, err
	}
	return remote, nil
}

// ReadRemote reads n records from the peer.
func ReadRemote(c net.Conn, n int) ([]Dest, error) {
	remote := make([]Dest, n)
	buf := make([]byte, RecordLen)
	for i := range remote {
		// The first five bytes tell a foreign peer at once ("LID:" or not): a
		// perftest-style peer sends 16 bytes of version and waits for an answer.
		if err := exchange.ReadFull(c, buf[:5], "remote address"); err != nil {
			return nil, err
		}
		if buf[4] != ':' {
			return nil, ErrForeignPeer
		}
		if err := exchange.ReadFull(c, buf[5:], "remote address"); err != nil {
			return nil, err
		}
		d, err := ParseRecord(buf)
		if err != nil {
			return nil, err
		}
		remote[i] = d
	}
	return remote, nil
}

// ServerFinish writes the server's records and waits for the client's "done".
func ServerFinish(c net.Conn, local []Dest) error {
	for _, d := range local {
		if err := exchange.WriteAll(c, d.Record(), "local address"); err != nil {
			return err
		}
	}
	buf := make([]byte, 5)
	return exchange.ReadFull(c, buf, "the client's done")
}

package perftestcomm

import (
	"bytes"
	bin "encoding/binary"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"

	"github.com/goverbs/goverbs/cmd/goverbs/internal/exchange"
	"github.com/goverbs/goverbs/verbs"
)

// Dest is one QP's facts for the peer (perftest's struct pingpong_dest).
type Dest struct {
	LID      uint16
	OutReads int
	QPN, PSN uint32
	RKey     uint32
	VAddr    uint64
	GID      verbs.GID
}

// KeyRecord is perftest's KEY_PRINT_FMT_GID record of one QP.
func KeyRecord(d Dest) []byte {
	var b strings.Builder
	fmt.Fprintf(&b, "%04x:%04x:%06x:%06x:%08x:%016x:", d.LID, d.OutReads, d.QPN, d.PSN, d.RKey, d.VAddr)
	for _, x := range d.GID {
		fmt.Fprintf(&b, "%02x:", x)
	}
	fmt.Fprintf(&b, "%08x:", 0) // SRQN: XRC and DC only
	out := make([]byte, perfKeyLen)
	copy(out, b.String())
	return out
}

var errBadKey = errors.New("the peer's QP record is not perftest's LID:OUT:QPN:PSN:RKEY:VADDR:GID:SRQN")

// ParseKeyRecord reads a KeyRecord.
func ParseKeyRecord(b []byte) (Dest, error) {
	text, _, _ := bytes.Cut(b, []byte{0})
	f := strings.Split(string(text), ":")
	if len(f) < 6+16 {
		return Dest{}, errBadKey
	}
	var v [6]uint64
	for i := range v {
		x, err := strconv.ParseUint(f[i], 16, 64)
		if err != nil {
			return Dest{}, errBadKey
		}
		v[i] = x
	}
	d := Dest{LID: uint16(v[0]), OutReads: int(v[1]), QPN: uint32(v[2]) & 0xffffff, PSN: uint32(v[3]) & 0xffffff,
		RKey: uint32(v[4]), VAddr: v[5]}
	for i := range d.GID {
		x, err := strconv.ParseUint(f[6+i], 16, 8)
		if err != nil {
			return Dest{}, errBadKey
		}
		d.GID[i] = byte(x)
	}
	return d, nil
}

// Key exchanges one QP record: perftest's text over TCP, its binary struct over
// rdma_cm (rdma_write_keys), whose length the peer's version decides.
func (w *Exchange) Key(d Dest, what string) (Dest, error) {
	cw, ok := w.c.(MessageConn)
	if !ok {
		b, err := w.xchg(KeyRecord(d), what)
		if err != nil {
			return Dest{}, err
		}
		return ParseKeyRecord(b)
	}
	mine := KeyRecordBin(d, w.ver)
	if w.client {
		if err := exchange.WriteAll(cw, mine, what); err != nil {
			return Dest{}, err
		}
	}
	b, err := cw.ReadMessage()
	if err != nil {
		return Dest{}, fmt.Errorf("couldn't read the peer's %s: %v", what, err)
	}
	if !w.client {
		if err := exchange.WriteAll(cw, mine, what); err != nil {
			return Dest{}, err
		}
	}
	return ParseKeyRecordBin(b)
}

// MessageConn is a connection that carries messages rather than a stream: rdma_cm's
// (package perftestcm), over which perftest sends its key records as binary structs.
type MessageConn interface {
	net.Conn
	// ReadMessage returns the next whole message.
	ReadMessage() ([]byte, error)
}

// perftest's struct pingpong_dest as rdma_write_keys sends it (HAVE_ENDIAN: every field
// big-endian, the GID as is) on x86_64: lid, out_reads, qpn, psn, rkey at 0..20, 4 bytes
// of padding, vaddr at 24; then since perftest 6.28 tail_markers_vaddr at 32, and the
// GID, srqn and gid_index (56 bytes in all before, 64 since). With -R the data QPs are
// connected by the CM, so what matters of a record is its RKey and VAddr, at the same
// offsets in both.
const (
	// KeyBinLen is the length of a binary record since perftest 6.28.
	KeyBinLen    = 64
	keyBinLenOld = 56
	keyBinVer    = 6.28 // the first perftest with tail_markers_vaddr
)

// KeyRecordBin is d as rdma_write_keys sends it to a peer of version peerVer.
func KeyRecordBin(d Dest, peerVer float64) []byte {
	n, gid := KeyBinLen, 40
	if peerVer < keyBinVer {
		n, gid = keyBinLenOld, 32
	}
	b := make([]byte, n)
	be := bin.BigEndian
	be.PutUint32(b[0:], uint32(d.LID))
	be.PutUint32(b[4:], uint32(d.OutReads))
	be.PutUint32(b[8:], d.QPN)
	be.PutUint32(b[12:], d.PSN)
	be.PutUint32(b[16:], d.RKey)
	be.PutUint64(b[24:], d.VAddr)
	copy(b[gid:], d.GID[:])
	return b // srqn and gid_index 0: no XRC, and perftest keeps its own gid_index
}

// ParseKeyRecordBin reads a KeyRecordBin; its length tells its layout.
func ParseKeyRecordBin(b []byte) (Dest, error) {
	gid := 40
	switch len(b) {
	case KeyBinLen:
	case keyBinLenOld:
		gid = 32
	default:
		return Dest{}, fmt.Errorf("the peer's QP record has %d bytes, not perftest's %d or %d", len(b), keyBinLenOld, KeyBinLen)
	}
	be := bin.BigEndian
	d := Dest{LID: uint16(be.Uint32(b[0:])), OutReads: int(be.Uint32(b[4:])), QPN: be.Uint32(b[8:]) & 0xffffff,
		PSN: be.Uint32(b[12:]) & 0xffffff, RKey: be.Uint32(b[16:]), VAddr: be.Uint64(b[24:])}
	copy(d.GID[:], b[gid:gid+16])
	return d, nil
}

package perftestcomm

import (
	bin "encoding/binary"
	"fmt"
)

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

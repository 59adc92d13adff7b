package pcap

import (
	"bufio"
	"encoding/binary"
	"errors"
	"io"
	"net/netip"
	"os"
	"sync"
	"time"

	"github.com/goverbs/goverbs/wire"
)

// Writer writes a pcap file of raw IP datagrams (LINKTYPE_RAW) with
// nanosecond time stamps. It is safe for concurrent use.
type Writer struct {
	mu      sync.Mutex
	bw      *bufio.Writer
	closer  io.Closer
	scratch []byte
	err     error
}

// NewWriter writes the file header to w and returns a Writer appending to
// it. Close flushes but does not close w.
func NewWriter(w io.Writer) (*Writer, error) {
	bw := bufio.NewWriterSize(w, 64<<10)
	var h [fileHdrLen]byte
	binary.LittleEndian.PutUint32(h[0:], magicNanos)
	binary.LittleEndian.PutUint16(h[4:], 2)
	binary.LittleEndian.PutUint16(h[6:], 4)
	binary.LittleEndian.PutUint32(h[16:], Snaplen)
	binary.LittleEndian.PutUint32(h[20:], LinkTypeRaw)
	if _, err := bw.Write(h[:]); err != nil {
		return nil, err
	}
	return &Writer{bw: bw}, nil
}

// Create creates (or truncates) the file at path and writes its header.
// Close flushes and closes the file.
func Create(path string) (*Writer, error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	w, err := NewWriter(f)
	if err != nil {
		f.Close()
		return nil, err
	}
	w.closer = f
	return w, nil
}

// WritePacket records one raw IP datagram captured at t. Datagrams longer
// than Snaplen are truncated in the file (orig_len keeps the real length).
func (w *Writer) WritePacket(t time.Time, ipPacket []byte) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.writeLocked(t, ipPacket)
}

func (w *Writer) writeLocked(t time.Time, data []byte) error {
	if w.err != nil {
		return w.err
	}
	incl := min(len(data), Snaplen)
	var h [recHdrLen]byte
	ns := t.UnixNano()
	binary.LittleEndian.PutUint32(h[0:], uint32(ns/1e9))
	binary.LittleEndian.PutUint32(h[4:], uint32(ns%1e9))
	binary.LittleEndian.PutUint32(h[8:], uint32(incl))
	binary.LittleEndian.PutUint32(h[12:], uint32(len(data)))
	if _, err := w.bw.Write(h[:]); err != nil {
		w.err = err
		return err
	}
	if _, err := w.bw.Write(data[:incl]); err != nil {
		w.err = err
		return err
	}
	return nil
}

// ErrMixedFamily is returned by Record when src and dst are not both IPv4
// (or IPv4-mapped) or both IPv6.
var ErrMixedFamily = errors.New("pcap: source and destination address families differ")

// Record writes one RoCEv2 datagram as it was on the wire: a real IPv4 or
// IPv6 header (DF set, Identification ipID, TTL 64) and UDP header built by
// wire.AppendIPUDPPacket, then udpPayload, which already ends with the
// ICRC. It implements netio's recorder interface.
func (w *Writer) Record(t time.Time, src, dst netip.AddrPort, ipID uint16, udpPayload []byte) error {
	return w.RecordDS(t, src, dst, ipID, 0, udpPayload)
}

// RecordDS is Record with the IP header's DS field ds (IPv4 TOS, IPv6 traffic class:
// the DSCP a path's traffic class gives and the ECN codepoint). It implements netio's
// DSRecorder, so a Tee's captures show the DSCP and ECN marks the datagrams carried.
func (w *Writer) RecordDS(t time.Time, src, dst netip.AddrPort, ipID uint16, ds uint8, udpPayload []byte) error {
	if src.Addr().Unmap().Is4() != dst.Addr().Unmap().Is4() {
		return ErrMixedFamily
	}
	ip := wire.IPHeader{
		Src: src.Addr(), Dst: dst.Addr(),
		SrcPort: src.Port(), DstPort: dst.Port(),
		ID: ipID, DF: true, TOS: ds,
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.scratch = wire.AppendIPUDPPacket(w.scratch[:0], &ip, udpPayload)
	return w.writeLocked(t, w.scratch)
}

// Flush writes buffered records to the underlying writer.
func (w *Writer) Flush() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.err != nil {
		return w.err
	}
	if err := w.bw.Flush(); err != nil {
		w.err = err
	}
	return w.err
}

// Close flushes and, for a Writer from Create, closes the file. Later
// writes fail.
func (w *Writer) Close() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	err := w.err
	if err == nil {
		err = w.bw.Flush()
	}
	if w.closer != nil {
		if cerr := w.closer.Close(); err == nil {
			err = cerr
		}
		w.closer = nil
	}
	if w.err == nil {
		w.err = errClosed
	}
	return err
}

var errClosed = errors.New("pcap: writer closed")

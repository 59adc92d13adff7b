package pcap

import (
	"bufio"
	"encoding/binary"
	"errors"
	"io"
	"os"
	"time"
)

// Errors from Reader.
var (
	ErrBadMagic     = errors.New("pcap: not a pcap file (bad magic)")
	ErrLinkType     = errors.New("pcap: unsupported link type")
	ErrRecordLength = errors.New("pcap: record length larger than the limit")
)

// MaxRecord bounds the captured length of one record a Reader accepts, so a
// corrupt header cannot make it allocate gigabytes.
const MaxRecord = 1 << 20

// Reader reads a classic pcap file: either magic, either byte order.
type Reader struct {
	br       *bufio.Reader
	order    binary.ByteOrder
	nanos    bool
	linkType uint32
	snaplen  uint32
	hdr      [recHdrLen]byte
	buf      []byte
}

// NewReader reads the file header from r. Link types Ethernet (1), raw IP
// (101), Linux cooked (113) and Linux cooked v2 (276) are accepted.
func NewReader(r io.Reader) (*Reader, error) {
	br := bufio.NewReaderSize(r, 64<<10)
	var h [fileHdrLen]byte
	if _, err := io.ReadFull(br, h[:]); err != nil {
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return nil, err
	}
	rd := &Reader{br: br}
	switch {
	case binary.LittleEndian.Uint32(h[:]) == magicMicros:
		rd.order = binary.LittleEndian
	case binary.LittleEndian.Uint32(h[:]) == magicNanos:
		rd.order, rd.nanos = binary.LittleEndian, true
	case binary.BigEndian.Uint32(h[:]) == magicMicros:
		rd.order = binary.BigEndian
	case binary.BigEndian.Uint32(h[:]) == magicNanos:
		rd.order, rd.nanos = binary.BigEndian, true
	default:
		return nil, ErrBadMagic
	}
	rd.snaplen = rd.order.Uint32(h[16:])
	// The upper bits of the link type field carry FCS information.
	rd.linkType = rd.order.Uint32(h[20:]) & 0xffff
	switch rd.linkType {
	case LinkTypeEthernet, LinkTypeRaw, LinkTypeLinuxSLL, LinkTypeLinuxSLL2:
	default:
		return nil, ErrLinkType
	}
	return rd, nil
}

// Open opens the pcap file at path. The caller closes the returned file.
func Open(path string) (*Reader, *os.File, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, nil, err
	}
	r, err := NewReader(f)
	if err != nil {
		f.Close()
		return nil, nil, err
	}
	return r, f, nil
}

// LinkType is the file's link type.
func (r *Reader) LinkType() uint32 { return r.linkType }

// Next returns the next record's time stamp and captured bytes. data is
// valid until the next call. At the end of the file err is io.EOF; a file
// cut inside a record gives io.ErrUnexpectedEOF.
func (r *Reader) Next() (t time.Time, data []byte, err error) {
	if _, err := io.ReadFull(r.br, r.hdr[:]); err != nil {
		return time.Time{}, nil, err
	}
	sec := int64(r.order.Uint32(r.hdr[0:]))
	frac := int64(r.order.Uint32(r.hdr[4:]))
	incl := r.order.Uint32(r.hdr[8:])
	if incl > MaxRecord {
		return time.Time{}, nil, ErrRecordLength
	}
	if cap(r.buf) < int(incl) {
		r.buf = make([]byte, incl)
	}
	r.buf = r.buf[:incl]
	if _, err := io.ReadFull(r.br, r.buf); err != nil {
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return time.Time{}, nil, err
	}
	if !r.nanos {
		frac *= 1000
	}
	return time.Unix(sec, frac), r.buf, nil
}

// EtherType values of IP.
const (
	etherIPv4 = 0x0800
	etherIPv6 = 0x86dd
	etherVLAN = 0x8100
	etherQinQ = 0x88a8
)

// NextIP returns the next record that holds an IPv4 or IPv6 packet, with the
// link-layer header removed. Records of other protocols are skipped. The IP
// packet may be followed by link-layer padding; wire.ParseIPUDP ignores it.
func (r *Reader) NextIP() (t time.Time, ipPacket []byte, err error) {
	for {
		t, data, err := r.Next()
		if err != nil {
			return t, nil, err
		}
		if ip := stripLink(r.linkType, data); ip != nil {
			return t, ip, nil
		}
	}
}

// stripLink returns the IP packet inside a frame, nil if there is none.
func stripLink(linkType uint32, d []byte) []byte {
	var et uint16
	switch linkType {
	case LinkTypeRaw:
		if len(d) == 0 {
			return nil
		}
		if v := d[0] >> 4; v == 4 || v == 6 {
			return d
		}
		return nil
	case LinkTypeEthernet:
		if len(d) < 14 {
			return nil
		}
		et, d = binary.BigEndian.Uint16(d[12:]), d[14:]
		for (et == etherVLAN || et == etherQinQ) && len(d) >= 4 {
			et, d = binary.BigEndian.Uint16(d[2:]), d[4:]
		}
	case LinkTypeLinuxSLL:
		if len(d) < 16 {
			return nil
		}
		et, d = binary.BigEndian.Uint16(d[14:]), d[16:]
	case LinkTypeLinuxSLL2:
		if len(d) < 20 {
			return nil
		}
		et, d = binary.BigEndian.Uint16(d[0:]), d[20:]
	default:
		return nil
	}
	if (et == etherIPv4 || et == etherIPv6) && len(d) > 0 {
		return d
	}
	return nil
}

// Package pcap writes and reads classic libpcap capture files, so that
// RoCEv2 traffic can be recorded as it is on the wire (IP + UDP + RoCE) and
// opened with tcpdump -r or Wireshark.
//
// The format (https://datatracker.ietf.org/doc/draft-ietf-opsawg-pcap/):
// a 24-byte file header, then per packet a 16-byte record header and the
// captured bytes.
//
//	file header:   magic | major 2 | minor 4 | thiszone | sigfigs | snaplen | linktype
//	record header: ts_sec | ts_usec (or ts_nsec) | incl_len | orig_len
//
// The magic 0xA1B2C3D4 means microsecond time stamps, 0xA1B23C4D
// nanosecond; read in the wrong byte order it reveals that the file was
// written on a host of the other endianness.
package pcap

// Link types (https://www.tcpdump.org/linktypes.html).
const (
	LinkTypeEthernet  = 1
	LinkTypeRaw       = 101 // raw IPv4 or IPv6, no link header
	LinkTypeLinuxSLL  = 113
	LinkTypeLinuxSLL2 = 276
)

const (
	magicMicros = 0xa1b2c3d4
	magicNanos  = 0xa1b23c4d
	fileHdrLen  = 24
	recHdrLen   = 16
	// Snaplen is what Writer declares: larger than any IP datagram.
	Snaplen = 262144
)

// Package wire is the RoCEv2 packet format: the InfiniBand Base Transport
// Header (BTH), every extended transport header used by the RC, UC, UD and XRC
// services, the opcode table, 24-bit PSN arithmetic, IB MTU values, padding,
// and the invariant CRC (ICRC) as RoCEv2 computes it over the IP and UDP
// headers (IBTA Vol. 1 ch. 9, Annex A17).
//
// A RoCEv2 packet is the payload of a UDP datagram sent to port 4791:
//
//	+-----+------------------+---------+-----+------+
//	| BTH | extended headers | payload | pad | ICRC |
//	+-----+------------------+---------+-----+------+
//	  12    per opcode table   0..MTU   0..3    4
//
// The package holds no state and does no I/O. Header types are byte slices
// with getters and setters named after the specification's fields; bounds are
// checked once, by Packet.Parse, after which the accessors assume them. All
// multi-byte fields are big endian except the ICRC, which is sent least
// significant byte first like the Ethernet FCS.
package wire

// UDPPort is the IANA-assigned RoCEv2 destination UDP port (Annex A17.2.1).
const UDPPort = 4791

// Package mad is the format of the management datagrams (MADs) that the
// InfiniBand Communication Manager exchanges on QP1, and of the private-data
// header rdma_cm puts in a connection request (IBTA Vol. 1 ch. 12 and 13.4).
//
// A MAD is 256 bytes: a 24-byte common header (13.4.2) and 232 bytes whose
// layout the attribute names. The CM class (0x07, class version 2) defines
// the attributes REQ, MRA, REJ, REP, RTU, DREQ, DREP, SIDR_REQ and SIDR_REP
// (12.6, 12.11), each a fixed layout of the 232 bytes:
//
//	+---------------------+---------------------------------------+
//	| common header (24)  | CM message (232): fields, private data |
//	+---------------------+---------------------------------------+
//
// On RoCEv2 a MAD is the payload of a UD SEND to QP1 with Q_Key 0x80010000
// (QKeyGSI), P_Key 0xFFFF.
//
// Like package wire, this package holds no state and does no I/O. Each
// message is a byte-slice type with getters named after the specification's
// fields, a Fields method that decodes all of them, and an Encode method that
// writes a fields struct whole (reserved bits as zero). Lengths and versions
// are checked once, by Parse; after it the accessors assume the bounds.
// Bit fields are numbered as the specification does: bit 0 is the most
// significant bit of its byte.
package mad

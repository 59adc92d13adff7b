package wire

import "strconv"

// MTU is the InfiniBand MTU encoding (IBTA Vol. 1 ch. 14, PortInfo MTUCap;
// libibverbs enum ibv_mtu): 1 = 256 bytes ... 5 = 4096 bytes. It bounds the
// payload of one packet, not counting headers.
type MTU uint8

// IB MTU values.
const (
	MTU256  MTU = 1
	MTU512  MTU = 2
	MTU1024 MTU = 3
	MTU2048 MTU = 4
	MTU4096 MTU = 5
)

// Bytes is the MTU in bytes, 0 if m is not a valid enum value.
func (m MTU) Bytes() int {
	if !m.Valid() {
		return 0
	}
	return 128 << m
}

// Valid reports whether m is one of MTU256..MTU4096.
func (m MTU) Valid() bool { return m >= MTU256 && m <= MTU4096 }

// String is the size in bytes, e.g. "1024", or "MTU(n)" when invalid.
func (m MTU) String() string {
	if !m.Valid() {
		return "MTU(" + strconv.Itoa(int(m)) + ")"
	}
	return strconv.Itoa(m.Bytes())
}

// MTUFromBytes maps 256, 512, 1024, 2048, 4096 to the enum; any other size
// is not an IB MTU.
func MTUFromBytes(n int) (MTU, bool) {
	for m := MTU256; m <= MTU4096; m++ {
		if m.Bytes() == n {
			return m, true
		}
	}
	return 0, false
}

// roceOverhead is the header allowance rxe subtracts from the interface MTU
// (its RXE_MAX_HDR_LENGTH) before rounding down to an IB MTU; it leaves room
// for IP, UDP, BTH, extended headers and ICRC.
const roceOverhead = 80

// ActiveMTU is the IB MTU Linux rxe advertises for an interface MTU: the
// interface MTU minus 80, rounded down to an IB MTU, at most 4096 and at
// least 256. An Ethernet MTU of 1500 gives 1024.
func ActiveMTU(ifaceMTU int) MTU {
	n := ifaceMTU - roceOverhead
	for m := MTU4096; m > MTU256; m-- {
		if n >= m.Bytes() {
			return m
		}
	}
	return MTU256
}

// PadLen is the number of pad bytes (0..3) that bring a payload of
// payloadLen bytes to a multiple of four (IBTA 9.2, PadCnt).
func PadLen(payloadLen int) int { return -payloadLen & 3 }

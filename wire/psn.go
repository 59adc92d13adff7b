package wire

import "strconv"

// PSN is a 24-bit packet sequence number (IBTA Vol. 1 9.7.1). Arithmetic
// wraps modulo 2^24; ordering is defined only within half the space, as
// the spec's PSN validity windows are.
type PSN uint32

// PSNMask keeps the low 24 bits.
const PSNMask = 1<<24 - 1

// Add returns p+n modulo 2^24.
func (p PSN) Add(n uint32) PSN { return PSN((uint32(p) + n) & PSNMask) }

// Sub returns p-n modulo 2^24.
func (p PSN) Sub(n uint32) PSN { return PSN((uint32(p) - n) & PSNMask) }

// Diff is the signed distance p-q, in (-2^23, 2^23]: positive when p is
// after q. Exactly half the space away counts as after.
func (p PSN) Diff(q PSN) int32 {
	d := int32((uint32(p) - uint32(q)) & PSNMask)
	if d > 1<<23 {
		d -= 1 << 24
	}
	return d
}

// Before reports whether p comes before q.
func (p PSN) Before(q PSN) bool { return p.Diff(q) < 0 }

// After reports whether p comes after q.
func (p PSN) After(q PSN) bool { return p.Diff(q) > 0 }

// InWindow reports whether start <= p < start+size, with wrapping. A size of
// 2^24 or more covers every PSN.
func (p PSN) InWindow(start PSN, size uint32) bool {
	return (uint32(p)-uint32(start))&PSNMask < size
}

// String prints the PSN in decimal.
func (p PSN) String() string { return strconv.FormatUint(uint64(p), 10) }

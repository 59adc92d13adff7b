package wire

import (
	"math/rand/v2"
	"testing"
)

// checksumRef is RFC 1071's loop, 16 bits at a time, folded.
func checksumRef(b []byte) uint16 {
	var s uint32
	for ; len(b) >= 2; b = b[2:] {
		s += uint32(b[0])<<8 | uint32(b[1])
		s = s&0xffff + s>>16
	}
	if len(b) == 1 {
		s += uint32(b[0]) << 8
		s = s&0xffff + s>>16
	}
	return uint16(s)
}

// Checksum agrees with RFC 1071's loop at every length up to a jumbo frame, odd ones
// included, and sums of pieces split at even offsets add up to the whole's.
func TestChecksum(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	b := make([]byte, 9100)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	for i := range b[:64] {
		b[i] = 0xff // carries from the start
	}
	for n := 0; n <= len(b); n += 1 + n/64 {
		if got, want := ChecksumFold(Checksum(0, b[:n])), checksumRef(b[:n]); got != want {
			t.Fatalf("length %d: %#04x, want %#04x", n, got, want)
		}
		split := (n / 3) &^ 1
		if got, want := ChecksumFold(Checksum(Checksum(0, b[:split]), b[split:n])), checksumRef(b[:n]); got != want {
			t.Fatalf("length %d split at %d: %#04x, want %#04x", n, split, got, want)
		}
	}
	if UDPChecksum(0xffff) != 0xffff {
		t.Fatal("a computed checksum of 0 must go as all ones (RFC 768)")
	}
}

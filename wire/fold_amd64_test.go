package wire

import "testing"

// TestFoldKeys: the keys computed for foldAVX512 are the multiplication constants
// hash/crc32 (and Intel's paper on CRC with PCLMULQDQ) use for 64, 128 and 512 bits.
func TestFoldKeys(t *testing.T) {
	if fold.k512[0] != 0x154442bd4 || fold.k512[1] != 0x1c6e41596 || fold.k128[0] != 0x1751997d0 ||
		fold.k128[1] != 0x0ccaa009e || fold.k64[0] != 0x163cd6124 {
		t.Fatalf("fold keys %#x %#x %#x", fold.k512[:2], fold.k128, fold.k64)
	}
}

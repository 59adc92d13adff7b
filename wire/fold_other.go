//go:build !amd64

package wire

const foldWholes, foldHalves = false, false

func initFold() {}

// crcLong advances the register over p with hash/crc32 (fold_amd64.go has a faster one
// for CPUs with VPCLMULQDQ).
func crcLong(crc uint32, p []byte) uint32 { return crcHash(crc, p) }

//go:build !linux && !windows

package netio

// truncatedErr reports whether a read failed only because the datagram was longer than
// the buffer: never here (the BSDs, macOS: the datagram is cut to the buffer silently).
func truncatedErr(error) bool { return false }

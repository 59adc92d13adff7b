//go:build !linux

package netio

// ListenSameHost is Linux-only: elsewhere it returns ErrSameHostUnsupported, and the
// caller goes on with inner.
func ListenSameHost(inner Conn, opts SameHostOptions) (Conn, error) {
	return nil, ErrSameHostUnsupported
}
